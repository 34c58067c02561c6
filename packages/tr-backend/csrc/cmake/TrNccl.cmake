# Locate NCCL, optionally. The extension never links it (csrc/cuda/nccl.cpp opens libnccl.so.2 at run time
# and declares the few types it uses), so a build without NCCL is complete. When found:
#   TR_NCCL_HEADER_DIR  the directory holding nccl.h ("" if none): nccl.cpp checks its declarations against it
#   TR_NCCL_RUNTIME     the library found at build time, a loader candidate after the Python-found ones ("")
# Search: TR_CUDA_LIBS_ROOT, the build interpreter's site-packages (nvidia/nccl from nvidia-nccl-cu12/13,
# nvidia/cu<major>), then the CUDA toolkit and the system.

include(TrSearchRoots)
tr_search_roots(_tr_nccl_roots VARS TR_CUDA_LIBS_ROOT SITE nvidia/nccl "nvidia/cu${CUDAToolkit_VERSION_MAJOR}")
find_path(TR_NCCL_INCLUDE_DIR nccl.h PATHS ${_tr_nccl_roots} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(TR_NCCL_LIBRARY NAMES nccl libnccl.so.2 PATHS ${_tr_nccl_roots} PATH_SUFFIXES lib lib64)

set(TR_NCCL_HEADER_DIR "")
set(TR_NCCL_RUNTIME "")
if(TR_NCCL_INCLUDE_DIR)
  set(TR_NCCL_HEADER_DIR "${TR_NCCL_INCLUDE_DIR}")
endif()
if(TR_NCCL_LIBRARY)
  set(TR_NCCL_RUNTIME "${TR_NCCL_LIBRARY}")
endif()
message(STATUS "tr-backend: NCCL header: ${TR_NCCL_HEADER_DIR}; library: ${TR_NCCL_RUNTIME} (both optional)")
