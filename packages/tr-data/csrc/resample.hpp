// Geometric kernels on uint8 HWC images: border extension (pad / crop) and antialiased bilinear
// resampling with precomputed fixed-point weights (rotation: rotate.hpp).
#pragma once

#include <vector>

#include "common.hpp"

namespace trd {

enum class PadMode : int { Constant = 0, Edge = 1, Reflect = 2, Symmetric = 3 };

// Index of the source sample that border extension `mode` puts at position i (any integer) of an
// axis of length n >= 1; -1 means "constant fill". Reflect and symmetric extend periodically, so
// any padding width works (numpy.pad semantics).
int extend_index(long long i, int n, PadMode mode);

// out(y, x) = E(in)(y0 + y, x0 + x) where E extends `in` beyond its borders by `mode`.
// Pad, RandomCrop (with its own padding) and CenterCrop are all this one kernel.
void remap_window(const ImgC& in, const Img& out, long long y0, long long x0, PadMode mode, const uint8_t* fill);

// Fixed-point weights of one axis of an antialiased bilinear resize (the triangle filter widened
// by the downscale factor: PIL's and torch's antialias=True definition).
struct Axis {
  int count = 0;                // number of output samples produced
  int taps = 0;                 // stride of `w` (a multiple of 8)
  std::vector<int32_t> start;   // first source index, or -1 when the output lies outside the
                                // resized image (filled with the fill value)
  std::vector<int32_t> ntaps;   // taps used per output
  std::vector<int16_t> w;       // count * taps weights (zero padded), kPrec fractional bits
  bool identity = false;        // output k reads source in0 + k with weight 1
};
constexpr int kPrec = 14;  // int16 weights: the SIMD kernels multiply with madd

// Resize the source interval [in0, in0 + in_len) to `out_full` samples and keep the outputs
// [o0, o0 + count) (indices outside [0, out_full) become fill).
void build_axis(Axis& a, int in0, int in_len, int out_full, int o0, int count);

struct ResampleScratch {
  std::vector<uint8_t> tmp;
  std::vector<int32_t> acc;
};

// Two separable passes (horizontal, then vertical with a uint8 intermediate, as PIL and torch's
// uint8 path do). `ay` and `ax` were built for this source.
void resample(const ImgC& in, const Img& out, const Axis& ay, const Axis& ax, const uint8_t* fill,
              ResampleScratch& s);

}  // namespace trd
