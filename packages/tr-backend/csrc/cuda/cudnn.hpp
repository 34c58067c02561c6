// cuDNN, loaded at run time (dlopen) like cuBLASLt and NCCL: the extension imports where libcudnn is missing.
// The convolutions use the cuDNN frontend's graph API (header-only, csrc/ops/conv_cudnn.cpp) in its dynamic
// loading mode: every cuDNN call goes through the handle opened here. Built only when the build found both
// cudnn.h and cudnn_frontend.h (TR_HAVE_CUDNN_FRONTEND); otherwise convolutions run the direct kernels.
#pragma once

#include <string>
#include <vector>

namespace tr::native::cuda {

// True when this build compiled the cuDNN frontend convolutions.
bool cudnn_frontend_built();

// Paths tried before the built-in ones (e.g. the nvidia-cudnn wheel found by Python). Call before cudnn().
void add_cudnn_candidates(const std::vector<std::string>& paths);

// Every path the loader would try, in order: TR_CUDNN_PATH, the added ones, the build's, the system's.
std::vector<std::string> cudnn_candidates();

struct Cudnn {
  void* handle = nullptr;  // dlopen handle of libcudnn.so.9
  long version = 0;        // cudnnGetVersion(), e.g. 91900
  std::string path;
};

// Loads cuDNN once (thread-safe); throws DeviceUnavailable listing every path tried, or naming a version
// older than 9.
const Cudnn& cudnn();

}  // namespace tr::native::cuda
