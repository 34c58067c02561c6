#include "cuda/check.hpp"

namespace tr::native::cuda {

std::string describe(cudaError_t error) {
  return std::string(cudaGetErrorString(error)) + " (" + cudaGetErrorName(error) + ")";
}

ErrorKind kind_of(cudaError_t error) {
  switch (error) {
    case cudaErrorMemoryAllocation:
      return ErrorKind::OutOfMemory;
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInitializationError:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemNotReady:
      return ErrorKind::DeviceUnavailable;
    default:
      return ErrorKind::Backend;
  }
}

void throw_error(cudaError_t error, const std::string& what) {
  cudaGetLastError();  // reset the last-error slot so the next call does not report this one again
  fail(kind_of(error), what + " failed: " + describe(error));
}

DeviceGuard::DeviceGuard(int device) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) check(cudaSetDevice(device), ("cudaSetDevice(" + std::to_string(device) + ")").c_str());
}

DeviceGuard::~DeviceGuard() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
}

}  // namespace tr::native::cuda
