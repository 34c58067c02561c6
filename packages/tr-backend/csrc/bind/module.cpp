// tr.backend._native: build facts, CUDA status and device queries, DeviceArena, PinnedBuffer.
#include <nanobind/nanobind.h>

#include "bind/bindings.hpp"

NB_MODULE(_native, m) {
  m.doc() =
      "Native part of tr.backend. Imports on any machine: without a CUDA driver (or when built without CUDA) "
      "cuda_status() says why and every call that needs a device raises DeviceUnavailableError.";
  tr::native::bind::register_errors(m);
  tr::native::bind::bind_device(m);
  tr::native::bind::bind_memory(m);
}
