// The CPU-only build: the same interface as cuda/*.cpp, reporting that CUDA was not compiled in. Queries
// answer "unavailable"; everything that needs a device throws DeviceUnavailable with the build's reason.
#include <string>

#include "native/build_info.hpp"
#include "native/device.hpp"
#include "native/errors.hpp"
#include "native/memory.hpp"

namespace tr::native {

namespace {

std::string not_compiled() {
  return "tr.backend._native was built without CUDA: " + build_info().cuda_reason;
}

[[noreturn]] void unavailable() { fail(ErrorKind::DeviceUnavailable, "CUDA unavailable: " + not_compiled()); }

}  // namespace

const CudaStatus& cuda_status() {
  static const CudaStatus status{false, not_compiled(), 0};
  return status;
}

int device_count() { return 0; }
int runtime_version() { unavailable(); }
int driver_version() { unavailable(); }

void require_device(int device) {
  if (device < 0) fail(ErrorKind::BadArgument, "CUDA device index must be >= 0, got " + std::to_string(device));
  unavailable();
}

DeviceProperties device_properties(int device) {
  require_device(device);
  return {};
}

std::size_t free_memory(int device) {
  require_device(device);
  return 0;
}

int kernel_arch(int device) {
  require_device(device);
  return 0;
}

DeviceArena::DeviceArena(std::size_t nbytes, int device) : size_(nbytes), device_(device) {
  if (nbytes == 0) fail(ErrorKind::BadArgument, "DeviceArena size must be > 0 bytes, got 0");
  require_device(device);
}
DeviceArena::~DeviceArena() = default;
void DeviceArena::check_range(std::size_t, std::size_t, const char*) const { unavailable(); }
void DeviceArena::memset(int, std::size_t, std::size_t) { unavailable(); }
void DeviceArena::upload(const void*, std::size_t, std::size_t) { unavailable(); }
void DeviceArena::download(void*, std::size_t, std::size_t) const { unavailable(); }
void DeviceArena::synchronize() const { unavailable(); }

PinnedBuffer::PinnedBuffer(std::size_t nbytes) : size_(nbytes) {
  if (nbytes == 0) fail(ErrorKind::BadArgument, "PinnedBuffer size must be > 0 bytes, got 0");
  unavailable();
}
PinnedBuffer::~PinnedBuffer() = default;

}  // namespace tr::native
