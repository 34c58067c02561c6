// pybind11 bindings of the tr.data native core (tr.data._native). The Python layer (tr/data/*.py)
// validates arguments and builds the specs; the bindings convert, release the GIL, and map C++
// errors to tr.core.errors classes. This file: the module, its error mapping, the RNG, limits and
// switches, FP16 / BF16, fused_normalize; the rest in bind_*.cpp and jpeg_regions.cpp.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <string>
#include <vector>

#include "autoaugment.hpp"
#include "bind_common.hpp"
#include "jpeg_regions.hpp"

using namespace trd;
using namespace trd::bind;

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


  // ---- JPEG ----
  bind_jpeg(m);
  bind_jpeg_regions(m);

  // ---- FP16, BF16 ----
  m.def("cpu_has_f16c", &cpu_has_f16c);
  m.def("f16c_enabled", &f16c_enabled);
  m.def("set_f16c_enabled", &set_f16c_enabled);
  m.def("f32_to_f16", [](py::array_t<float, py::array::c_style | py::array::forcecast> a) {
    py::array_t<uint16_t> out(a.size());
    f32_to_f16(a.data(), out.mutable_data(), size_t(a.size()));
    return out;
  });
  m.def("f32_to_bf16", [](py::array_t<float, py::array::c_style | py::array::forcecast> a) {
    py::array_t<uint16_t> out(a.size());
    f32_to_bf16(a.data(), out.mutable_data(), size_t(a.size()));
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
        else if (dt == "uint16")  // bfloat16 bit patterns: numpy has no bfloat16
          f.dtype = OutDType::BF16;
        else
          throw ConfigErr("out must be float32, float16 or uint16 (bfloat16 bits), got " + dt);
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

  // ---- RandAugment / TrivialAugmentWide: one op at a given magnitude, and the magnitude tables ----
  m.def(
      "augment_op",
      [](U8Array img, int op, double magnitude, const std::vector<double>& fill) {
        const ImgC in = image_view(img);
        const std::string name = aug_op_name(op);
        if (op < 0 || op >= kAugOpCount)
          throw ConfigErr("augment_op: op must be in [0, " + std::to_string(kAugOpCount - 1) + "], got " +
                          std::to_string(op));
        if (in.c != 1 && in.c != 3) throw ShapeErr(name + " needs 1 or 3 channels, got an image " + in.shape().str());
        if (!std::isfinite(magnitude) || std::fabs(magnitude) > kMaxMagnitude)
          throw ConfigErr(name + ": magnitude must be a finite number within 1e6, got " + std::to_string(magnitude));
        // torchvision's own refusals: negative colour factors, posterize bits outside [0, 8], a threshold over 255
        if (op >= kAugBrightness && op <= kAugSharpness && 1.0 + magnitude < 0)
          throw ConfigErr(name + ": the factor 1 + magnitude must be >= 0, got " + std::to_string(1.0 + magnitude));
        if (op == kAugPosterize && !(magnitude >= 0 && magnitude < 9))
          throw ConfigErr(name + ": bits must be in [0, 8], got " + std::to_string(magnitude));
        if (op == kAugSolarize && 255.0 * magnitude > 255.0)
          throw ConfigErr(name + ": the threshold 255 * magnitude must be <= 255, got " + std::to_string(magnitude));
        if (fill.size() != 1 && fill.size() != size_t(in.c))
          throw ConfigErr(name + ": fill needs 1 or " + std::to_string(in.c) + " values");
        uint8_t f[kMaxChannels];
        for (int c = 0; c < in.c; ++c) {
          const double v = fill.size() == 1 ? fill[0] : fill[size_t(c)];
          if (!(v >= 0 && v <= 255 && v == std::floor(v)))
            throw ConfigErr(name + ": fill values are whole pixel values in [0, 255], got " + std::to_string(v));
          f[c] = uint8_t(v);
        }
        py::array_t<uint8_t> out({py::ssize_t(in.h), py::ssize_t(in.w), py::ssize_t(in.c)});
        const Img o{out.mutable_data(), in.h, in.w, in.c};
        {
          py::gil_scoped_release nogil;
          AugStep s;
          s.op = op;
          s.magnitude = magnitude;
          aug_apply(s, in, o, f);
        }
        return out;
      },
      py::arg("image"), py::arg("op"), py::arg("magnitude"), py::arg("fill"));
  m.def(
      "augment_magnitude",
      [](int op, int bin, int bins, bool wide, int height, int width) {
        if (op < 0 || op >= kAugOpCount || bins < 2 || bin < 0 || bin >= bins || height < 1 || width < 1)
          throw ConfigErr("augment_magnitude: op, bin, bins, height or width out of range");
        return aug_magnitude(op, bin, bins, wide, height, width);
      },
      py::arg("op"), py::arg("bin"), py::arg("bins"), py::arg("wide"), py::arg("height"), py::arg("width"));

  bind_op_params(m);
  bind_pipeline(m);
  bind_workers(m);
  bind_job(m);
}
