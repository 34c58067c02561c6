// Driver and device queries of the CUDA build. The first query probes the driver once (cudaGetDeviceCount)
// and keeps the answer: a machine without a driver gets a reason string, not a crash.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "cuda/check.hpp"
#include "native/device.hpp"

namespace tr::native {

namespace {

// 13000 -> "13.0"
std::string version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string visible_devices_note() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return "";
  return std::string(" (CUDA_VISIBLE_DEVICES='") + visible + "')";
}

CudaStatus probe() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    std::string cause;
    if (error == cudaErrorInsufficientDriver) {
      cause = driver == 0 ? std::string("no CUDA driver")
                          : "CUDA driver too old (it supports CUDA " + version_text(driver) +
                                ", this module needs " + version_text(CUDART_VERSION) + ")";
    } else if (error == cudaErrorNoDevice) {
      cause = "no CUDA device" + visible_devices_note();
    } else {
      cause = "CUDA initialisation failed";
    }
    return {false, cause + ": cudaGetDeviceCount failed: " + cuda::describe(error), 0};
  }
  if (count <= 0) return {false, "no CUDA device visible" + visible_devices_note(), 0};
  int driver = 0;
  cudaDriverGetVersion(&driver);
  return {true,
          std::to_string(count) + " CUDA device(s), driver " + version_text(driver) + ", runtime " +
              version_text(CUDART_VERSION),
          count};
}

}  // namespace

const CudaStatus& cuda_status() {
  static std::once_flag once;
  static CudaStatus status;
  std::call_once(once, [] { status = probe(); });
  return status;
}

int device_count() { return cuda_status().device_count; }

int runtime_version() {
  int version = 0;
  cuda::check(cudaRuntimeGetVersion(&version), "cudaRuntimeGetVersion");
  return version;
}

int driver_version() {
  int version = 0;
  cuda::check(cudaDriverGetVersion(&version), "cudaDriverGetVersion");
  return version;
}

void require_device(int device) {
  if (device < 0) fail(ErrorKind::BadArgument, "CUDA device index must be >= 0, got " + std::to_string(device));
  const CudaStatus& status = cuda_status();
  if (!status.available) fail(ErrorKind::DeviceUnavailable, "CUDA unavailable: " + status.reason);
  if (device >= status.device_count) {
    fail(ErrorKind::DeviceUnavailable, "CUDA device " + std::to_string(device) + " does not exist: " +
                                           std::to_string(status.device_count) + " device(s) visible");
  }
}

DeviceProperties device_properties(int device) {
  require_device(device);
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  char bus_id[32] = {0};
  cuda::check(cudaDeviceGetPCIBusId(bus_id, static_cast<int>(sizeof(bus_id)), device), "cudaDeviceGetPCIBusId");
  DeviceProperties out;
  out.index = device;
  out.name = prop.name;
  out.major = prop.major;
  out.minor = prop.minor;
  out.total_memory = prop.totalGlobalMem;
  out.multiprocessor_count = prop.multiProcessorCount;
  out.l2_cache_bytes = prop.l2CacheSize;
  out.shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  out.pci_bus_id = bus_id;
  return out;
}

std::size_t free_memory(int device) {
  require_device(device);
  cuda::DeviceGuard guard(device);
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  cuda::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return free_bytes;
}

}  // namespace tr::native
