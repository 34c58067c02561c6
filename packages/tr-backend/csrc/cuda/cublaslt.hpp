// cuBLASLt, loaded at run time (dlopen) rather than linked: the extension imports on machines without the
// library, and the CUDA backend reports a missing library as DeviceUnavailableError naming every path tried.
#pragma once

#include <cublasLt.h>

#include <string>
#include <vector>

namespace tr::native::cuda {

struct CublasLt {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtGetVersion) get_version = nullptr;
  decltype(&cublasLtGetStatusName) status_name = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  std::string path;  // the file that was loaded
};

// Paths tried before the built-in ones (e.g. the nvidia-cublas wheel found by Python). Call before lt().
void add_cublaslt_candidates(const std::vector<std::string>& paths);

// Loads the library once (thread-safe); throws DeviceUnavailable listing every path tried.
const CublasLt& lt();

// "CUBLAS_STATUS_NOT_SUPPORTED (15)"
std::string lt_status(cublasStatus_t status);

// Throws Backend "<what> failed: <status>" unless status is CUBLAS_STATUS_SUCCESS.
void lt_check(cublasStatus_t status, const char* what);

}  // namespace tr::native::cuda
