# Locate cuBLAS and cuBLASLt for the GEMM kernels. The extension does not link them: cuBLASLt is opened at
# run time (csrc/cuda/cublaslt.cpp), so the module imports where the library is missing. This defines the
# targets tr::cublas and tr::cublasLt, sets TR_CUBLAS_FOUND, and sets for the build:
#   TR_CUBLASLT_HEADER_DIR   the directory holding cublasLt.h ("" if none was found)
#   TR_CUBLASLT_RUNTIME      the library found at build time, the loader's first built-in candidate
#
# Search order:
#   1. the CUDA toolkit (CUDA::cublas, CUDA::cublasLt from FindCUDAToolkit);
#   2. NVIDIA's wheels in the build interpreter's site-packages or under TR_CUDA_LIBS_ROOT (CMake or
#      environment variable): nvidia/cu<major>/{include,lib} (CUDA 13 wheels, e.g. nvidia-cublas) and
#      nvidia/cublas/{include,lib} (CUDA 12 wheels, nvidia-cublas-cu12). Wheels ship only versioned
#      libraries (libcublasLt.so.13), so those names are searched explicitly.

include(TrSearchRoots)
set(TR_CUBLAS_FOUND OFF)

function(_tr_add_cublas_target name library include_dir)
  if(NOT TARGET tr::${name})
    add_library(tr::${name} SHARED IMPORTED GLOBAL)
    set_target_properties(tr::${name} PROPERTIES
      IMPORTED_LOCATION "${library}"
      INTERFACE_INCLUDE_DIRECTORIES "${include_dir}")
  endif()
endfunction()

if(TARGET CUDA::cublas AND TARGET CUDA::cublasLt)
  add_library(tr::cublas INTERFACE IMPORTED GLOBAL)
  target_link_libraries(tr::cublas INTERFACE CUDA::cublas)
  add_library(tr::cublasLt INTERFACE IMPORTED GLOBAL)
  target_link_libraries(tr::cublasLt INTERFACE CUDA::cublasLt)
  set(TR_CUBLAS_FOUND ON)
  set(_tr_cublas_where "CUDA toolkit ${CUDAToolkit_LIBRARY_DIR}")
else()
  tr_search_roots(_tr_roots VARS TR_CUDA_LIBS_ROOT
                  SITE "nvidia/cu${CUDAToolkit_VERSION_MAJOR}" nvidia/cublas)
  set(_tr_major "${CUDAToolkit_VERSION_MAJOR}")
  find_path(TR_CUBLASLT_INCLUDE_DIR cublasLt.h PATHS ${_tr_roots} PATH_SUFFIXES include NO_DEFAULT_PATH)
  find_library(TR_CUBLAS_LIBRARY NAMES cublas libcublas.so.${_tr_major}
               PATHS ${_tr_roots} PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
  find_library(TR_CUBLASLT_LIBRARY NAMES cublasLt libcublasLt.so.${_tr_major}
               PATHS ${_tr_roots} PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
  if(TR_CUBLASLT_INCLUDE_DIR AND TR_CUBLAS_LIBRARY AND TR_CUBLASLT_LIBRARY)
    _tr_add_cublas_target(cublas "${TR_CUBLAS_LIBRARY}" "${TR_CUBLASLT_INCLUDE_DIR}")
    _tr_add_cublas_target(cublasLt "${TR_CUBLASLT_LIBRARY}" "${TR_CUBLASLT_INCLUDE_DIR}")
    set(TR_CUBLAS_FOUND ON)
    set(_tr_cublas_where "${TR_CUBLASLT_LIBRARY}")
  else()
    set(_tr_cublas_where "not found (toolkit, site-packages nvidia/ wheels, TR_CUDA_LIBS_ROOT)")
  endif()
endif()

set(TR_CUBLASLT_HEADER_DIR "")
set(TR_CUBLASLT_RUNTIME "")
if(TR_CUBLAS_FOUND AND TR_CUBLASLT_INCLUDE_DIR)
  set(TR_CUBLASLT_HEADER_DIR "${TR_CUBLASLT_INCLUDE_DIR}")
  set(TR_CUBLASLT_RUNTIME "${TR_CUBLASLT_LIBRARY}")
elseif(TR_CUBLAS_FOUND)
  set(TR_CUBLASLT_HEADER_DIR "${CUDAToolkit_INCLUDE_DIRS}")
  if(CUDA_cublasLt_LIBRARY)
    set(TR_CUBLASLT_RUNTIME "${CUDA_cublasLt_LIBRARY}")
  endif()
else()
  # No library, but the header may still be in the toolkit: enough to build, the library is found at run time.
  find_path(TR_CUBLASLT_TOOLKIT_HEADER cublasLt.h PATHS ${CUDAToolkit_INCLUDE_DIRS} NO_DEFAULT_PATH)
  if(TR_CUBLASLT_TOOLKIT_HEADER)
    set(TR_CUBLASLT_HEADER_DIR "${TR_CUBLASLT_TOOLKIT_HEADER}")
  endif()
endif()

message(STATUS "tr-backend: cuBLAS/cuBLASLt: ${_tr_cublas_where}")
