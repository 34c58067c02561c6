// pybind11 bindings of the tr.data native core (tr.data._native). The Python layer (tr/data/*.py)
// validates arguments and builds the specs; this file converts, releases the GIL, and maps C++
// errors to tr.core.errors classes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <string_view>
#include <utility>

#include "engine.hpp"
#include "fused_norm.hpp"
#include "jpeg.hpp"
#include "jpeg_recode.hpp"
#include "jpeg_regions.hpp"
#include "pipeline.hpp"

namespace py = pybind11;
using namespace trd;

namespace {

void set_tr_error(const char* cls, const char* msg) {
  py::object c = py::module_::import("tr.core.errors").attr(cls);
  PyErr_SetString(c.ptr(), msg);
}

// ---- spec conversion ---------------------------------------------------------------------------
OpSpec to_op(const py::handle& t) {
  auto tup = py::reinterpret_borrow<py::tuple>(t);
  if (tup.size() != 6) throw ConfigErr("an op spec is (kind, slot, floats, ints, fill, name)");
  OpSpec op;
  try {
    op.name = tup[5].cast<std::string>();
    op.kind = OpKind(tup[0].cast<int>());
    op.slot = tup[1].cast<int>();
    op.f = tup[2].cast<std::vector<double>>();
    op.i = tup[3].cast<std::vector<long long>>();
    op.fill = tup[4].cast<std::vector<double>>();
  } catch (const py::cast_error&) {  // e.g. an int that does not fit in 64 bits
    throw ConfigErr((op.name.empty() ? std::string("an op spec") : op.name) + ": a parameter " +
                    std::string(py::repr(t)) + " is not a number in range");
  }
  return op;
}

FusedSpec to_fused(const py::dict& d) {
  FusedSpec f;
  f.mean = d["mean"].cast<std::vector<double>>();
  f.std = d["std"].cast<std::vector<double>>();
  const std::string dt = d["dtype"].cast<std::string>();
  if (dt == "float32")
    f.dtype = OutDType::F32;
  else if (dt == "float16")
    f.dtype = OutDType::F16;
  else
    throw ConfigErr("output dtype must be float32 or float16, got " + dt);
  f.pad_channels_to = d["pad_channels_to"].cast<int>();
  if (!d["flip"].is_none()) {
    f.has_flip = true;
    f.flip_p = d["flip"].cast<double>();
  }
  if (!d["erase"].is_none()) {
    auto e = d["erase"].cast<py::tuple>();
    f.has_erase = true;
    f.erase_p = e[0].cast<double>();
    f.erase_scale_lo = e[1].cast<double>();
    f.erase_scale_hi = e[2].cast<double>();
    f.erase_ratio_lo = e[3].cast<double>();
    f.erase_ratio_hi = e[4].cast<double>();
    f.erase_value = e[5].cast<std::vector<double>>();
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
  return py::array(py::dtype(dt == OutDType::F16 ? "float16" : "float32"), shape);
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

// ---- Python-facing objects ---------------------------------------------------------------------
struct PyPipeline {
  std::shared_ptr<Pipeline> p;
};

struct PyStation {
  std::shared_ptr<Station> s;
  py::object keep;  // the four buffers
};

struct PyEngine {
  std::unique_ptr<Engine> e;
  py::object keep;  // what the running job points into (arrays, stations, pipeline)
  ~PyEngine() {
    {
      py::gil_scoped_release nogil;
      e.reset();  // cancels and joins the workers
    }
    // `keep` is released after this, with the GIL held
  }
};

// acquire in slices so that Ctrl-C reaches Python while a consumer waits
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

// fn(i, bytes, size) for n JPEGs at offsets/sizes in one buffer, the GIL released; a DataErr names the first bad
// sample by its position (what jpeg_shapes and jpeg_progressive share)
template <class Fn>
void for_each_jpeg(const py::array_t<uint8_t, py::array::c_style>& data,
                   const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& offsets,
                   const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& sizes, const char* what, Fn fn) {
  if (offsets.ndim() != 1 || sizes.ndim() != 1 || offsets.shape(0) != sizes.shape(0))
    throw ShapeErr(std::string(what) + " takes offsets (n,) and sizes (n,)");
  const py::ssize_t n = offsets.shape(0);
  const uint8_t* base = data.data();
  const int64_t total = int64_t(data.size());
  const int64_t* off = offsets.data();
  const int64_t* siz = sizes.data();
  std::string error;
  {
    py::gil_scoped_release nogil;
    for (py::ssize_t i = 0; i < n && error.empty(); ++i) {
      if (off[i] < 0 || siz[i] < 0 || off[i] + siz[i] > total) {
        error = "sample " + std::to_string(i) + " lies outside its buffer";
        break;
      }
      try {
        fn(i, base + off[i], size_t(siz[i]));
      } catch (const DataErr& e) {
        error = "sample " + std::to_string(i) + ": " + e.what();
      }
    }
  }
  if (!error.empty()) throw DataErr(error);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "tr.data native core: transforms, FusedNormalization, TransferStation, worker pool";

  py::object phase_error = py::module_::import("tr.core.errors").attr("PhaseError");
  static py::exception<Cancelled> cancelled(m, "EpochCancelled", phase_error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const DataErr& e) {
      set_tr_error("DataError", e.what());
    } catch (const ShapeErr& e) {
      set_tr_error("ShapeError", e.what());
    } catch (const ConfigErr& e) {
      set_tr_error("ConfigError", e.what());
    } catch (const PhaseErr& e) {
      set_tr_error("PhaseError", e.what());
    } catch (const Cancelled& e) {
      PyErr_SetString(cancelled.ptr(), e.what());
    }
  });

  // ---- RNG, exposed so the tests can hold C++ to tr.core.philox ----
  m.def("philox_raw", [](uint64_t seed, uint64_t offset, size_t count) {
    py::array_t<uint32_t> out({py::ssize_t(count), py::ssize_t(4)});
    auto r = out.mutable_unchecked<2>();
    for (size_t i = 0; i < count; ++i) {
      const Philox4 p = philox4x32_10(seed, offset + i);
      for (int j = 0; j < 4; ++j) r(py::ssize_t(i), j) = p.r[j];
    }
    return out;
  });
  m.def("philox_uniform", [](uint64_t seed, uint64_t offset, size_t count) {
    py::array_t<float> out(static_cast<py::ssize_t>(count));
    auto r = out.mutable_unchecked<1>();
    for (size_t i = 0; i < count; ++i) r(py::ssize_t(i)) = philox_uniform(philox4x32_10(seed, offset + i));
    return out;
  });
  m.def("philox_normal", [](uint64_t seed, uint64_t offset, size_t count, double mean, double std) {
    py::array_t<float> out(static_cast<py::ssize_t>(count));
    auto r = out.mutable_unchecked<1>();
    for (size_t i = 0; i < count; ++i) r(py::ssize_t(i)) = philox_normal(philox4x32_10(seed, offset + i), mean, std);
    return out;
  });
  m.def("philox_randint", [](uint64_t seed, uint64_t offset, long long lo, long long hi, size_t count) {
    if (hi < lo) throw ConfigErr("randint needs lo <= hi");
    py::array_t<long long> out(static_cast<py::ssize_t>(count));
    auto r = out.mutable_unchecked<1>();
    Stream s(seed, offset);
    for (size_t i = 0; i < count; ++i) r(py::ssize_t(i)) = s.randint(lo, hi);
    return out;
  });
  // tr.core.philox.shuffle_indices, natively: its Python swap loop took 25 ms for MNIST's 60,000 samples, a
  // third of an epoch at a million samples a second (and 0.6 s for ImageNet's 1.28 M) before every epoch.
  m.def("shuffle_indices", [](long long n, uint64_t seed) {
    if (n < 0) throw ConfigErr("shuffle length must be >= 0, got " + std::to_string(n));
    py::array_t<long long> out(static_cast<py::ssize_t>(n));
    long long* perm = out.mutable_data();
    {
      py::gil_scoped_release nogil;
      for (long long i = 0; i < n; ++i) perm[i] = i;
      for (long long i = n - 1; i >= 1; --i) {  // j = r0(seed, offset i) % (i + 1), then swap(i, j)
        const uint64_t r0 = philox4x32_10(seed, uint64_t(i)).r[0];
        std::swap(perm[i], perm[r0 % uint64_t(i + 1)]);
      }
    }
    return out;
  });
  m.def("limits", [] {
    py::dict d;
    d["max_side"] = kMaxSide;
    d["max_image_bytes"] = kMaxImageBytes;
    d["max_kernel"] = kMaxKernel;
    d["max_scale"] = kMaxScale;
    d["max_magnitude"] = kMaxMagnitude;
    d["max_workers"] = kMaxWorkers;
    return d;
  });
  m.def("_fail_thread_start_at", &fail_thread_start_at, "test hook: worker thread k of the next Engines fails to start");
  m.def("derive_seed", [](const std::vector<uint64_t>& parts) {
    uint64_t h = kDeriveInit;
    for (uint64_t p : parts) h = derive_step(h, p);
    return h;
  });

  // ---- FP16 ----
  m.def("jpeg_available", &jpeg_available, "whether this build decodes JPEG (libjpeg-turbo was found)");
  m.def("set_window_decode", &set_window_decode,
        "decode only the window a first RandomResizedCrop reads (default True; False: whole decodes, same bytes)");
  m.def("window_decode", &window_decode);
  m.def("set_static_assignment", &set_static_assignment,
        "benchmarks: True gives work item g to worker g % workers (the old scheme) instead of claiming items");
  m.def("static_assignment", &static_assignment);
  m.def("jpeg_shape", [](py::bytes data, bool keep_gray) {
    std::string_view v = data;
    Shape3 s;
    {
      py::gil_scoped_release nogil;
      s = jpeg_shape(reinterpret_cast<const uint8_t*>(v.data()), v.size(), keep_gray);
    }
    return py::make_tuple(s.h, s.w, s.c);
  }, py::arg("data"), py::arg("keep_gray") = false);
  m.def(
      "jpeg_shapes",
      [](py::array_t<uint8_t, py::array::c_style> data, py::array_t<int64_t, py::array::c_style | py::array::forcecast> offsets,
         py::array_t<int64_t, py::array::c_style | py::array::forcecast> sizes) {
        // (n, 3) decoded shapes (RGB: c = 3) from the headers of n JPEGs lying at offsets/sizes in one buffer
        py::array_t<int32_t> out({offsets.ndim() == 1 ? offsets.shape(0) : 0, py::ssize_t(3)});
        int32_t* o = out.mutable_data();
        for_each_jpeg(data, offsets, sizes, "jpeg_shapes", [o](py::ssize_t i, const uint8_t* p, size_t size) {
          const Shape3 sh = jpeg_shape(p, size, false);
          o[3 * i] = sh.h;
          o[3 * i + 1] = sh.w;
          o[3 * i + 2] = sh.c;
        });
        return out;
      },
      py::arg("data"), py::arg("offsets"), py::arg("sizes"));
  m.def(
      "jpeg_progressive",
      [](py::array_t<uint8_t, py::array::c_style> data, py::array_t<int64_t, py::array::c_style | py::array::forcecast> offsets,
         py::array_t<int64_t, py::array::c_style | py::array::forcecast> sizes) {
        // jpeg_needs_baseline of n JPEGs (progressive or arithmetic coding: what a hardware JPEG decoder refuses)
        py::array_t<uint8_t> out(offsets.ndim() == 1 ? offsets.shape(0) : 0);
        uint8_t* o = out.mutable_data();
        for_each_jpeg(data, offsets, sizes, "jpeg_progressive", [o](py::ssize_t i, const uint8_t* p, size_t size) {
          o[i] = jpeg_needs_baseline(p, size) ? 1 : 0;
        });
        return out;
      },
      py::arg("data"), py::arg("offsets"), py::arg("sizes"));
  m.def("jpeg_needs_baseline", [](py::bytes data) {
    std::string_view v = data;
    py::gil_scoped_release nogil;
    return jpeg_needs_baseline(reinterpret_cast<const uint8_t*>(v.data()), v.size());
  }, py::arg("data"), "whether a JPEG is progressive or arithmetic-coded (what jpeg_recode_baseline speeds up)");
  m.def("jpeg_recode_baseline", [](py::bytes data) {
    std::string_view v = data;
    std::vector<uint8_t> out;
    {
      py::gil_scoped_release nogil;
      out = jpeg_recode_baseline(reinterpret_cast<const uint8_t*>(v.data()), v.size());
    }
    return py::bytes(reinterpret_cast<const char*>(out.data()), out.size());
  }, py::arg("data"),
     "the JPEG losslessly re-coded as baseline with optimised Huffman tables, markers dropped: the same pixels");
  m.def("jpeg_scale_for", &jpeg_scale_for, py::arg("height"), py::arg("width"), py::arg("out_height"),
        py::arg("out_width"), "the DCT scale (eighths) the pipeline decodes a (height, width) crop at for that output");
  m.def("decode_jpeg", [](py::bytes data, bool keep_gray, int scale, bool interpolate_chroma) {
    std::string_view v = data;
    std::vector<uint8_t> buf;
    ImgC img;
    {
      py::gil_scoped_release nogil;
      img = decode_jpeg(reinterpret_cast<const uint8_t*>(v.data()), v.size(), buf, keep_gray, scale, interpolate_chroma);
    }
    py::array_t<uint8_t> out({img.h, img.w, img.c});
    std::memcpy(out.mutable_data(), img.p, img.shape().bytes());
    return out;
  }, py::arg("data"), py::arg("keep_gray") = false, py::arg("scale") = 8, py::arg("interpolate_chroma") = true,
     "decode one JPEG to u8 HWC RGB (keep_gray: one channel for a gray file), as the worker pool does; scale M: "
     "DCT-scaled to M/8 of its size; interpolate_chroma: libjpeg's fancy chroma upsampling (else replication)");
  bind_jpeg_regions(m);
  m.def("cpu_has_f16c", &cpu_has_f16c);
  m.def("f16c_enabled", &f16c_enabled);
  m.def("set_f16c_enabled", &set_f16c_enabled);
  m.def("f32_to_f16", [](py::array_t<float, py::array::c_style | py::array::forcecast> a) {
    py::array_t<uint16_t> out(a.size());
    f32_to_f16(a.data(), out.mutable_data(), size_t(a.size()));
    return out;
  });

  // ---- FusedNormalization on a batch ----
  m.def(
      "fused_normalize",
      [](U8Array images, py::array out, const std::vector<double>& mean, const std::vector<double>& std,
         int pad_channels_to, py::object flip, py::object erase, const std::vector<double>& erase_value) {
        if (images.ndim() != 4) throw ShapeErr("images must be (n, height, width, channels) uint8");
        FusedSpec f;
        f.mean = mean;
        f.std = std;
        f.pad_channels_to = pad_channels_to;
        f.erase_value = erase_value;
        const std::string dt = py::str(out.dtype());
        if (dt == "float32")
          f.dtype = OutDType::F32;
        else if (dt == "float16")
          f.dtype = OutDType::F16;
        else
          throw ConfigErr("out must be float32 or float16, got " + dt);
        f.build();
        const long long n = images.shape(0);
        const Shape3 s{int(images.shape(1)), int(images.shape(2)), int(images.shape(3))};
        const int oc = f.out_channels(s.c);
        if (out.ndim() != 4 || out.shape(0) != n || out.shape(1) != s.h || out.shape(2) != s.w || out.shape(3) != oc)
          throw ShapeErr("out must have shape (" + std::to_string(n) + ", " + std::to_string(s.h) + ", " +
                         std::to_string(s.w) + ", " + std::to_string(oc) + ")");
        if (!(out.flags() & py::array::c_style) || !out.writeable())
          throw ConfigErr("out must be a writable C-contiguous array");
        std::vector<FusedParams> ps(static_cast<size_t>(n));
        if (!flip.is_none()) {
          auto fl = flip.cast<py::array_t<bool, py::array::c_style | py::array::forcecast>>();
          if (fl.size() != n) throw ShapeErr("flip needs one flag per image");
          for (long long i = 0; i < n; ++i) ps[size_t(i)].flip = fl.data()[i];
        }
        if (!erase.is_none()) {
          auto er = erase.cast<py::array_t<int, py::array::c_style | py::array::forcecast>>();
          if (er.ndim() != 2 || er.shape(0) != n || er.shape(1) != 4)
            throw ShapeErr("erase needs one (top, left, height, width) row per image");
          for (long long i = 0; i < n; ++i) {
            const int* e = er.data() + 4 * i;
            if (e[2] <= 0 || e[3] <= 0) continue;
            // sums in 64 bits: top + height of two large ints overflowed int (UBSan)
            if (e[0] < 0 || e[1] < 0 || (long long)e[0] + e[2] > s.h || (long long)e[1] + e[3] > s.w)
              throw ShapeErr("erase rectangle " + std::to_string(i) + " lies outside the image");
            ps[size_t(i)] = FusedParams{ps[size_t(i)].flip, true, e[0], e[1], e[2], e[3]};
          }
        }
        if (f.erase_value.size() != 1 && f.erase_value.size() != size_t(s.c))
          throw ShapeErr("erase_value needs 1 or " + std::to_string(s.c) + " values");
        const uint8_t* src = images.data();
        auto* dst = static_cast<uint8_t*>(out.mutable_data());
        const size_t ob = size_t(s.h) * size_t(s.w) * size_t(oc) * f.elem_bytes();
        py::gil_scoped_release nogil;
        FusedScratch scratch;
        for (long long i = 0; i < n; ++i)
          fused_write(f, ps[size_t(i)], ImgC{src + size_t(i) * s.bytes(), s.h, s.w, s.c}, dst + size_t(i) * ob,
                      scratch);
      },
      py::arg("images"), py::arg("out"), py::arg("mean"), py::arg("std"), py::arg("pad_channels_to") = 0,
      py::arg("flip") = py::none(), py::arg("erase") = py::none(), py::arg("erase_value") = std::vector<double>{0.0});

  // ---- Pipeline ----
  py::class_<PyPipeline>(m, "Pipeline")
      .def(py::init([](const py::list& ops, const py::dict& fused) {
        std::vector<OpSpec> v;
        for (auto o : ops) v.push_back(to_op(o));
        return PyPipeline{std::make_shared<Pipeline>(std::move(v), to_fused(fused))};
      }))
      .def("apply",
           [](const PyPipeline& self, U8Array img, uint64_t seed) {
             const ImgC in = image_view(img);
             const Shape3 os = self.p->out_shape(in.shape(), seed);
             py::array out = out_array(os, self.p->fused().dtype);
             void* dst = out.mutable_data();
             {
               py::gil_scoped_release nogil;
               Workspace ws;
               self.p->run(in, seed, ws, dst, os);
             }
             return out;
           })
      .def("apply_uint8",
           [](const PyPipeline& self, U8Array img, uint64_t seed) {
             const ImgC in = image_view(img);
             Workspace ws;
             ImgC r;
             {
               py::gil_scoped_release nogil;
               r = self.p->run_uint8(in, seed, ws);
             }
             py::array_t<uint8_t> out({py::ssize_t(r.h), py::ssize_t(r.w), py::ssize_t(r.c)});
             std::memcpy(out.mutable_data(), r.p, r.shape().bytes());
             return out;
           })
      .def("out_shape", [](const PyPipeline& self, py::object shape,
                           uint64_t seed) { return shape_tuple(self.p->out_shape(to_shape(shape), seed)); })
      .def(
          "plan_first_resample",
          [](const PyPipeline& self, py::array_t<int32_t, py::array::c_style | py::array::forcecast> shapes,
             py::array_t<uint64_t, py::array::c_style | py::array::forcecast> seeds) {
            // per sample, what decoding on the device needs of the chain (tr.data.jpeg_plan): the first
            // RandomResizedCrop's / Resize's box (top, left, height, width) in the full image and the size it
            // resizes to; the window a CenterCrop right after it keeps (y0, x0, height, width; the whole resized
            // image without one); then the fused stage's flip and erase box (y, x, height, width; height 0: none)
            // drawn for the final sample; then a ColorJitter right after them: the float32 bits its kernels compute
            // with (the brightness, contrast, saturation and hue factors, then 1 - factor for contrast and
            // saturation, each rounded from the double as color.cpp does), and its order and switches (bits 0-7:
            // the order, two bits an op; bits 8-11: which ops are on)
            if (shapes.ndim() != 2 || shapes.shape(1) != 3 || seeds.ndim() != 1 || seeds.shape(0) != shapes.shape(0))
              throw ShapeErr("plan_first_resample takes shapes (n, 3) and seeds (n,)");
            const auto& ops = self.p->ops();
            const bool center = ops.size() > 1 && ops[1].kind == OpKind::CenterCrop;
            const size_t jk = center ? 2 : 1;  // where a ColorJitter would follow
            const bool jitter = ops.size() > jk && ops[jk].kind == OpKind::ColorJitter;
            const py::ssize_t n = shapes.shape(0);
            py::array_t<int32_t> out({n, py::ssize_t(22)});
            auto sh = shapes.unchecked<2>();
            auto sd = seeds.unchecked<1>();
            auto o = out.mutable_unchecked<2>();
            for (py::ssize_t i = 0; i < n; ++i) {
              const Shape3 full{int(sh(i, 0)), int(sh(i, 1)), int(sh(i, 2))};
              int box[4], os[2];
              if (!self.p->first_resample(full, sd(i), box, os))
                throw ConfigErr("the chain does not start with a RandomResizedCrop or Resize that resamples");
              int win[4] = {0, 0, os[0], os[1]};
              if (center) {
                Stream rng(sd(i), uint64_t(ops[1].slot) << 32);
                Params p;
                const Shape3 resized{os[0], os[1], full.c};
                op_draw(ops[1], rng, resized, p);
                const Shape3 cs = op_out_shape(ops[1], p, resized);
                win[0] = int(p.i[0]);
                win[1] = int(p.i[1]);
                win[2] = cs.h;
                win[3] = cs.w;
              }
              FusedParams fp;
              fused_draw(self.p->fused(), sd(i), Shape3{win[2], win[3], full.c}, fp);
              const int v[15] = {box[0], box[1], box[2], box[3], os[0], os[1], win[0], win[1], win[2], win[3],
                                 fp.flip ? 1 : 0, fp.erase ? fp.ei : 0, fp.erase ? fp.ej : 0, fp.erase ? fp.eh : 0,
                                 fp.erase ? fp.ew : 0};
              for (int k = 0; k < 15; ++k) o(i, k) = v[k];
              int jit[7] = {0, 0, 0, 0, 0, 0, 0};
              if (jitter) {
                Stream rng(sd(i), uint64_t(ops[jk].slot) << 32);
                Params p;
                op_draw(ops[jk], rng, Shape3{win[2], win[3], full.c}, p);
                const float f[6] = {float(p.f[0]), float(p.f[1]), float(p.f[2]), float(p.f[3]),
                                    float(1.0 - p.f[1]), float(1.0 - p.f[2])};
                for (int k = 0; k < 6; ++k) std::memcpy(&jit[k], &f[k], 4);
                for (int k = 0; k < 4; ++k) {
                  jit[6] |= (p.perm[size_t(k)] & 3) << (2 * k);
                  jit[6] |= (ops[jk].i[size_t(k)] != 0 ? 1 : 0) << (8 + k);
                }
              }
              for (int k = 0; k < 7; ++k) o(i, 15 + k) = jit[k];
            }
            return out;
          },
          py::arg("shapes"), py::arg("seeds"))
      .def("describe", [](const PyPipeline& self, py::object shape, uint64_t seed) {
        py::list out;
        for (const auto& r : self.p->describe(to_shape(shape), seed)) {
          py::dict params;
          for (const auto& kv : r.values) params[py::str(kv.first)] = kv.second;
          py::dict d;
          d["name"] = r.name;
          d["applied"] = r.applied;
          d["in_shape"] = shape_tuple(r.in);
          d["out_shape"] = shape_tuple(r.out);
          d["params"] = params;
          out.append(d);
        }
        return out;
      });

  // ---- Station ----
  py::class_<PyStation>(m, "Station")
      .def(py::init([](int batch, size_t sample_bytes, py::buffer d0, py::buffer l0, py::buffer d1, py::buffer l1) {
        const size_t nd = size_t(batch) * sample_bytes, nl = size_t(batch) * 4;
        uint8_t* pd0 = writable(d0, nd, "data buffer A");
        uint8_t* pd1 = writable(d1, nd, "data buffer B");
        auto* pl0 = reinterpret_cast<int32_t*>(writable(l0, nl, "label buffer A"));
        auto* pl1 = reinterpret_cast<int32_t*>(writable(l1, nl, "label buffer B"));
        if ((reinterpret_cast<uintptr_t>(pl0) | reinterpret_cast<uintptr_t>(pl1)) % 4)
          throw ConfigErr("label buffers must be 4-byte aligned");
        PyStation s;
        s.s = std::make_shared<Station>(batch, sample_bytes, pd0, pl0, pd1, pl1);
        s.keep = py::make_tuple(d0, l0, d1, l1);
        return s;
      }))
      .def("acquire",
           [](PyStation& self, long long k, py::object timeout) {
             const double t = timeout.is_none() ? -1.0 : timeout.cast<double>();
             return acquire_interruptible(*self.s, k, t);
           },
           py::arg("k"), py::arg("timeout") = py::none())
      .def("release", [](PyStation& self, long long k) { self.s->release(k); })
      .def("abort", [](PyStation& self) { self.s->abort(); })
      .def("begin_epoch", [](PyStation& self, long long nb, int last) { self.s->begin_epoch(nb, last); })
      .def_property_readonly("num_batches", [](const PyStation& self) { return self.s->num_batches(); })
      .def("batch_size_of", [](const PyStation& self, long long k) { return self.s->batch_size_of(k); })
      .def("consumer_wait_ns", [](const PyStation& self) { return self.s->consumer_wait_ns(); })
      .def_property_readonly("batch", [](const PyStation& self) { return self.s->batch(); })
      .def_property_readonly("sample_bytes", [](const PyStation& self) { return self.s->sample_bytes(); });

  // ---- Engine ----
  py::class_<PyEngine>(m, "Engine")
      .def(py::init([](long long workers) {
        if (workers < 1 || workers > kMaxWorkers)
          throw ConfigErr("preprocess_workers must be in [1, " + std::to_string(kMaxWorkers) + "], got " +
                          std::to_string(workers));
        auto e = std::make_unique<PyEngine>();
        e->e = std::make_unique<Engine>(int(workers));
        e->keep = py::none();
        return e;
      }))
      .def_property_readonly("workers", [](const PyEngine& self) { return self.e->workers(); })
      .def("busy", [](const PyEngine& self) { return self.e->busy(); })
      .def("cancel",
           [](PyEngine& self) {
             {
               py::gil_scoped_release nogil;
               self.e->cancel();
             }
             self.keep = py::none();
           })
      .def("wait_idle",
           [](PyEngine& self, double timeout) {
             py::gil_scoped_release nogil;
             return self.e->wait_idle(timeout);
           })
      .def("samples_done",
           [](const PyEngine& self) {
             auto j = self.e->current();
             return j ? j->samples_done.load() : 0LL;
           })
      .def(
          "worker_times",
          [](const PyEngine& self) {
            // the last epoch's (items, work_ns, wait_ns) per worker; read only when the workers are idle
            if (self.e->busy()) throw PhaseErr("worker times are read after the epoch's workers finished");
            py::list out;
            if (auto j = self.e->current())
              for (const WorkerTime& t : j->times) out.append(py::make_tuple(t.items, t.work_ns, t.wait_ns));
            return out;
          },
          "the last epoch's (items, work_ns, wait_ns) per worker")
      .def(
          "start",
          [](PyEngine& self, PyPipeline& pipe, py::array data, py::object offsets, py::object shapes,
             py::object uniform_shape, py::object labels, py::array_t<long long, py::array::c_style | py::array::forcecast> order,
             py::list stations, long long per_rank, long long num_batches, int last_size, uint64_t seed_prefix,
             py::object out_shape, py::object cache, int cache_mode, py::object sizes, py::object sdmp,
             py::object sdmp_filled, std::vector<uint64_t> sdmp_prefix, int sdmp_mode, int sdmp_slot,
             bool dct_scaling) {
            if (self.e->busy()) throw PhaseErr("the previous epoch is still running; finish or cancel it first");
            auto job = std::make_shared<Job>();
            job->pipe = pipe.p.get();
            job->pipe_hold = pipe.p;
            if (!(data.flags() & py::array::c_style) || data.dtype().kind() != 'u' || data.itemsize() != 1)
              throw ConfigErr("sample data must be a C-contiguous uint8 array");
            job->src.base = static_cast<const uint8_t*>(data.data());
            job->src.n = order.size();
            py::list keep;
            keep.append(data);
            keep.append(order);
            if (!sizes.is_none()) {  // encoded samples: bytes at offsets[i], sizes[i] long, decoded per sample
              auto off = offsets.cast<py::array_t<long long, py::array::c_style>>();
              auto siz = sizes.cast<py::array_t<long long, py::array::c_style>>();
              if (off.size() != job->src.n || siz.size() != job->src.n)
                throw ShapeErr("encoded sources need one offset and one size per sample");
              for (long long i = 0; i < job->src.n; ++i)
                if (off.data()[i] < 0 || siz.data()[i] < 0 || size_t(off.data()[i] + siz.data()[i]) > size_t(data.nbytes()))
                  throw ShapeErr("encoded sample " + std::to_string(i) + " lies outside the data buffer");
              job->src.offsets = off.data();
              job->src.sizes = siz.data();
              keep.append(off);
              keep.append(siz);
            } else if (!offsets.is_none()) {
              auto off = offsets.cast<py::array_t<long long, py::array::c_style>>();
              auto shp = shapes.cast<py::array_t<int32_t, py::array::c_style>>();
              if (off.size() != job->src.n || shp.size() != 3 * job->src.n)
                throw ShapeErr("ragged sources need one offset and one (h, w, c) per sample");
              job->src.offsets = off.data();
              job->src.shapes = shp.data();
              keep.append(off);
              keep.append(shp);
            } else {
              job->src.shape = to_shape(uniform_shape);
              if (size_t(data.nbytes()) < size_t(job->src.n) * job->src.shape.bytes())
                throw ShapeErr("sample data is smaller than n * h * w * c");
            }
            if (!labels.is_none()) {
              auto lab = labels.cast<py::array_t<int32_t, py::array::c_style>>();
              if (lab.size() != job->src.n) throw ShapeErr("need one label per sample");
              job->src.labels = lab.data();
              keep.append(lab);
            }
            job->order.assign(order.data(), order.data() + order.size());
            for (long long v : job->order)
              if (v < 0 || v >= job->src.n) throw ConfigErr("epoch order holds an index out of range: " + std::to_string(v));
            std::vector<std::shared_ptr<Station>> sts;
            for (auto s : stations) {
              auto& ps = s.cast<PyStation&>();
              sts.push_back(ps.s);
              job->stations.push_back(ps.s.get());
              job->station_hold.push_back(ps.s);
            }
            if (sts.empty()) throw ConfigErr("need at least one TransferStation");
            keep.append(stations);
            job->world = int(sts.size());
            job->per_rank = per_rank;
            job->batch = sts[0]->batch();
            job->num_batches = num_batches;
            job->seed_prefix = seed_prefix;
            job->out_shape = to_shape(out_shape);
            job->sample_bytes = sts[0]->sample_bytes();
            for (auto& s : sts)
              if (s->batch() != job->batch || s->sample_bytes() != job->sample_bytes)
                throw ConfigErr("all TransferStations of one Preprocessor need the same batch size and sample shape");
            const size_t need = job->out_shape.bytes() * pipe.p->fused().elem_bytes();
            if (need != job->sample_bytes)
              throw ShapeErr("the transforms produce " + job->out_shape.str() + " samples (" + std::to_string(need) +
                             " bytes) but the TransferStation holds " + std::to_string(job->sample_bytes) +
                             "-byte samples");
            if (!cache.is_none()) {
              job->cache = writable(cache.cast<py::buffer>(), size_t(job->src.n) * job->sample_bytes, "CPVS cache");
              keep.append(cache);
              job->cache_mode = cache_mode;
            }
            if (sdmp_mode != 0) {
              const size_t slots = sdmp_mode == 1 ? sdmp_prefix.size() : size_t(sdmp_slot) + 1;
              if (sdmp_mode < 0 || sdmp_mode > 2 || slots == 0 || sdmp_slot < 0)
                throw ConfigErr("SDMP mode " + std::to_string(sdmp_mode) + " with " + std::to_string(slots) +
                                " slots is not valid");
              job->sdmp = writable(sdmp.cast<py::buffer>(), slots * size_t(job->src.n) * job->sample_bytes, "SDMP cache");
              job->sdmp_filled = writable(sdmp_filled.cast<py::buffer>(), slots * size_t(job->src.n), "SDMP flags");
              keep.append(sdmp);
              keep.append(sdmp_filled);
              job->sdmp_prefix = std::move(sdmp_prefix);
              job->sdmp_mode = sdmp_mode;
              job->sdmp_slot = sdmp_slot;
            }
            job->dct_scaling = dct_scaling;
            for (auto& s : sts) s->begin_epoch(num_batches, last_size);
            self.keep = py::tuple(keep);
            self.e->start(job);
          },
          py::arg("pipeline"), py::arg("data"), py::arg("offsets"), py::arg("shapes"), py::arg("uniform_shape"),
          py::arg("labels"), py::arg("order"), py::arg("stations"), py::arg("per_rank"), py::arg("num_batches"),
          py::arg("last_size"), py::arg("seed_prefix"), py::arg("out_shape"), py::arg("cache") = py::none(),
          py::arg("cache_mode") = 0, py::arg("sizes") = py::none(), py::arg("sdmp") = py::none(),
          py::arg("sdmp_filled") = py::none(), py::arg("sdmp_prefix") = std::vector<uint64_t>{},
          py::arg("sdmp_mode") = 0, py::arg("sdmp_slot") = 0, py::arg("dct_scaling") = false);
}
