// The pixel kernels of RandAugment / TrivialAugmentWide: torchvision.transforms.v2.functional's uint8 tensor
// kernels, step by step in the same float32 arithmetic. torch fuses `a.add_(b, alpha=s)` into one fma (its
// vectorised add), so those steps are std::fma here (the build has -ffp-contract=off: nothing else fuses).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "autoaugment.hpp"

// The loops with an fma get an FMA clone (chosen at load time by the CPU's features); the default clone calls
// libm's fmaf. Both compute the correctly rounded fma: the same bits.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(TR_DATA_ASAN)
#define AUG_CLONES __attribute__((target_clones("fma", "default")))
#else
#define AUG_CLONES
#endif

namespace trd {

namespace {

// `.clamp_(0, 255).to(torch.uint8)`: clamp, truncate.
inline uint8_t clamp_u8(float v) { return uint8_t(int(std::min(std::max(v, 0.f), 255.f))); }

// `r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114)`, floored (v2's grey of a uint8 image).
inline float grey(const uint8_t* p) {
  float l = float(p[0]) * 0.2989f;
  l = std::fma(float(p[1]), 0.587f, l);
  l = std::fma(float(p[2]), 0.114f, l);
  return std::floor(l);
}

size_t pixels(const ImgC& in) { return size_t(in.h) * size_t(in.w); }

// _blend(img, other, ratio) = img.mul(ratio).add_(other, alpha=1 - ratio), clamped and truncated.
inline uint8_t blend(uint8_t x, float other, float ratio, float alpha) {
  return clamp_u8(std::fma(other, alpha, float(x) * ratio));
}

AUG_CLONES void blend_const(const uint8_t* __restrict in, uint8_t* __restrict out, size_t n, float other, float ratio,
                            float alpha) {
  for (size_t k = 0; k < n; ++k) out[k] = blend(in[k], other, ratio, alpha);
}

AUG_CLONES unsigned long long grey_sum(const uint8_t* __restrict p, size_t n, int c) {
  unsigned long long sum = 0;
  if (c == 3) {
    for (size_t k = 0; k < n; ++k) sum += (unsigned long long)grey(p + 3 * k);
  } else {
    for (size_t k = 0; k < n; ++k) sum += p[k];
  }
  return sum;
}

// torch.linspace(start, end, n)[k] in float32 (CPU: the first half start + step * k, the second end - step *
// (n - 1 - k), each one rounding: exact in double here, then rounded once).
float linspace_f32(double start_d, double end_d, int n, int k) {
  const float start = float(start_d), end = float(end_d);
  if (n == 1) return start;
  const float step = (end - start) / float(n - 1);
  if (k < n / 2) return float(double(start) + double(step) * double(k));
  return float(double(end) - double(step) * double(n - 1 - k));
}

}  // namespace

void aug_affine_nearest(const ImgC& in, const Img& out, const double matrix[6], const uint8_t* fill) {
  const int H = in.h, W = in.w, C = in.c;
  // _affine_grid: theta (float32) transposed and divided by (w / 2, h / 2); the base grid is
  // linspace((1 - n) / 2, (n - 1) / 2, n) per axis; bmm sums x * r0 + y * r1, then + r2 (no fma: measured).
  float t[6];
  for (int k = 0; k < 6; ++k) t[k] = float(matrix[k]);
  const float hw = float(0.5 * W), hh = float(0.5 * H);
  const float rx0 = t[0] / hw, rx1 = t[1] / hw, rx2 = t[2] / hw;
  const float ry0 = t[3] / hh, ry1 = t[4] / hh, ry2 = t[5] / hh;
  // grid_sample (align_corners=False): (g + 1) * (size / 2) - 0.5, rounded half to even; outside reads fill.
  const float sx = float(W) / 2, sy = float(H) / 2;
  thread_local std::vector<float> xs;
  xs.resize(size_t(W));
  for (int j = 0; j < W; ++j) xs[size_t(j)] = linspace_f32((1.0 - W) * 0.5, (W - 1.0) * 0.5, W, j);
  for (int i = 0; i < H; ++i) {
    const float y = linspace_f32((1.0 - H) * 0.5, (H - 1.0) * 0.5, H, i);
    const float yx = y * rx1, yy = y * ry1;
    uint8_t* d = out.row(i);
    for (int j = 0; j < W; ++j, d += C) {
      const float x = xs[size_t(j)];
      const float gx = (x * rx0 + yx) + rx2, gy = (x * ry0 + yy) + ry2;
      const float ix = std::nearbyint((gx + 1.f) * sx - 0.5f), iy = std::nearbyint((gy + 1.f) * sy - 0.5f);
      if (ix >= 0.f && ix < float(W) && iy >= 0.f && iy < float(H))
        std::memcpy(d, in.row(int(iy)) + size_t(ix) * size_t(C), size_t(C));
      else
        std::memcpy(d, fill, size_t(C));
    }
  }
}

AUG_CLONES void aug_brightness(const ImgC& in, const Img& out, double factor) {
  const float f = float(factor);  // image.mul(factor).clamp_(0, 255)
  const size_t n = in.shape().bytes();
  // local pointers: a uint8_t store through out.p could alias out.p itself, which would keep the loop scalar
  const uint8_t* __restrict s = in.p;
  uint8_t* __restrict d = out.p;
  for (size_t k = 0; k < n; ++k) d[k] = clamp_u8(float(s[k]) * f);
}

AUG_CLONES void aug_saturation(const ImgC& in, const Img& out, double factor) {
  if (in.c == 1) {  // torchvision returns grey images unchanged
    std::memcpy(out.p, in.p, in.shape().bytes());
    return;
  }
  const float f = float(factor), a = float(1.0 - factor);
  const size_t n = pixels(in);
  const uint8_t* __restrict src = in.p;
  uint8_t* __restrict dst = out.p;
  for (size_t k = 0; k < n; ++k) {
    const uint8_t* s = src + 3 * k;
    const float g = grey(s);
    for (int c = 0; c < 3; ++c) dst[3 * k + size_t(c)] = blend(s[c], g, f, a);
  }
}

void aug_contrast(const ImgC& in, const Img& out, double factor) {
  // the mean of the (floored) grey image: torch sums the float32 values (exact while the sum is below 2^24, as on
  // every image of up to 65793 pixels; beyond, its pairwise sum may round where this exact one does not: equal on
  // the tests' 375x500 image), then divides by the pixel count in float32
  const float mean = float(grey_sum(in.p, pixels(in), in.c)) / float(pixels(in));
  blend_const(in.p, out.p, in.shape().bytes(), mean, float(factor), float(1.0 - factor));
}

AUG_CLONES void aug_sharpness(const ImgC& in, const Img& out, double factor) {
  std::memcpy(out.p, in.p, in.shape().bytes());  // the border rows and columns stay as they are
  const int H = in.h, W = in.w, C = in.c;
  if (H <= 2 || W <= 2) return;
  const float a = float(1.0 - factor);
  const size_t row = size_t(W) * size_t(C);
  for (int i = 1; i < H - 1; ++i) {
    const uint8_t* __restrict s = in.row(i);
    uint8_t* __restrict d = out.row(i);
    for (size_t k = size_t(C); k < row - size_t(C); ++k) {
      // torch's float32 conv with (1, 1, 1; 1, 5, 1; 1, 1, 1) / 13, rounded: T / 13 is never within 1/26 of a
      // half, far beyond float32's error, so the rounded integer quotient is the same number
      const int t = s[k - C - row] + s[k - row] + s[k + C - row] + s[k - C] + 5 * s[k] + s[k + C] + s[k - C + row] +
                    s[k + row] + s[k + C + row];
      const int blurred = (2 * t + 13) / 26;
      d[k] = clamp_u8(std::fma(float(blurred - s[k]), a, float(s[k])));
    }
  }
}

void aug_posterize(const ImgC& in, const Img& out, int bits) {
  const size_t n = in.shape().bytes();
  if (bits >= 8) {
    std::memcpy(out.p, in.p, n);
    return;
  }
  const uint8_t mask = uint8_t(((1 << bits) - 1) << (8 - bits));
  for (size_t k = 0; k < n; ++k) out.p[k] = in.p[k] & mask;
}

void aug_solarize(const ImgC& in, const Img& out, double threshold) {
  const float t = float(threshold);  // `image >= threshold` compares in float32
  const size_t n = in.shape().bytes();
  for (size_t k = 0; k < n; ++k) out.p[k] = float(in.p[k]) >= t ? uint8_t(255 - in.p[k]) : in.p[k];
}

void aug_autocontrast(const ImgC& in, const Img& out) {
  const size_t n = pixels(in), C = size_t(in.c);
  for (size_t c = 0; c < C; ++c) {
    uint8_t mn = 255, mx = 0;
    for (size_t k = 0; k < n; ++k) {
      mn = std::min(mn, in.p[k * C + c]);
      mx = std::max(mx, in.p[k * C + c]);
    }
    // v2: (x - min) / ((max - min) * (1 / 255)); a flat channel: min 0, scale 1 (unchanged)
    const float lo = mx == mn ? 0.f : float(mn);
    const float inv = mx == mn ? 1.f : float(mx - mn) * float(1.0 / 255.0);
    for (size_t k = 0; k < n; ++k) out.p[k * C + c] = clamp_u8((float(in.p[k * C + c]) - lo) / inv);
  }
}

void aug_equalize(const ImgC& in, const Img& out) {
  // v2's (and PIL's) equalisation, in integers: lut[0] = 0, lut[v] = (cum[v - 1] + step / 2) / step, step = the
  // pixels not of the channel's largest value, over 255; step 0: the channel is unchanged
  const size_t n = pixels(in), C = size_t(in.c);
  for (size_t c = 0; c < C; ++c) {
    long long hist[256] = {0};
    for (size_t k = 0; k < n; ++k) ++hist[in.p[k * C + c]];
    int top = 255;
    while (hist[top] == 0) --top;
    const long long step = ((long long)n - hist[top]) / 255;
    uint8_t lut[256];
    long long cum = 0;
    for (int v = 0; v < 256; ++v) {
      lut[v] = step == 0 ? uint8_t(v) : uint8_t(std::min<long long>(255, v == 0 ? 0 : (cum + step / 2) / step));
      cum += hist[v];
    }
    for (size_t k = 0; k < n; ++k) out.p[k * C + c] = lut[in.p[k * C + c]];
  }
}

double aug_magnitude(int op, int bin, int bins, bool wide, int h, int w) {
  const double strength = wide ? 0.99 : 0.9;  // Brightness, Color, Contrast, Sharpness
  switch (op) {
    case kAugShearX:
    case kAugShearY:
      return linspace_f32(0.0, wide ? 0.99 : 0.3, bins, bin);
    case kAugTranslateX:
      return linspace_f32(0.0, wide ? 32.0 : 150.0 / 331.0 * w, bins, bin);
    case kAugTranslateY:
      return linspace_f32(0.0, wide ? 32.0 : 150.0 / 331.0 * h, bins, bin);
    case kAugRotate:
      return linspace_f32(0.0, wide ? 135.0 : 30.0, bins, bin);
    case kAugBrightness:
    case kAugColor:
    case kAugContrast:
    case kAugSharpness:
      return linspace_f32(0.0, strength, bins, bin);
    case kAugPosterize: {
      // (8 - (arange(bins) / ((bins - 1) / d))).round().int() in float32, d = 4 (6 wide)
      const float x = float(bin) / float(double(bins - 1) / (wide ? 6.0 : 4.0));
      return double(int(std::nearbyint(8.f - x)));
    }
    case kAugSolarize:
      return linspace_f32(1.0, 0.0, bins, bin);  // v2: a fraction of the dtype's maximum
    default:
      return 0.0;  // Identity, AutoContrast, Equalize take none
  }
}

}  // namespace trd
