# Locate cuDNN's headers and the cuDNN frontend (header-only), optionally. The extension never links cuDNN:
# csrc/cuda/cudnn.cpp opens libcudnn.so.9 at run time and the frontend runs in its dynamic-loading mode. When
# both headers are found the convolutions are compiled against them (csrc/ops/conv_cudnn.cpp); otherwise they
# use the direct kernels only. Sets:
#   TR_CUDNN_FRONTEND_FOUND   ON when both headers were found
#   TR_CUDNN_INCLUDE_DIRS     the directories holding cudnn.h and cudnn_frontend.h
#   TR_CUDNN_RUNTIME          libcudnn.so.9 found at build time, a loader candidate ("" if none)
# Search: TR_CUDNN_FRONTEND_INCLUDE / TR_CUDNN_ROOT (CMake or environment variables), the build interpreter's
# site-packages (nvidia/cudnn from nvidia-cudnn-cu13, include/ from nvidia-cudnn-frontend), the CUDA toolkit.

include(TrSearchRoots)
tr_search_roots(_tr_cudnn_roots VARS TR_CUDNN_ROOT TR_CUDA_LIBS_ROOT
                SITE nvidia/cudnn "nvidia/cu${CUDAToolkit_VERSION_MAJOR}")
tr_search_roots(_tr_fe_roots VARS TR_CUDNN_FRONTEND_INCLUDE SITE include .)
find_path(TR_CUDNN_INCLUDE_DIR cudnn.h PATHS ${_tr_cudnn_roots} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_path(TR_CUDNN_FE_INCLUDE_DIR cudnn_frontend.h PATHS ${_tr_fe_roots} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(TR_CUDNN_LIBRARY NAMES libcudnn.so.9 cudnn PATHS ${_tr_cudnn_roots} PATH_SUFFIXES lib lib64)

set(TR_CUDNN_FRONTEND_FOUND OFF)
set(TR_CUDNN_INCLUDE_DIRS "")
set(TR_CUDNN_RUNTIME "")
if(TR_CUDNN_INCLUDE_DIR AND TR_CUDNN_FE_INCLUDE_DIR)
  set(TR_CUDNN_FRONTEND_FOUND ON)
  set(TR_CUDNN_INCLUDE_DIRS "${TR_CUDNN_FE_INCLUDE_DIR}" "${TR_CUDNN_INCLUDE_DIR}")
endif()
if(TR_CUDNN_LIBRARY)
  set(TR_CUDNN_RUNTIME "${TR_CUDNN_LIBRARY}")
endif()
message(STATUS "tr-backend: cuDNN header: ${TR_CUDNN_INCLUDE_DIR}; frontend: ${TR_CUDNN_FE_INCLUDE_DIR}; "
               "library: ${TR_CUDNN_RUNTIME} (convolutions use cuDNN: ${TR_CUDNN_FRONTEND_FOUND})")
