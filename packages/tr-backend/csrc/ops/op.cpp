// dtype names and sizes, factories' refusals, op scratch memory, launch checks.
#include <cuda_runtime_api.h>

#include <string>

#include "cuda/check.hpp"
#include "ops/op.hpp"

namespace tr::native {

int dtype_size(DT dt) {
  switch (dt) {
    case DT::F32:
    case DT::I32:
      return 4;
    case DT::F16:
    case DT::BF16:
      return 2;
    case DT::I8:
    case DT::U8:
      return 1;
  }
  return 0;
}

const char* dtype_name(DT dt) {
  switch (dt) {
    case DT::F32:
      return "FP32";
    case DT::F16:
      return "FP16";
    case DT::BF16:
      return "BF16";
    case DT::I8:
      return "INT8";
    case DT::I32:
      return "INT32";
    case DT::U8:
      return "UINT8";
  }
  return "?";
}

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
