// tr.backend._native: build facts, CUDA status and device queries, DeviceArena, PinnedBuffer, and (CUDA builds)
// the execution objects of the CUDA backend: Context, Graph, Event, make_op.
#include <nanobind/nanobind.h>

#include "bind/bindings.hpp"
#include "tr_build_config.hpp"

NB_MODULE(_native, m) {
  m.doc() =
      "Native part of tr.backend. Imports on any machine: without a CUDA driver (or when built without CUDA) "
      "cuda_status() says why and every call that needs a device raises DeviceUnavailableError.";
  tr::native::bind::register_errors(m);
  tr::native::bind::bind_device(m);
  tr::native::bind::bind_memory(m);
#if TR_BUILD_WITH_CUDA
  tr::native::bind::bind_ops(m);
#endif
  tr::native::bind::bind_op_args(m);  // after bind_ops: make_op returns its Op
}
