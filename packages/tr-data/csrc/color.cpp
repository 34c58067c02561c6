#include "color.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

namespace trd {

namespace {

constexpr int kBlock = 512;  // pixels per planar block (3 x 2 KiB of floats)

// uint8 value semantics on floats: clamp to [0, 255] then truncate, like `.clamp(0, 255).to(uint8)`.
inline float clamp_trunc(float v) { return float(int(std::min(std::max(v, 0.f), 255.f))); }

inline float gray(float r, float g, float b) { return 0.2989f * r + 0.587f * g + 0.114f * b; }

TRD_CLONES void load3(const uint8_t* s, float* r, float* g, float* b, int n) {
  for (int i = 0; i < n; ++i) {
    r[i] = float(s[3 * i]);
    g[i] = float(s[3 * i + 1]);
    b[i] = float(s[3 * i + 2]);
  }
}

TRD_CLONES void store3(uint8_t* d, const float* r, const float* g, const float* b, int n) {
  for (int i = 0; i < n; ++i) {
    d[3 * i] = uint8_t(int(r[i]));
    d[3 * i + 1] = uint8_t(int(g[i]));
    d[3 * i + 2] = uint8_t(int(b[i]));
  }
}

TRD_CLONES void load1(const uint8_t* s, float* x, int n) {
  for (int i = 0; i < n; ++i) x[i] = float(s[i]);
}

TRD_CLONES void store1(uint8_t* d, const float* x, int n) {
  for (int i = 0; i < n; ++i) d[i] = uint8_t(int(x[i]));
}

// _blend(img, other, r) with `other` constant: r * x + add, add = (1 - r) * other.
TRD_CLONES void blend_const(float* x, int n, float r, float add) {
  for (int i = 0; i < n; ++i) x[i] = clamp_trunc(r * x[i] + add);
}

// adjust_saturation: _blend(img, rgb_to_grayscale(img), f) with the grey truncated to uint8.
TRD_CLONES void saturation3(float* r, float* g, float* b, int n, float f, float fc) {
  for (int i = 0; i < n; ++i) {
    const float gr = float(int(gray(r[i], g[i], b[i])));
    const float m = fc * gr;
    r[i] = clamp_trunc(f * r[i] + m);
    g[i] = clamp_trunc(f * g[i] + m);
    b[i] = clamp_trunc(f * b[i] + m);
  }
}

TRD_CLONES int gray_sum3(const float* r, const float* g, const float* b, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += int(gray(r[i], g[i], b[i]));
  return s;
}

TRD_CLONES int sum1(const float* x, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += int(x[i]);
  return s;
}

// adjust_hue: _rgb2hsv, h = (h + factor) mod 1, _hsv2rgb, x * 255.999 truncated; branch-free so
// that it vectorises. fmod(a, 1) for a in [0, 2) is a - (a >= 1) exactly.
void hue3_scalar(float* r, float* g, float* b, int n, float hf) {
  for (int i = 0; i < n; ++i) {
    const float R = r[i] / 255.f, G = g[i] / 255.f, B = b[i] / 255.f;
    const float maxc = std::max(std::max(R, G), B), minc = std::min(std::min(R, G), B);
    const bool eqc = maxc == minc;
    const float cr = maxc - minc;
    const float s = cr / (eqc ? 1.f : maxc);
    const float crd = eqc ? 1.f : cr;
    const float rc = (maxc - R) / crd, gc = (maxc - G) / crd, bc = (maxc - B) / crd;
    const float hr = maxc == R ? bc - gc : 0.f;
    const float hg = ((maxc == G) & (maxc != R)) ? (2.f + rc) - bc : 0.f;
    const float hb = ((maxc != G) & (maxc != R)) ? (4.f + gc) - rc : 0.f;
    const float a = ((hr + hg) + hb) / 6.f + 1.f;
    const float h = a >= 1.f ? a - 1.f : a;
    const float x = h + hf;
    const float hh = x < 0.f ? x + 1.f : (x >= 1.f ? x - 1.f : x);
    const float hs = hh * 6.f;
    const float i6 = std::floor(hs);
    const float f = hs - i6;
    const int ii = int(i6) == 6 ? 0 : int(i6);
    const float v = maxc;
    const float p = std::min(std::max(v * (1.f - s), 0.f), 1.f);
    const float q = std::min(std::max(v * (1.f - s * f), 0.f), 1.f);
    const float t = std::min(std::max(v * (1.f - s * (1.f - f)), 0.f), 1.f);
    // (v q p p t v), (t v v q p p), (p p t v v q) indexed by ii
    const float ro = ((ii == 0) | (ii == 5)) ? v : (ii == 1 ? q : (ii == 4 ? t : p));
    const float go = ((ii == 1) | (ii == 2)) ? v : (ii == 0 ? t : (ii == 3 ? q : p));
    const float bo = ((ii == 3) | (ii == 4)) ? v : (ii == 2 ? t : (ii == 5 ? q : p));
    r[i] = float(int(ro * 255.999f));
    g[i] = float(int(go * 255.999f));
    b[i] = float(int(bo * 255.999f));
  }
}

#if defined(__GNUC__) && defined(__x86_64__)
// hue3_scalar eight pixels at a time: the same float32 operations in the same order (selects become
// masks), so the bytes are identical to the scalar loop's.
__attribute__((target("avx2"))) void hue3_avx2(float* r, float* g, float* b, int n, float hf) {
  const __m256 k255 = _mm256_set1_ps(255.f), one = _mm256_set1_ps(1.f), zero = _mm256_setzero_ps();
  const __m256 six = _mm256_set1_ps(6.f), two = _mm256_set1_ps(2.f), four = _mm256_set1_ps(4.f);
  const __m256 up = _mm256_set1_ps(255.999f), vhf = _mm256_set1_ps(hf);
#define clamp01(v) _mm256_min_ps(_mm256_max_ps((v), zero), one)
#define sel(mask, a, b) _mm256_blendv_ps((b), (a), (mask)) /* mask ? a : b */
#define is(k) _mm256_castsi256_ps(_mm256_cmpeq_epi32(ii, _mm256_set1_epi32(k)))
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 R = _mm256_div_ps(_mm256_loadu_ps(r + i), k255);
    const __m256 G = _mm256_div_ps(_mm256_loadu_ps(g + i), k255);
    const __m256 B = _mm256_div_ps(_mm256_loadu_ps(b + i), k255);
    const __m256 maxc = _mm256_max_ps(_mm256_max_ps(R, G), B), minc = _mm256_min_ps(_mm256_min_ps(R, G), B);
    const __m256 eqc = _mm256_cmp_ps(maxc, minc, _CMP_EQ_OQ);
    const __m256 cr = _mm256_sub_ps(maxc, minc);
    const __m256 s = _mm256_div_ps(cr, sel(eqc, one, maxc));
    const __m256 crd = sel(eqc, one, cr);
    const __m256 rc = _mm256_div_ps(_mm256_sub_ps(maxc, R), crd);
    const __m256 gc = _mm256_div_ps(_mm256_sub_ps(maxc, G), crd);
    const __m256 bc = _mm256_div_ps(_mm256_sub_ps(maxc, B), crd);
    const __m256 mR = _mm256_cmp_ps(maxc, R, _CMP_EQ_OQ), mG = _mm256_cmp_ps(maxc, G, _CMP_EQ_OQ);
    const __m256 hr = _mm256_and_ps(mR, _mm256_sub_ps(bc, gc));
    const __m256 hg = _mm256_and_ps(_mm256_andnot_ps(mR, mG), _mm256_sub_ps(_mm256_add_ps(two, rc), bc));
    const __m256 hb = _mm256_andnot_ps(_mm256_or_ps(mR, mG), _mm256_sub_ps(_mm256_add_ps(four, gc), rc));
    const __m256 a = _mm256_add_ps(_mm256_div_ps(_mm256_add_ps(_mm256_add_ps(hr, hg), hb), six), one);
    const __m256 h = sel(_mm256_cmp_ps(a, one, _CMP_GE_OQ), _mm256_sub_ps(a, one), a);
    const __m256 x = _mm256_add_ps(h, vhf);
    const __m256 hh = sel(_mm256_cmp_ps(x, zero, _CMP_LT_OQ), _mm256_add_ps(x, one),
                          sel(_mm256_cmp_ps(x, one, _CMP_GE_OQ), _mm256_sub_ps(x, one), x));
    const __m256 hs = _mm256_mul_ps(hh, six);
    const __m256 i6 = _mm256_floor_ps(hs);
    const __m256 f = _mm256_sub_ps(hs, i6);
    __m256i ii = _mm256_cvttps_epi32(i6);
    ii = _mm256_andnot_si256(_mm256_cmpeq_epi32(ii, _mm256_set1_epi32(6)), ii);  // 6 -> 0
    const __m256 v = maxc;
    const __m256 p = clamp01(_mm256_mul_ps(v, _mm256_sub_ps(one, s)));
    const __m256 q = clamp01(_mm256_mul_ps(v, _mm256_sub_ps(one, _mm256_mul_ps(s, f))));
    const __m256 t = clamp01(_mm256_mul_ps(v, _mm256_sub_ps(one, _mm256_mul_ps(s, _mm256_sub_ps(one, f)))));
    const __m256 i0 = is(0), i1 = is(1), i2 = is(2), i3 = is(3), i4 = is(4), i5 = is(5);
    const __m256 ro = sel(_mm256_or_ps(i0, i5), v, sel(i1, q, sel(i4, t, p)));
    const __m256 go = sel(_mm256_or_ps(i1, i2), v, sel(i0, t, sel(i3, q, p)));
    const __m256 bo = sel(_mm256_or_ps(i3, i4), v, sel(i2, t, sel(i5, q, p)));
    _mm256_storeu_ps(r + i, _mm256_cvtepi32_ps(_mm256_cvttps_epi32(_mm256_mul_ps(ro, up))));
    _mm256_storeu_ps(g + i, _mm256_cvtepi32_ps(_mm256_cvttps_epi32(_mm256_mul_ps(go, up))));
    _mm256_storeu_ps(b + i, _mm256_cvtepi32_ps(_mm256_cvttps_epi32(_mm256_mul_ps(bo, up))));
  }
  if (i < n) hue3_scalar(r + i, g + i, b + i, n - i, hf);
}
#undef clamp01
#undef sel
#undef is
#endif

void hue3(float* r, float* g, float* b, int n, float hf) {
#if defined(__GNUC__) && defined(__x86_64__)
  if (cpu_avx2()) return hue3_avx2(r, g, b, n, hf);
#endif
  hue3_scalar(r, g, b, n, hf);
}

struct Block {
  float p[3][kBlock];
};

void apply_op(int op, double factor, Block& blk, int n, int C, float contrast_mean) {
  const float f = float(factor), fc = float(1.0 - factor);
  switch (op) {
    case 0:  // brightness: blend with black
      for (int c = 0; c < C; ++c) blend_const(blk.p[c], n, f, 0.f);
      break;
    case 1: {  // contrast: blend with the mean grey
      const float add = fc * contrast_mean;
      for (int c = 0; c < C; ++c) blend_const(blk.p[c], n, f, add);
      break;
    }
    case 2:
      if (C == 3) saturation3(blk.p[0], blk.p[1], blk.p[2], n, f, fc);
      break;
    default:
      if (C == 3) hue3(blk.p[0], blk.p[1], blk.p[2], n, f);
      break;
  }
}

void load_block(const uint8_t* s, Block& blk, int n, int C) {
  if (C == 3)
    load3(s, blk.p[0], blk.p[1], blk.p[2], n);
  else
    load1(s, blk.p[0], n);
}

TRD_CLONES void load_plane(const uint8_t* s, float* x, int n) {
  for (int i = 0; i < n; ++i) x[i] = float(s[i]);
}

TRD_CLONES void store_plane(uint8_t* d, const float* x, int n) {
  for (int i = 0; i < n; ++i) d[i] = uint8_t(int(x[i]));
}

void store_block(uint8_t* d, const Block& blk, int n, int C) {
  if (C == 3)
    store3(d, blk.p[0], blk.p[1], blk.p[2], n);
  else
    store1(d, blk.p[0], n);
}

}  // namespace

