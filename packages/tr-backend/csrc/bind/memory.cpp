// Bindings of DeviceArena and PinnedBuffer. Host data crosses as any C-contiguous CPU array (numpy,
// anything with DLPack or the buffer protocol); copies run with the GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bind/bindings.hpp"
#include "native/errors.hpp"
#include "native/memory.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tr::native::bind {

namespace {

using HostSource = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using HostTarget = nb::ndarray<nb::c_contig, nb::device::cpu>;
using ByteView = nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>, nb::c_contig>;

std::string hex(std::uintptr_t value) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  do {
    out.insert(out.begin(), digits[value & 0xF]);
    value >>= 4;
  } while (value != 0);
  return "0x" + out;
}

}  // namespace

void bind_memory(nb::module_& m) {
  m.attr("ARENA_ALIGNMENT") = kArenaAlignment;

  nb::class_<DeviceArena>(m, "DeviceArena",
                          "One device allocation (cudaMalloc) of `nbytes` rounded up to ARENA_ALIGNMENT bytes.")
      .def(nb::init<std::size_t, int>(), "nbytes"_a, "device"_a = 0)
      .def_prop_ro("ptr", &DeviceArena::ptr, "Device address of byte 0 (a multiple of ARENA_ALIGNMENT).")
      .def_prop_ro("size", &DeviceArena::size, "Size in bytes (rounded up).")
      .def_prop_ro("device", &DeviceArena::device)
      .def(
          "memset",
          [](DeviceArena& arena, int value, std::size_t offset, std::optional<std::size_t> nbytes) {
            if (offset > arena.size()) {
              fail(ErrorKind::BadArgument, "memset offset " + std::to_string(offset) + " exceeds the arena of " +
                                               std::to_string(arena.size()) + " bytes");
            }
            const std::size_t count = nbytes ? *nbytes : arena.size() - offset;
            nb::gil_scoped_release release;
            arena.memset(value, offset, count);
          },
          "value"_a, "offset"_a = 0, "nbytes"_a = nb::none(),
          "Set `nbytes` bytes from `offset` (default: to the end) to `value` (0..255).")
      .def(
          "upload",
          [](DeviceArena& arena, const HostSource& src, std::size_t offset) {
            const void* data = src.data();
            const std::size_t nbytes = src.nbytes();
            nb::gil_scoped_release release;
            arena.upload(data, nbytes, offset);
          },
          "src"_a, "offset"_a = 0, "Copy all bytes of a C-contiguous host array into the arena at `offset`.")
      .def(
          "download",
          [](const DeviceArena& arena, const HostTarget& dst, std::size_t offset) {
            void* data = dst.data();
            const std::size_t nbytes = dst.nbytes();
            nb::gil_scoped_release release;
            arena.download(data, nbytes, offset);
          },
          // noconvert: a converted (copied) target would silently receive the bytes instead of `dst`.
          nb::arg("dst").noconvert(), "offset"_a = 0,
          "Fill a writable C-contiguous host array with the arena's bytes from `offset`.")
      .def("synchronize", &DeviceArena::synchronize, nb::call_guard<nb::gil_scoped_release>())
      .def("__repr__", [](const DeviceArena& a) {
        return "DeviceArena(size=" + std::to_string(a.size()) + ", device=" + std::to_string(a.device()) +
               ", ptr=" + hex(a.ptr()) + ")";
      });

  nb::class_<PinnedBuffer>(m, "PinnedBuffer", "Page-locked host memory (cudaHostAlloc) of `nbytes` bytes.")
      .def(nb::init<std::size_t>(), "nbytes"_a)
      .def_prop_ro("ptr", &PinnedBuffer::ptr)
      .def_prop_ro("size", &PinnedBuffer::size)
      .def(
          "array",
          [](PinnedBuffer& buffer) {
            return ByteView(buffer.data(), {buffer.size()});
          },
          nb::rv_policy::reference_internal,
          "A writable uint8 numpy view of the whole buffer; it keeps the buffer alive.")
      .def("__repr__", [](const PinnedBuffer& b) {
        return "PinnedBuffer(size=" + std::to_string(b.size()) + ", ptr=" + hex(b.ptr()) + ")";
      });
}

}  // namespace tr::native::bind
