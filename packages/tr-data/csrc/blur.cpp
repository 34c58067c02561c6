// GaussianBlur: a separable float32 kernel with reflect borders, rounded half to even into uint8.
#include "blur.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "pipeline.hpp"
#include "resample.hpp"

namespace trd {

namespace {

void gaussian_kernel(int k, double sigma, std::vector<float>& out) {
  out.resize(size_t(k));
  const float half = float(k - 1) * 0.5f, sg = float(sigma);
  float sum = 0.f;
  for (int j = 0; j < k; ++j) {
    const float x = -half + float(j);
    const float t = x / sg;
    out[size_t(j)] = std::exp(-0.5f * (t * t));
    sum += out[size_t(j)];
  }
  for (auto& v : out) v /= sum;
}

// acc[k] (+)= w * src[k] for a row: the accumulation order (tap by tap) is that of a plain loop.
TRD_CLONES void axpy_row(float* acc, const float* src, float w, size_t n, bool first) {
  if (first) {
    for (size_t k = 0; k < n; ++k) acc[k] = 0.f + w * src[k];
  } else {
    for (size_t k = 0; k < n; ++k) acc[k] += w * src[k];
  }
}

TRD_CLONES void round_row(const float* acc, uint8_t* d, size_t n) {
  for (size_t k = 0; k < n; ++k) d[k] = uint8_t(std::min(std::max(rint_f(acc[k]), 0.f), 255.f));
}

}  // namespace

void gaussian_blur(const ImgC& in, const Img& out, int kx, int ky, double sigma, Workspace& ws) {
  const int H = in.h, W = in.w, C = in.c;
  thread_local std::vector<float> wx, wy, ext, acc;
  gaussian_kernel(kx, sigma, wx);
  gaussian_kernel(ky, sigma, wy);
  const int rx = kx / 2, ry = ky / 2;
  thread_local std::vector<int> ym;
  ym.resize(size_t(H) + 2 * size_t(ry));  // kernel <= kMaxKernel, H <= kMaxSide: no overflow
  for (int y = -ry; y < H + ry; ++y) ym[size_t(y + ry)] = extend_index(y, H, PadMode::Reflect);
  // Horizontal pass: each row extended by reflection into floats, then out[k] = sum_t w[t] ext[k + t C],
  // contiguous in k (vectorises for any channel count).
  const size_t rowlen = size_t(W) * size_t(C);
  ws.ftmp.resize(size_t(H) * rowlen);
  ext.resize(size_t(W + 2 * rx) * size_t(C));
  for (int y = 0; y < H; ++y) {
    const uint8_t* s = in.row(y);
    for (int x = -rx; x < W + rx; ++x) {
      const uint8_t* p = s + size_t(extend_index(x, W, PadMode::Reflect)) * size_t(C);
      float* e = ext.data() + size_t(x + rx) * size_t(C);
      for (int c = 0; c < C; ++c) e[c] = float(p[c]);
    }
    float* d = ws.ftmp.data() + size_t(y) * rowlen;
    for (int t = 0; t < kx; ++t) axpy_row(d, ext.data() + size_t(t) * size_t(C), wx[size_t(t)], rowlen, t == 0);
  }
  // Vertical pass -> uint8, rounded half to even.
  acc.resize(rowlen);
  for (int y = 0; y < H; ++y) {
    for (int t = 0; t < ky; ++t)
      axpy_row(acc.data(), ws.ftmp.data() + size_t(ym[size_t(y + t)]) * rowlen, wy[size_t(t)], rowlen, t == 0);
    round_row(acc.data(), out.row(y), rowlen);
  }
}

}  // namespace trd