void color_jitter(const ImgC& in, const Img& out, const int order[4], const double factor[4], const bool enabled[4]) {
  const int C = in.c;
  if (C != 1 && C != 3) throw DataErr("ColorJitter needs 1 or 3 channels, got an image of shape " + in.shape().str());
  int seq[4], ns = 0, pc = -1;
  for (int k = 0; k < 4; ++k) {
    const int op = order[k];
    if (!enabled[op]) continue;
    if (op == 1) pc = ns;
    seq[ns++] = op;
  }
  const long long npx = (long long)in.h * in.w;
  Block blk;
  // Pass 1 (only with contrast): the ops before contrast, and the sum of the grey they leave. The
  // intermediate image is kept planar (uint8), so pass 2 needs no de-interleaving.
  float mean = 0.f;
  thread_local std::vector<uint8_t> planes;
  const bool planar = pc > 0;
  if (planar) planes.resize(size_t(npx) * size_t(C));
  if (pc >= 0) {
    long long sum = 0;
    for (long long i0 = 0; i0 < npx; i0 += kBlock) {
      const int n = int(std::min<long long>(kBlock, npx - i0));
      load_block(in.p + i0 * C, blk, n, C);
      for (int k = 0; k < pc; ++k) apply_op(seq[k], factor[seq[k]], blk, n, C, 0.f);
      sum += C == 3 ? gray_sum3(blk.p[0], blk.p[1], blk.p[2], n) : sum1(blk.p[0], n);
      if (planar)
        for (int c = 0; c < C; ++c) store_plane(planes.data() + size_t(c) * size_t(npx) + size_t(i0), blk.p[c], n);
    }
    mean = float(sum) / float(npx);  // torch: mean of the float32 grey image
  }
  // Pass 2: contrast (if any) and everything after it.
  const int first = pc >= 0 ? pc : 0;
  for (long long i0 = 0; i0 < npx; i0 += kBlock) {
    const int n = int(std::min<long long>(kBlock, npx - i0));
    if (planar) {
      for (int c = 0; c < C; ++c) load_plane(planes.data() + size_t(c) * size_t(npx) + size_t(i0), blk.p[c], n);
    } else {
      load_block(in.p + i0 * C, blk, n, C);
    }
    for (int k = first; k < ns; ++k) apply_op(seq[k], factor[seq[k]], blk, n, C, mean);
    store_block(out.p + i0 * C, blk, n, C);
  }
}

void rgb_to_gray3(const ImgC& in, const Img& out) {
  const size_t npx = size_t(in.h) * size_t(in.w);
  for (size_t k = 0; k < npx; ++k) {
    const uint8_t* p = in.p + 3 * k;
    const uint8_t g = uint8_t(int(gray(p[0], p[1], p[2])));
    out.p[3 * k] = out.p[3 * k + 1] = out.p[3 * k + 2] = g;
  }
}

}  // namespace trd
