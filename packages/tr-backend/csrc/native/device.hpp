// Driver and device queries. Implemented by cuda/status.cpp, or by nocuda/stubs.cpp in a CPU-only build.
// Nothing here throws for a missing driver except the functions that need a device.
#pragma once

#include <cstddef>
#include <string>

namespace tr::native {

struct CudaStatus {
  bool available;    // at least one device can be used
  std::string reason;  // why not (or a one-line summary when available)
  int device_count;  // 0 when unavailable
};

// Probed once per process (thread-safe) and cached.
const CudaStatus& cuda_status();
int device_count();  // 0 when unavailable, never throws

int runtime_version();  // cudaRuntimeGetVersion; works without a driver
int driver_version();   // cudaDriverGetVersion; 0 when no driver is installed

// Throws DeviceUnavailable (with cuda_status().reason) when CUDA is unusable or `device` is not a visible
// device, BadArgument when `device` is negative.
void require_device(int device);

struct DeviceProperties {
  int index;
  std::string name;
  int major;
  int minor;
  std::size_t total_memory;
  int multiprocessor_count;
  int l2_cache_bytes;
  std::size_t shared_memory_per_block_optin;
  std::string pci_bus_id;
};

DeviceProperties device_properties(int device);
std::size_t free_memory(int device);

// Launches a one-thread kernel that writes __CUDA_ARCH__: proves a cubin for this device was embedded
// (or PTX was JIT-compiled) and tells which one ran.
int kernel_arch(int device);

}  // namespace tr::native
