// The conversions and helpers bind_common.hpp declares.
#include "bind_common.hpp"

#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace trd::bind {

void set_tr_error(const char* cls, const char* msg) {
  py::object c = py::module_::import("tr.core.errors").attr(cls);
  PyErr_SetString(c.ptr(), msg);
}

// ---- the fused stage ---------------------------------------------------------------------------
FusedSpec fused_spec(const FusedStage& s) {
  FusedSpec f;
  f.mean = s.mean;
  f.std = s.std;
  if (s.dtype == "float32")
    f.dtype = OutDType::F32;
  else if (s.dtype == "float16")
    f.dtype = OutDType::F16;
  else if (s.dtype == "bfloat16")
    f.dtype = OutDType::BF16;
  else
    throw ConfigErr("output dtype must be float32, float16 or bfloat16, got " + s.dtype);
  if (s.pad_channels_to < 0 || s.pad_channels_to > 64)  // before narrowing; build() says the same
    throw ConfigErr("pad_channels_to must be in [0, 64], got " + std::to_string(s.pad_channels_to));
  f.pad_channels_to = int(s.pad_channels_to);
  if (s.flip) {  // without a flip (an erasing) its fields keep FusedSpec's defaults
    f.has_flip = true;
    f.flip_p = s.flip->p;
  }
  if (s.erase) {
    const RandomErasingParams& e = *s.erase;
    f.has_erase = true;
    f.erase_p = e.p;
    f.erase_scale_lo = e.scale_lo;
    f.erase_scale_hi = e.scale_hi;
    f.erase_ratio_lo = e.ratio_lo;
    f.erase_ratio_hi = e.ratio_hi;
    f.erase_value = e.value;
  }
  return f;
}

using U8Array = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

ImgC image_view(const U8Array& a) {
  if (a.ndim() != 3)
    throw ShapeErr("an image must be a (height, width, channels) uint8 array, got " + std::to_string(a.ndim()) +
                   " dimensions");
  for (int d = 0; d < 3; ++d)
    if (a.shape(d) > kMaxSide)
      throw ShapeErr("an image side may be at most " + std::to_string(kMaxSide) + ", got " + std::to_string(a.shape(d)));
  return ImgC{a.data(), int(a.shape(0)), int(a.shape(1)), int(a.shape(2))};
}

py::tuple shape_tuple(const Shape3& s) { return py::make_tuple(s.h, s.w, s.c); }

Shape3 to_shape(const py::handle& t) {
  auto tup = py::reinterpret_borrow<py::sequence>(t);
  if (tup.size() != 3) throw ShapeErr("a sample shape is (height, width, channels)");
  long long d[3];
  for (int k = 0; k < 3; ++k) {
    try {
      d[k] = tup[size_t(k)].cast<long long>();
    } catch (const py::cast_error&) {
      throw ShapeErr("a sample shape holds integers, got " + std::string(py::repr(t)));
    }
    if (d[k] < 1 || d[k] > kMaxSide)
      throw ShapeErr("sample shape sides must be in [1, " + std::to_string(kMaxSide) + "], got " + std::string(py::repr(t)));
  }
  return {int(d[0]), int(d[1]), int(d[2])};
}

py::array out_array(const Shape3& s, OutDType dt) {
  std::vector<py::ssize_t> shape{s.h, s.w, s.c};
  // numpy has no bfloat16: its samples are uint16 bit patterns (DType.BF16's storage)
  const char* name = dt == OutDType::F32 ? "float32" : dt == OutDType::F16 ? "float16" : "uint16";
  return py::array(py::dtype(name), shape);
}

// A writable, C-contiguous buffer of at least `need` bytes.
uint8_t* writable(const py::buffer& b, size_t need, const char* what) {
  py::buffer_info info = b.request(true);
  size_t bytes = size_t(info.itemsize);
  for (auto s : info.shape) bytes *= size_t(s);
  // Check contiguity: strides must be the C-order ones.
  py::ssize_t expect = info.itemsize;
  for (int d = int(info.ndim) - 1; d >= 0; --d) {
    if (info.shape[size_t(d)] > 1 && info.strides[size_t(d)] != expect)
      throw ConfigErr(std::string(what) + " must be C-contiguous");
    expect *= info.shape[size_t(d)];
  }
  if (bytes < need)
    throw ConfigErr(std::string(what) + " holds " + std::to_string(bytes) + " bytes, needs " + std::to_string(need));
  return static_cast<uint8_t*>(info.ptr);
}

int acquire_interruptible(Station& st, long long k, double timeout) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    double slice = 0.1;
    if (timeout >= 0) {
      const double left = timeout - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (left <= 0) return -1;
      slice = std::min(slice, left);
    }
    int n;
    {
      py::gil_scoped_release nogil;
      n = st.acquire(k, slice);
    }
    if (n >= 0) return n;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

}  // namespace trd::bind
