// What this build of the module was compiled with (fixed at build time, needs no driver).
#pragma once

#include <string>
#include <vector>

namespace tr::native {

struct BuildInfo {
  bool cuda_compiled;
  int cuda_runtime_version;  // CUDART_VERSION compiled against, e.g. 13000; 0 without CUDA
  std::vector<std::string> cuda_archs;  // CMAKE_CUDA_ARCHITECTURES, e.g. {"80", "90"}
  std::string cuda_reason;   // why CUDA is (not) compiled in
  std::string cuda_compiler;
  std::string cxx_compiler;
  std::string build_type;
  std::string version;
};

const BuildInfo& build_info();

}  // namespace tr::native
