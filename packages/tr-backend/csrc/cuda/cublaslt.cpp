#include "cuda/cublaslt.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "cuda/library_path.hpp"
#include "native/errors.hpp"

#ifndef TR_CUBLASLT_BUILD_PATH
#define TR_CUBLASLT_BUILD_PATH ""
#endif

namespace tr::native::cuda {

namespace {

std::mutex g_mutex;
std::vector<std::string> g_extra;
CublasLt g_api;
bool g_loaded = false;

template <class F>
void bind(void* handle, F& slot, const char* symbol, std::string& missing) {
  slot = reinterpret_cast<F>(dlsym(handle, symbol));
  if (slot == nullptr) missing += std::string(missing.empty() ? "" : ", ") + symbol;
}

std::vector<std::string> candidates() {  // called with g_mutex held
  return library_candidates("TR_CUBLASLT_PATH", g_extra, TR_CUBLASLT_BUILD_PATH,
                            {"libcublasLt.so." + std::to_string(CUDART_VERSION / 1000), "libcublasLt.so"});
}

}  // namespace

void add_cublaslt_candidates(const std::vector<std::string>& paths) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_extra.insert(g_extra.end(), paths.begin(), paths.end());
}

const CublasLt& lt() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_loaded) return g_api;
  std::string tried;
  for (const std::string& path : candidates()) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += "\n  " + path + ": " + (why != nullptr ? why : "not loadable");
      continue;
    }
    CublasLt api;
    std::string missing;
    bind(handle, api.create, "cublasLtCreate", missing);
    bind(handle, api.destroy, "cublasLtDestroy", missing);
    bind(handle, api.get_version, "cublasLtGetVersion", missing);
    bind(handle, api.status_name, "cublasLtGetStatusName", missing);
    bind(handle, api.desc_create, "cublasLtMatmulDescCreate", missing);
    bind(handle, api.desc_destroy, "cublasLtMatmulDescDestroy", missing);
    bind(handle, api.desc_set, "cublasLtMatmulDescSetAttribute", missing);
    bind(handle, api.layout_create, "cublasLtMatrixLayoutCreate", missing);
    bind(handle, api.layout_destroy, "cublasLtMatrixLayoutDestroy", missing);
    bind(handle, api.pref_create, "cublasLtMatmulPreferenceCreate", missing);
    bind(handle, api.pref_destroy, "cublasLtMatmulPreferenceDestroy", missing);
    bind(handle, api.pref_set, "cublasLtMatmulPreferenceSetAttribute", missing);
    bind(handle, api.heuristic, "cublasLtMatmulAlgoGetHeuristic", missing);
    bind(handle, api.matmul, "cublasLtMatmul", missing);
    if (!missing.empty()) {
      tried += "\n  " + path + ": lacks " + missing;
      dlclose(handle);
      continue;
    }
    api.path = path;
    g_api = api;
    g_loaded = true;  // the handle stays open for the life of the process
    return g_api;
  }
  fail(ErrorKind::DeviceUnavailable,
       "cuBLASLt could not be loaded (install nvidia-cublas, or set TR_CUBLASLT_PATH); tried:" + tried);
}

std::string lt_status(cublasStatus_t status) {
  const char* name = (g_loaded && g_api.status_name != nullptr) ? g_api.status_name(status) : "cublasStatus";
  return std::string(name) + " (" + std::to_string(static_cast<int>(status)) + ")";
}

void lt_check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) fail(ErrorKind::Backend, std::string(what) + " failed: " + lt_status(status));
}

}  // namespace tr::native::cuda
