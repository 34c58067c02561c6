// tr.data._native's JPEG functions: headers (one or many), single decodes, baseline re-coding.
#include "bind_common.hpp"

#include <pybind11/stl.h>

#include <cstring>
#include <string_view>
#include <vector>

#include "jpeg_recode.hpp"

namespace trd::bind {

namespace {

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

void bind_jpeg(py::module_& m) {
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
}

}  // namespace trd::bind
