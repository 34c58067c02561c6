// DeviceArena: the single device allocation that a compiled plan's tensors live in.
#include <cuda_runtime_api.h>

#include <string>

#include "cuda/check.hpp"
#include "native/device.hpp"
#include "native/memory.hpp"

namespace tr::native {

namespace {

std::size_t round_up(std::size_t n, std::size_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace

DeviceArena::DeviceArena(std::size_t nbytes, int device) : device_(device) {
  if (nbytes == 0) fail(ErrorKind::BadArgument, "DeviceArena size must be > 0 bytes, got 0");
  require_device(device);
  size_ = round_up(nbytes, kArenaAlignment);
  cuda::DeviceGuard guard(device);
  const cudaError_t error = cudaMalloc(&ptr_, size_);
  if (error != cudaSuccess) {
    ptr_ = nullptr;
    cudaGetLastError();
    std::string message = "cudaMalloc of " + std::to_string(size_) + " bytes on device " + std::to_string(device) +
                          " failed: " + cuda::describe(error);
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      message += "; " + std::to_string(free_bytes) + " of " + std::to_string(total_bytes) + " bytes free";
    }
    cudaGetLastError();
    fail(cuda::kind_of(error), message);
  }
  if (ptr() % kArenaAlignment != 0) {
    cudaFree(ptr_);
    ptr_ = nullptr;
    fail(ErrorKind::Backend, "cudaMalloc returned a pointer not aligned to " + std::to_string(kArenaAlignment) +
                                 " bytes");
  }
}

DeviceArena::~DeviceArena() {
  if (ptr_ == nullptr) return;
  // Errors are ignored: a destructor cannot raise, and at interpreter exit the runtime may be unloading.
  int previous = -1;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                        cudaSetDevice(device_) == cudaSuccess;
  cudaFree(ptr_);
  if (switched) cudaSetDevice(previous);
  cudaGetLastError();
}

void DeviceArena::check_range(std::size_t offset, std::size_t nbytes, const char* what) const {
  if (offset > size_ || nbytes > size_ - offset) {
    fail(ErrorKind::BadArgument, std::string(what) + ": byte range [" + std::to_string(offset) + ", " +
                                     std::to_string(offset) + " + " + std::to_string(nbytes) +
                                     ") exceeds the arena of " + std::to_string(size_) + " bytes");
  }
}

void DeviceArena::memset(int value, std::size_t offset, std::size_t nbytes) {
  if (value < 0 || value > 255) {
    fail(ErrorKind::BadArgument, "memset value must be in [0, 255], got " + std::to_string(value));
  }
  check_range(offset, nbytes, "memset");
  cuda::DeviceGuard guard(device_);
  cuda::check(cudaMemset(static_cast<char*>(ptr_) + offset, value, nbytes), "cudaMemset");
  // cudaMemset is asynchronous to the host and runs on the legacy stream, which our non-blocking streams do not
  // wait for: without this a graph launched next could read the bytes before (or be overwritten after) the set.
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemset");
}

void DeviceArena::upload(const void* src, std::size_t nbytes, std::size_t offset) {
  check_range(offset, nbytes, "upload");
  if (nbytes == 0) return;
  cuda::DeviceGuard guard(device_);
  cuda::check(cudaMemcpy(static_cast<char*>(ptr_) + offset, src, nbytes, cudaMemcpyHostToDevice),
              "cudaMemcpy host->device");
  // From pageable memory cudaMemcpy returns once the bytes are staged, before the DMA lands, on the legacy stream
  // our non-blocking streams do not wait for: a graph launched next could run first and its outputs be
  // overwritten (seen as poison left in a kernel's output on the H100). Returning only when they are on the device
  // makes write() mean written.
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemcpy host->device");
}

void DeviceArena::download(void* dst, std::size_t nbytes, std::size_t offset) const {
  check_range(offset, nbytes, "download");
  if (nbytes == 0) return;
  cuda::DeviceGuard guard(device_);
  cuda::check(cudaMemcpy(dst, static_cast<const char*>(ptr_) + offset, nbytes, cudaMemcpyDeviceToHost),
              "cudaMemcpy device->host");
}

void DeviceArena::synchronize() const {
  cuda::DeviceGuard guard(device_);
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

}  // namespace tr::native
