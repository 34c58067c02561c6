#include "cuda/cudnn.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "cuda/library_path.hpp"
#include "native/errors.hpp"

#ifndef TR_CUDNN_BUILD_PATH
#define TR_CUDNN_BUILD_PATH ""
#endif

#ifdef TR_HAVE_CUDNN_FRONTEND
// The frontend's dynamic-loading shim resolves every cuDNN symbol from this handle.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend
#endif

namespace tr::native::cuda {

namespace {

std::mutex g_mutex;
std::vector<std::string> g_extra;
Cudnn g_lib;
bool g_loaded = false;

}  // namespace

bool cudnn_frontend_built() {
#ifdef TR_HAVE_CUDNN_FRONTEND
  return true;
#else
  return false;
#endif
}

void add_cudnn_candidates(const std::vector<std::string>& paths) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_extra.insert(g_extra.end(), paths.begin(), paths.end());
}

std::vector<std::string> cudnn_candidates() {
  std::vector<std::string> added;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    added = g_extra;
  }
  return library_candidates("TR_CUDNN_PATH", added, TR_CUDNN_BUILD_PATH, {"libcudnn.so.9"});
}

const Cudnn& cudnn() {
  const std::vector<std::string> paths = cudnn_candidates();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_loaded) return g_lib;
  std::string tried;
  for (const std::string& path : paths) {
    // RTLD_GLOBAL: libcudnn.so.9 opens its engine libraries itself, from its own directory
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += "\n  " + path + ": " + (why != nullptr ? why : "not loadable");
      continue;
    }
    using GetVersion = std::size_t (*)();
    auto get_version = reinterpret_cast<GetVersion>(dlsym(handle, "cudnnGetVersion"));
    const long version = get_version != nullptr ? static_cast<long>(get_version()) : 0;
    if (version < 90000) {
      tried += "\n  " + path + ": cuDNN " + std::to_string(version) + ", need 9.0 or newer";
      dlclose(handle);
      continue;
    }
    g_lib = Cudnn{handle, version, path};
#ifdef TR_HAVE_CUDNN_FRONTEND
    cudnn_frontend::cudnn_dlhandle = handle;
#endif
    g_loaded = true;  // stays open for the life of the process
    return g_lib;
  }
  fail(ErrorKind::DeviceUnavailable,
       "cuDNN could not be loaded (install nvidia-cudnn-cu13, or set TR_CUDNN_PATH to libcudnn.so.9); tried:" + tried);
}

}  // namespace tr::native::cuda
