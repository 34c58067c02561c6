// Device and pinned host memory owned by C++ objects (one allocation each). Implemented in cuda/arena.cpp
// and cuda/pinned.cpp, or by nocuda/stubs.cpp whose constructors throw DeviceUnavailable.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tr::native {

inline constexpr std::size_t kArenaAlignment = 256;

// One cudaMalloc of `nbytes` rounded up to kArenaAlignment, on one device. Copies are synchronous.
class DeviceArena {
 public:
  DeviceArena(std::size_t nbytes, int device);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  std::uintptr_t ptr() const { return reinterpret_cast<std::uintptr_t>(ptr_); }
  std::size_t size() const { return size_; }
  int device() const { return device_; }

  // memset and upload return when the bytes are on the device (ordered before any later launch on any stream).
  void memset(int value, std::size_t offset, std::size_t nbytes);
  void upload(const void* src, std::size_t nbytes, std::size_t offset);
  void download(void* dst, std::size_t nbytes, std::size_t offset) const;
  void synchronize() const;

 private:
  void check_range(std::size_t offset, std::size_t nbytes, const char* what) const;

  void* ptr_ = nullptr;
  std::size_t size_ = 0;
  int device_ = 0;
};

// cudaHostAlloc'd (page-locked) host memory: host<->device copies from it run at full bus speed and can be
// asynchronous.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t nbytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return ptr_; }
  std::uintptr_t ptr() const { return reinterpret_cast<std::uintptr_t>(ptr_); }
  std::size_t size() const { return size_; }

 private:
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace tr::native
