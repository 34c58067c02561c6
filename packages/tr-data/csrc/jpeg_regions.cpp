#include "jpeg_regions.hpp"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>

#include "common.hpp"
#include "jpeg.hpp"

namespace py = pybind11;

namespace trd {

namespace {

// One job: the window around the region (or the whole image), then the region's rows copied out.
void decode_one(const JpegRegion& j, std::vector<uint8_t>& buf) {
  const Shape3 full = jpeg_shape(j.data, j.size, false);
  if (j.y < 0 || j.x < 0 || j.h < 1 || j.w < 1 || j.y + j.h > full.h || j.x + j.w > full.w)
    throw DataErr("the region " + std::to_string(j.h) + "x" + std::to_string(j.w) + " at (" + std::to_string(j.y) +
                  ", " + std::to_string(j.x) + ") lies outside the " + std::to_string(full.h) + "x" +
                  std::to_string(full.w) + " image");
  ImgC img;
  int oy = 0, ox = 0;
  if (window_decode())
    img = decode_jpeg_window(j.data, j.size, full, j.y, j.x, j.h, j.w, buf, oy, ox, 8, j.interpolate_chroma);
  else
    img = decode_jpeg(j.data, j.size, buf, false, 8, j.interpolate_chroma);
  const size_t row = size_t(j.w) * 3;
  for (int r = 0; r < j.h; ++r)
    std::memcpy(j.dst + size_t(r) * row, img.row(j.y - oy + r) + size_t(j.x - ox) * 3, row);
}

}  // namespace

std::vector<std::string> decode_jpeg_regions(const std::vector<JpegRegion>& jobs, int threads) {
  std::vector<std::string> errors(jobs.size());
  std::atomic<size_t> next{0};
  auto work = [&]() {
    std::vector<uint8_t> buf;  // one decode buffer a thread, reused
    for (size_t k = next.fetch_add(1); k < jobs.size(); k = next.fetch_add(1)) {
      try {
        decode_one(jobs[k], buf);
      } catch (const std::exception& e) {
        errors[k] = e.what()[0] != '\0' ? e.what() : "decode failed";
      }
    }
  };
  const int n = int(std::min<size_t>(size_t(std::max(threads, 1)), jobs.size()));
  std::vector<std::thread> pool;
  pool.reserve(size_t(std::max(n - 1, 0)));
  try {
    for (int t = 1; t < n; ++t) pool.emplace_back(work);
  } catch (...) {  // a thread that cannot start: the others (and this one) take its share
  }
  work();
  for (auto& t : pool) t.join();
  return errors;
}

void bind_jpeg_regions(py::module_& m) {
  using I64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
  using I32 = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
  m.def(
      "decode_jpeg_regions",
      [](py::array_t<uint8_t, py::array::c_style> data, I64 offsets, I64 sizes, I32 regions, py::array out,
         I64 out_offsets, int threads, bool interpolate_chroma) {
        const py::ssize_t n = offsets.ndim() == 1 ? offsets.shape(0) : -1;
        if (n < 0 || sizes.ndim() != 1 || sizes.shape(0) != n || out_offsets.ndim() != 1 ||
            out_offsets.shape(0) != n || regions.ndim() != 2 || regions.shape(0) != n || regions.shape(1) != 4)
          throw ShapeErr("decode_jpeg_regions takes offsets (n,), sizes (n,), regions (n, 4) and out_offsets (n,)");
        if (!out.dtype().is(py::dtype::of<uint8_t>()) || out.ndim() != 1 ||
            !(out.flags() & py::array::c_style) || !out.writeable())
          throw ConfigErr("decode_jpeg_regions writes into a flat, contiguous, writable uint8 array");
        if (!jpeg_available()) throw ConfigErr("this tr-data was built without libjpeg-turbo: it decodes no JPEG");
        if (threads < 1) throw ConfigErr("decode_jpeg_regions: threads must be >= 1, got " + std::to_string(threads));
        const int64_t total = int64_t(data.size()), room = int64_t(out.size());
        const uint8_t* base = data.data();
        auto* dst = static_cast<uint8_t*>(out.mutable_data());
        const int64_t *off = offsets.data(), *siz = sizes.data(), *at = out_offsets.data();
        const int32_t* r = regions.data();
        std::vector<JpegRegion> jobs(static_cast<size_t>(n));
        for (py::ssize_t k = 0; k < n; ++k) {
          const int32_t* g = r + 4 * k;  // y, x, h, w
          if (off[k] < 0 || siz[k] < 1 || off[k] + siz[k] > total)
            throw ShapeErr("decode_jpeg_regions: job " + std::to_string(k) + "'s bytes lie outside the " +
                           std::to_string(total) + "-byte buffer");
          if (g[2] < 1 || g[3] < 1 || at[k] < 0 || at[k] + int64_t(g[2]) * g[3] * 3 > room)
            throw ShapeErr("decode_jpeg_regions: job " + std::to_string(k) + "'s " + std::to_string(g[2]) + "x" +
                           std::to_string(g[3]) + " region does not fit the output at " + std::to_string(at[k]));
          jobs[size_t(k)] = JpegRegion{base + off[k], size_t(siz[k]), g[0], g[1], g[2], g[3], dst + at[k],
                                       interpolate_chroma};
        }
        std::vector<std::string> errors;
        {
          py::gil_scoped_release nogil;
          errors = decode_jpeg_regions(jobs, threads);
        }
        py::list failed;
        for (size_t k = 0; k < errors.size(); ++k)
          if (!errors[k].empty()) failed.append(py::make_tuple(k, errors[k]));
        return failed;
      },
      py::arg("data"), py::arg("offsets"), py::arg("sizes"), py::arg("regions"), py::arg("out"),
      py::arg("out_offsets"), py::arg("threads") = 1, py::arg("interpolate_chroma") = true,
      "decode job k's region (regions[k]: y, x, h, w of the full image) of the JPEG at data[offsets[k]:][:sizes[k]] "
      "as RGB u8 into out[out_offsets[k]:], rows packed, with up to `threads` threads (GIL released); returns "
      "[(k, why)] for the jobs that failed (a damaged file, a region outside the image), the others written; "
      "interpolate_chroma: libjpeg's fancy chroma upsampling (the CPU pipeline's), else each chroma sample "
      "replicated (nvJPEG's)");
}

}  // namespace trd
