// Decoding the regions of many JPEGs in one call, on threads of its own (issue [13]: the device feeder's CPU
// share and its fallback for files the GPU decoder refuses). Each region's pixels are those of a whole decode
// (decode_jpeg) cut to the region; only the window around it is decoded (decode_jpeg_window) while
// window_decode() is on.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trd {

struct JpegRegion {
  const uint8_t* data;  // the file's bytes
  size_t size;
  int y, x, h, w;  // the region of the full image
  uint8_t* dst;    // h rows of w * 3 bytes (RGB, a gray file too), packed
  bool interpolate_chroma = true;  // libjpeg's fancy chroma upsampling, or replication (decode_jpeg)
};

// Decodes every job's region into its dst with up to `threads` threads (the calling one among them). Returns one
// message a job: "" where it decoded, else why not (a damaged file, a region outside the image).
std::vector<std::string> decode_jpeg_regions(const std::vector<JpegRegion>& jobs, int threads);

// tr.data._native.decode_jpeg_regions (see jpeg_regions.cpp).
void bind_jpeg_regions(pybind11::module_& m);

}  // namespace trd
