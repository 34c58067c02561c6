// The probe kernel: one thread writes the __CUDA_ARCH__ it was compiled for. It is also the device code
// that puts one cubin per architecture into the module, which tests inspect with cuobjdump.
#include <cuda_runtime.h>

#include "cuda/check.hpp"
#include "native/device.hpp"

namespace tr::native {

namespace {

__global__ void write_arch(int* out) {
#ifdef __CUDA_ARCH__
  *out = __CUDA_ARCH__;
#endif
}

}  // namespace

int kernel_arch(int device) {
  require_device(device);
  cuda::DeviceGuard guard(device);
  int* result = nullptr;
  cuda::check(cudaMalloc(&result, sizeof(int)), "cudaMalloc(probe)");
  int arch = 0;
  cudaError_t error = cudaMemset(result, 0, sizeof(int));
  if (error == cudaSuccess) {
    write_arch<<<1, 1>>>(result);
    error = cudaGetLastError();
  }
  if (error == cudaSuccess) error = cudaMemcpy(&arch, result, sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(result);
  if (error == cudaErrorNoKernelImageForDevice) {
    cuda::throw_error(error, "probe kernel launch on device " + std::to_string(device) +
                                 " (the module has no cubin or PTX for this GPU; rebuild with TR_CUDA_ARCHS "
                                 "including its architecture)");
  }
  cuda::check(error, "probe kernel");
  return arch;
}

}  // namespace tr::native
