// Bindings of build_info, the CUDA status and the device queries.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bind/bindings.hpp"
#include "native/build_info.hpp"
#include "native/device.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tr::native::bind {

void bind_device(nb::module_& m) {
  nb::class_<DeviceProperties>(m, "DeviceProperties", "Static properties of one CUDA device.")
      .def_ro("index", &DeviceProperties::index)
      .def_ro("name", &DeviceProperties::name)
      .def_ro("major", &DeviceProperties::major)
      .def_ro("minor", &DeviceProperties::minor)
      .def_prop_ro("capability", [](const DeviceProperties& p) { return nb::make_tuple(p.major, p.minor); },
                   "Compute capability as (major, minor), e.g. (9, 0) for H100/H200.")
      .def_ro("total_memory", &DeviceProperties::total_memory, "Global memory in bytes.")
      .def_ro("multiprocessor_count", &DeviceProperties::multiprocessor_count)
      .def_ro("l2_cache_bytes", &DeviceProperties::l2_cache_bytes)
      .def_ro("shared_memory_per_block_optin", &DeviceProperties::shared_memory_per_block_optin)
      .def_ro("pci_bus_id", &DeviceProperties::pci_bus_id)
      .def("__repr__", [](const DeviceProperties& p) {
        return "DeviceProperties(index=" + std::to_string(p.index) + ", name='" + p.name + "', capability=(" +
               std::to_string(p.major) + ", " + std::to_string(p.minor) + "), total_memory=" +
               std::to_string(p.total_memory) + ", multiprocessor_count=" + std::to_string(p.multiprocessor_count) +
               ")";
      });

  m.def(
      "build_info",
      [] {
        const BuildInfo& b = build_info();
        nb::dict d;
        d["version"] = b.version;
        d["cuda_compiled"] = b.cuda_compiled;
        d["cuda_runtime_version"] = b.cuda_runtime_version;
        d["cuda_archs"] = b.cuda_archs;
        d["cuda_reason"] = b.cuda_reason;
        d["cuda_compiler"] = b.cuda_compiler;
        d["cxx_compiler"] = b.cxx_compiler;
        d["build_type"] = b.build_type;
        d["cudart"] = b.cuda_compiled ? "static" : "";
        return d;
      },
      "What this module was built with: cuda_compiled, cuda_runtime_version (CUDART_VERSION, e.g. 13000), "
      "cuda_archs (e.g. ['80', '90']), cuda_reason, compilers, build type. Needs no driver.");

  m.def(
      "cuda_status",
      [] {
        const CudaStatus& s = cuda_status();
        return nb::make_tuple(s.available, s.reason);
      },
      "(available, reason): whether a CUDA device can be used, and why not. Probed once; never raises.");
  m.def("device_count", &device_count, "Number of visible CUDA devices; 0 when CUDA is unavailable. Never raises.");
  m.def("runtime_version", &runtime_version, "CUDA runtime version linked in (e.g. 13000); needs no driver.");
  m.def("driver_version", &driver_version, "CUDA version the installed driver supports; 0 when no driver.");
  m.def("device_properties", &device_properties, "device"_a = 0,
        "Properties of one device; raises DeviceUnavailableError without a driver or device.");
  m.def("free_memory", &free_memory, "device"_a = 0, "Free memory of one device in bytes (cudaMemGetInfo).");
  m.def("kernel_arch", &kernel_arch, "device"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
        "Runs a probe kernel on the device and returns the __CUDA_ARCH__ it was compiled for (e.g. 900).");
}

}  // namespace tr::native::bind
