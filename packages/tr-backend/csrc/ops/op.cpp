// dtype names and sizes, factories' refusals, op scratch memory, launch checks.
#include <cuda_runtime_api.h>

#include <string>

#include "cuda/check.hpp"
#include "ops/op.hpp"

namespace tr::native {

void bad_args(const char* op, const std::string& message) {
  fail(ErrorKind::BadArgument, std::string("native op ") + op + ": " + message);
}

DeviceBuffer::DeviceBuffer(std::size_t nbytes) {
  const cudaError_t error = cudaMalloc(&ptr_, nbytes == 0 ? 256 : nbytes);
  if (error != cudaSuccess) {
    ptr_ = nullptr;
    cuda::throw_error(error, "cudaMalloc of " + std::to_string(nbytes) + " bytes of op scratch");
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
  cudaGetLastError();
}

void check_launch(const char* what) {
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) cuda::throw_error(error, std::string("kernel launch ") + what);
}

}  // namespace tr::native
