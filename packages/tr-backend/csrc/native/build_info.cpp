#include "native/build_info.hpp"

#include <sstream>

#include "tr_build_config.hpp"

#if TR_BUILD_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tr::native {

namespace {

std::vector<std::string> split_archs(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ';')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

const BuildInfo& build_info() {
  static const BuildInfo info = [] {
    BuildInfo b;
    b.cuda_compiled = TR_BUILD_WITH_CUDA != 0;
#if TR_BUILD_WITH_CUDA
    b.cuda_runtime_version = CUDART_VERSION;
#else
    b.cuda_runtime_version = 0;
#endif
    b.cuda_archs = split_archs(TR_BUILD_CUDA_ARCHS);
    b.cuda_reason = TR_BUILD_CUDA_REASON;
    b.cuda_compiler = TR_BUILD_CUDA_COMPILER;
    b.cxx_compiler = TR_BUILD_CXX_COMPILER;
    b.build_type = TR_BUILD_TYPE;
    b.version = TR_BUILD_VERSION;
    return b;
  }();
  return info;
}

}  // namespace tr::native
