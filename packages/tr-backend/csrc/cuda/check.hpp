// Turning cudaError_t into tr::native::Error with a message that names the call and the cause.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "native/errors.hpp"

namespace tr::native::cuda {

// "out of memory (cudaErrorMemoryAllocation)"
std::string describe(cudaError_t error);

// Which ErrorKind a CUDA error code is: driver/device problems -> DeviceUnavailable, allocation failures ->
// OutOfMemory, the rest -> Backend.
ErrorKind kind_of(cudaError_t error);

// Clears the (non-sticky) error state and throws "<what> failed: <describe(error)>".
[[noreturn]] void throw_error(cudaError_t error, const std::string& what);

inline void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) throw_error(error, what);
}

// Makes `device` current for a scope and restores the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace tr::native::cuda
