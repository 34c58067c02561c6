// A transform chain: uint8 transforms, then FusedNormalization into an output sample.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common.hpp"
#include "fused_norm.hpp"
#include "ops.hpp"
#include "resample.hpp"

namespace trd {

// Per-thread scratch memory, grown on demand and reused: no allocation in steady state.
struct Workspace {
  std::vector<uint8_t> img[2];  // ping-pong images
  ResampleScratch rs;
  Axis ax, ay;
  std::vector<float> ftmp;
  FusedScratch fused;
  std::vector<uint8_t> u8tmp;
  std::vector<uint8_t> jpeg;  // the decoded sample of an encoded source
  std::vector<uint8_t> aug;   // RandAugment's intermediate image
};

// Record of the random parameters one sample used (Compose.params, tests, debugging).
struct OpRecord {
  std::string name;
  bool applied = true;
  Shape3 in, out;
  std::vector<std::pair<std::string, double>> values;
};

// The source is the window at (y0, x0) of a `full` image (a JPEG decoded only where the first transform reads),
// decoded at scale/8 of its size (8: full size; the window and (y0, x0) are then in the scaled image).
struct Roi {
  Shape3 full;
  int y0 = 0, x0 = 0;
  int scale = 8;
};

// A crop box [start, start + len) of the full image in the image decoded at m/8: both ends rounded to the nearest
// scaled pixel, at least one pixel long.
inline void scale_span(long long& start, long long& len, int m) {
  const long long s = (start * m + 4) / 8, e = ((start + len) * m + 4) / 8;
  start = s;
  len = e > s ? e - s : 1;
}

class Pipeline {
 public:
  Pipeline(std::vector<OpSpec> ops, FusedSpec fused);

  const std::vector<OpSpec>& ops() const { return ops_; }
  const FusedSpec& fused() const { return fused_; }

  // Shape of the uint8 image after the transforms (deterministic chains; variable-size chains
  // return the shape for this input and these params), computed without touching pixels.
  Shape3 uint8_shape(const Shape3& in, uint64_t sample_seed) const;
  // Output sample shape (h, w, out_channels) for an input shape.
  Shape3 out_shape(const Shape3& in, uint64_t sample_seed) const;

  // Runs the chain on `src` and writes the normalised sample to dst (dtype/channels of the
  // FusedSpec). `expect` (h, w, c_out) must match, else ShapeErr.
  void run(const ImgC& src, uint64_t sample_seed, Workspace& ws, void* dst, const Shape3& expect,
           const Roi* roi = nullptr) const;

  // The box (top, left, height, width) of a `full`-sized input that a first RandomResizedCrop or Resize
  // resamples, and the size it makes (what picks a DCT scale: jpeg_scale_for); false for other chains. run()
  // with a Roi of scale 8 whose window holds the box gives the bytes of a run on the full image; with scale
  // m < 8 it resamples the box scaled by scale_span from the m/8 decode: not those bytes.
  bool first_resample(const Shape3& full, uint64_t sample_seed, int box[4], int out[2]) const;

  // Runs only the uint8 part, then flip/erase in uint8 space; returns the final image view
  // (inside ws, valid until the next call).
  ImgC run_uint8(const ImgC& src, uint64_t sample_seed, Workspace& ws) const;

  std::vector<OpRecord> describe(const Shape3& in, uint64_t sample_seed) const;

 private:
  ImgC run_ops(const ImgC& src, uint64_t sample_seed, Workspace& ws, const Roi* roi = nullptr) const;
  std::vector<OpSpec> ops_;
  FusedSpec fused_;
};

}  // namespace trd
