// PinnedBuffer: page-locked host memory for the TransferStation's batches.
#include <cuda_runtime_api.h>

#include <string>

#include "cuda/check.hpp"
#include "native/device.hpp"
#include "native/memory.hpp"

namespace tr::native {

PinnedBuffer::PinnedBuffer(std::size_t nbytes) : size_(nbytes) {
  if (nbytes == 0) fail(ErrorKind::BadArgument, "PinnedBuffer size must be > 0 bytes, got 0");
  const CudaStatus& status = cuda_status();
  if (!status.available) fail(ErrorKind::DeviceUnavailable, "CUDA unavailable: " + status.reason);
  // Portable: usable from every device's context, not only the current one.
  const cudaError_t error = cudaHostAlloc(&ptr_, nbytes, cudaHostAllocPortable);
  if (error != cudaSuccess) {
    ptr_ = nullptr;
    cuda::throw_error(error, "cudaHostAlloc of " + std::to_string(nbytes) + " bytes");
  }
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
  cudaGetLastError();
}

}  // namespace tr::native
