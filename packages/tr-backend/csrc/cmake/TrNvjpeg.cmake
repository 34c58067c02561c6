# Optional: nvJPEG's header (to check csrc/cuda/jpeg_decoder.cpp's declarations of its ABI) and library (the
# run-time loader's built-in candidate). The decoder opens the library at run time, so neither is needed to
# build. Sets TR_NVJPEG_HEADER_DIR and TR_NVJPEG_RUNTIME ("" when not found).
#
# Search order: the CUDA toolkit, then NVIDIA's wheels in the build interpreter's site-packages or under
# TR_CUDA_LIBS_ROOT: nvidia/cu<major>/{include,lib} (nvidia-nvjpeg for CUDA 13) and nvidia/nvjpeg (CUDA 12).
include(TrSearchRoots)
tr_search_roots(_tr_nvjpeg_roots VARS TR_CUDA_LIBS_ROOT SITE "nvidia/cu${CUDAToolkit_VERSION_MAJOR}" nvidia/nvjpeg)
find_path(TR_NVJPEG_INCLUDE_DIR nvjpeg.h PATHS ${CUDAToolkit_INCLUDE_DIRS} ${_tr_nvjpeg_roots}
          PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(TR_NVJPEG_LIBRARY NAMES nvjpeg libnvjpeg.so.${CUDAToolkit_VERSION_MAJOR}
             PATHS ${CUDAToolkit_LIBRARY_DIR} ${_tr_nvjpeg_roots} PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
set(TR_NVJPEG_HEADER_DIR "")
set(TR_NVJPEG_RUNTIME "")
if(TR_NVJPEG_INCLUDE_DIR)
  set(TR_NVJPEG_HEADER_DIR "${TR_NVJPEG_INCLUDE_DIR}")
endif()
if(TR_NVJPEG_LIBRARY)
  set(TR_NVJPEG_RUNTIME "${TR_NVJPEG_LIBRARY}")
endif()
message(STATUS "tr-backend: nvJPEG header: ${TR_NVJPEG_INCLUDE_DIR}, library: ${TR_NVJPEG_LIBRARY}")
