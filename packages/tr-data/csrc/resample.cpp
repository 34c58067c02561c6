#include "resample.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

#include "simd.hpp"

namespace trd {


int extend_index(long long i, int n, PadMode mode) {
  if (i >= 0 && i < n) return int(i);
  switch (mode) {
    case PadMode::Constant:
      return -1;
    case PadMode::Edge:
      return i < 0 ? 0 : n - 1;
    case PadMode::Reflect: {  // ... 2 1 | 0 1 2 ... n-1 | n-2 ...
      if (n == 1) return 0;
      const long long period = 2LL * n - 2;
      long long m = i % period;
      if (m < 0) m += period;
      return int(m < n ? m : period - m);
    }
    case PadMode::Symmetric: {  // ... 1 0 | 0 1 2 ... n-1 | n-1 ...
      const long long period = 2LL * n;
      long long m = i % period;
      if (m < 0) m += period;
      return int(m < n ? m : period - 1 - m);
    }
  }
  return -1;
}

void remap_window(const ImgC& in, const Img& out, long long y0, long long x0, PadMode mode, const uint8_t* fill) {
  const int C = in.c, W = out.w;
  const size_t px = size_t(C);
  // Output columns [xa, xb) read source columns x0 + x inside the image: one memcpy per row.
  const long long xa_ll = std::clamp<long long>(-x0, 0, W);
  const long long xb_ll = std::clamp<long long>(in.w - x0, xa_ll, W);
  const int xa = int(xa_ll), xb = int(xb_ll);
  thread_local std::vector<int> xmap;
  xmap.resize(size_t(W));
  for (int x = 0; x < W; ++x) xmap[size_t(x)] = extend_index(x0 + x, in.w, mode);
  for (int y = 0; y < out.h; ++y) {
    uint8_t* d = out.row(y);
    const int sy = extend_index(y0 + y, in.h, mode);
    if (sy < 0) {
      for (int x = 0; x < W; ++x) std::memcpy(d + size_t(x) * px, fill, px);
      continue;
    }
    const uint8_t* s = in.row(sy);
    for (int x = 0; x < xa; ++x) {
      const int sx = xmap[size_t(x)];
      std::memcpy(d + size_t(x) * px, sx < 0 ? fill : s + size_t(sx) * px, px);
    }
    if (xb > xa) std::memcpy(d + size_t(xa) * px, s + size_t(x0 + xa) * px, size_t(xb - xa) * px);
    for (int x = xb; x < W; ++x) {
      const int sx = xmap[size_t(x)];
      std::memcpy(d + size_t(x) * px, sx < 0 ? fill : s + size_t(sx) * px, px);
    }
  }
}

void build_axis(Axis& a, int in0, int in_len, int out_full, int o0, int count) {
  a.count = count;
  a.start.assign(size_t(count), -1);
  a.ntaps.assign(size_t(count), 0);
  a.identity = false;
  if (in_len == out_full) {  // a pure shift: one tap of weight 1
    a.taps = 8;
    a.w.assign(size_t(count) * 8, 0);
    bool all_inside = true;
    for (int k = 0; k < count; ++k) {
      const int kk = o0 + k;
      if (kk < 0 || kk >= out_full) {
        all_inside = false;
        continue;
      }
      a.start[size_t(k)] = in0 + kk;
      a.ntaps[size_t(k)] = 1;
      a.w[size_t(k) * 8] = int16_t(1 << kPrec);
    }
    a.identity = all_inside;
    return;
  }
  const double scale = double(in_len) / double(out_full);
  const double fscale = std::max(scale, 1.0);
  const double support = fscale;  // bilinear (triangle) support 1, widened when downscaling
  const double inv = 1.0 / fscale;
  const int ksize = int(std::ceil(support)) * 2 + 1;
  a.taps = (ksize + 7) / 8 * 8;  // zero padded: the SIMD kernels read whole pairs / groups of 8
  a.w.assign(size_t(count) * size_t(a.taps), 0);
  thread_local std::vector<double> tmp;
  tmp.resize(size_t(ksize));
  for (int k = 0; k < count; ++k) {
    const int kk = o0 + k;
    if (kk < 0 || kk >= out_full) continue;
    const double center = (kk + 0.5) * scale;
    int xmin = int(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_len) xmax = in_len;
    const int n = std::min(xmax - xmin, ksize);
    double total = 0.0;
    for (int j = 0; j < n; ++j) {
      const double t = (j + xmin - center + 0.5) * inv;
      const double w = std::max(0.0, 1.0 - std::fabs(t));
      tmp[size_t(j)] = w;
      total += w;
    }
    int16_t* wk = &a.w[size_t(k) * size_t(a.taps)];
    for (int j = 0; j < n; ++j) {
      const double w = total > 0 ? tmp[size_t(j)] / total : 0.0;
      wk[j] = int16_t(w * double(1 << kPrec) + 0.5);
    }
    a.start[size_t(k)] = in0 + xmin;
    a.ntaps[size_t(k)] = n;
  }
}

namespace {

constexpr int32_t kHalf = 1 << (kPrec - 1);

inline uint8_t fix_u8(int32_t acc) {
  const int32_t v = acc >> kPrec;
  return uint8_t(v < 0 ? 0 : (v > 255 ? 255 : v));
}

bool detect_avx2_cpu() {
#if defined(__GNUC__) && defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}
const bool g_simd = detect_avx2_cpu();

// ---- horizontal pass: scalar (any C) ----------------------------------------------------------
// Exact integer arithmetic, so every SIMD kernel below gives the same bytes.
template <int C>
void hpass_row_c(const uint8_t* srow, uint8_t* drow, const Axis& ax, const uint8_t* fill, int Cr) {
  const int nc = C > 0 ? C : Cr;
  const int taps = ax.taps;
  for (int x = 0; x < ax.count; ++x) {
    const int st = ax.start[size_t(x)];
    uint8_t* d = drow + size_t(x) * size_t(nc);
    if (st < 0) {
      std::memcpy(d, fill, size_t(nc));
      continue;
    }
    const uint8_t* p = srow + size_t(st) * size_t(nc);
    const int16_t* w = &ax.w[size_t(x) * size_t(taps)];
    const int n = ax.ntaps[size_t(x)];
    for (int c = 0; c < nc; ++c) {
      int32_t acc = kHalf;
      for (int t = 0; t < n; ++t) acc += int32_t(w[t]) * int32_t(p[t * nc + c]);
      d[c] = fix_u8(acc);
    }
  }
}

#if TRD_HAVE_AVX2
// Loads n (<= 8) bytes at q, zero-filling what lies at or beyond `end`.
__attribute__((target("avx2"))) inline __m128i load8_guarded(const uint8_t* q, const uint8_t* end) {
  if (q + 8 <= end) return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
  alignas(16) uint8_t b[16] = {0};
  const ptrdiff_t avail = end - q;
  if (avail > 0) std::memcpy(b, q, size_t(avail < 8 ? avail : 8));
  return _mm_load_si128(reinterpret_cast<const __m128i*>(b));
}

// Loads 16 bytes at q into both 128-bit lanes, zero-filling what lies at or beyond `end`.
__attribute__((target("avx2"))) inline __m256i load16x2_guarded(const uint8_t* q, const uint8_t* end) {
  if (q + 16 <= end) return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  alignas(16) uint8_t b[16] = {0};
  const ptrdiff_t avail = end - q;
  if (avail > 0) std::memcpy(b, q, size_t(avail < 16 ? avail : 16));
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(b)));
}

// RGB: four taps per madd. Both lanes hold pixels t..t+3; lane 0 takes (t, t+1), lane 1 (t+2, t+3)
// as int16 pairs (r r g g b b 0 0); the weights (w0 w1 | w2 w3) are broadcast per lane.
__attribute__((target("avx2"))) inline __m256i hacc_c3(const uint8_t* p, const int16_t* w, int n, const uint8_t* end) {
  const __m256i mask = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,  //
                                        6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
  const __m256i widx = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  __m256i acc = _mm256_madd_epi16(
      _mm256_shuffle_epi8(load16x2_guarded(p, end), mask),
      _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w))), widx));
  for (int j = 4; j < n; j += 4) {
    const __m256i px = _mm256_shuffle_epi8(load16x2_guarded(p + 3 * j, end), mask);
    const __m256i wv = _mm256_permutevar8x32_epi32(
        _mm256_castsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + j))), widx);
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(px, wv));
  }
  return acc;
}

// Two output pixels share the reduction and packing; each store writes 4 bytes (the extra byte is
// rewritten by the next pixel) except at the end of the row.
__attribute__((target("avx2"))) void hpass_row_c3_simd(const uint8_t* srow, uint8_t* drow, const Axis& ax,
                                                       const uint8_t* fill, const uint8_t* end) {
  const __m128i half = _mm_set1_epi32(kHalf);
  const __m256i half2 = _mm256_set1_epi32(kHalf);
  const int count = ax.count, taps = ax.taps;
  const int32_t* starts = ax.start.data();
  const int32_t* ntaps = ax.ntaps.data();
  const int16_t* wts = ax.w.data();
  int x = 0;
  while (x < count) {
    const int st = starts[x];
    uint8_t* d = drow + size_t(x) * 3;
    if (st < 0) {
      d[0] = fill[0];
      d[1] = fill[1];
      d[2] = fill[2];
      ++x;
      continue;
    }
    if (x + 1 < count && starts[x + 1] >= 0) {
      const __m256i a = hacc_c3(srow + size_t(st) * 3, wts + size_t(x) * size_t(taps), ntaps[x], end);
      const __m256i b = hacc_c3(srow + size_t(starts[x + 1]) * 3, wts + size_t(x + 1) * size_t(taps), ntaps[x + 1], end);
      __m256i s2 = _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
      s2 = _mm256_srai_epi32(_mm256_add_epi32(s2, half2), kPrec);
      s2 = _mm256_packs_epi32(s2, s2);
      s2 = _mm256_packus_epi16(s2, s2);
      const uint32_t va = uint32_t(_mm256_cvtsi256_si32(s2));
      const uint32_t vb = uint32_t(_mm256_extract_epi32(s2, 4));
      std::memcpy(d, &va, 4);
      if (x + 2 < count) {
        std::memcpy(d + 3, &vb, 4);
      } else {
        d[3] = uint8_t(vb);
        d[4] = uint8_t(vb >> 8);
        d[5] = uint8_t(vb >> 16);
      }
      x += 2;
      continue;
    }
    const __m256i acc = hacc_c3(srow + size_t(st) * 3, wts + size_t(x) * size_t(taps), ntaps[x], end);
    __m128i r = _mm_add_epi32(_mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1)), half);
    r = _mm_srai_epi32(r, kPrec);
    r = _mm_packs_epi32(r, r);
    r = _mm_packus_epi16(r, r);
    const uint32_t v = uint32_t(_mm_cvtsi128_si32(r));
    if (x + 1 < count) {
      std::memcpy(d, &v, 4);
    } else {
      d[0] = uint8_t(v);
      d[1] = uint8_t(v >> 8);
      d[2] = uint8_t(v >> 16);
    }
    ++x;
  }
}

// RGBA: two taps per madd: bytes (c0..c3 of tap 0, c0..c3 of tap 1) -> int16 pairs per channel.
__attribute__((target("avx2"))) void hpass_row_c4_simd(const uint8_t* srow, uint8_t* drow, const Axis& ax,
                                                       const uint8_t* fill, const uint8_t* end) {
  const __m128i mask = _mm_setr_epi8(0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1);
  const __m128i half = _mm_set1_epi32(kHalf);
  const int taps = ax.taps;
  for (int x = 0; x < ax.count; ++x) {
    const int st = ax.start[size_t(x)];
    uint8_t* d = drow + size_t(x) * 4;
    if (st < 0) {
      std::memcpy(d, fill, 4);
      continue;
    }
    const uint8_t* p = srow + size_t(st) * 4;
    const int16_t* w = &ax.w[size_t(x) * size_t(taps)];
    const int pairs = (ax.ntaps[size_t(x)] + 1) / 2;
    __m128i acc = half;
    for (int j = 0; j < pairs; ++j) {
      const __m128i px = _mm_shuffle_epi8(load8_guarded(p + 8 * j, end), mask);
      int32_t wp;
      std::memcpy(&wp, w + 2 * j, 4);
      acc = _mm_add_epi32(acc, _mm_madd_epi16(px, _mm_set1_epi32(wp)));
    }
    acc = _mm_srai_epi32(acc, kPrec);
    __m128i r = _mm_packs_epi32(acc, acc);
    r = _mm_packus_epi16(r, r);
    const uint32_t v = uint32_t(_mm_cvtsi128_si32(r));
    std::memcpy(d, &v, 4);
  }
}

// Grey: eight taps per madd group.
__attribute__((target("avx2"))) inline void hpass_px_c1_simd(const uint8_t* srow, uint8_t* drow, const Axis& ax,
                                                             const uint8_t* fill, const uint8_t* end, int x) {
  const int st = ax.start[size_t(x)];
  if (st < 0) {
    drow[x] = fill[0];
    return;
  }
  const uint8_t* p = srow + st;
  const int16_t* w = &ax.w[size_t(x) * size_t(ax.taps)];
  const int groups = (ax.ntaps[size_t(x)] + 7) / 8;
  __m128i acc = _mm_setzero_si128();
  for (int j = 0; j < groups; ++j) {
    const __m128i px = _mm_cvtepu8_epi16(load8_guarded(p + 8 * j, end));
    const __m128i wv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 8 * j));
    acc = _mm_add_epi32(acc, _mm_madd_epi16(px, wv));
  }
  acc = _mm_hadd_epi32(acc, acc);
  acc = _mm_hadd_epi32(acc, acc);
  drow[x] = fix_u8(kHalf + _mm_cvtsi128_si32(acc));
}

// With at most 8 taps (scale factors down to 1/3), four outputs share one reduction: the same
// integer sums, so the same bytes as one output at a time.
__attribute__((target("avx2"))) void hpass_row_c1_simd(const uint8_t* srow, uint8_t* drow, const Axis& ax,
                                                       const uint8_t* fill, const uint8_t* end) {
  const int count = ax.count;
  int x = 0;
  if (ax.taps == 8) {
    const int32_t* starts = ax.start.data();
    const int16_t* wts = ax.w.data();
    const __m128i half = _mm_set1_epi32(kHalf);
    // ends with an overlapping group when count is not a multiple of 4 (same values rewritten)
    for (int k = 0; count >= 4 && k < count; k += 4) {
      x = std::min(k, count - 4);
      const int s0 = starts[x], s1 = starts[x + 1], s2 = starts[x + 2], s3 = starts[x + 3];
      const int smin = std::min(std::min(s0, s1), std::min(s2, s3));
      const int smax = std::max(std::max(s0, s1), std::max(s2, s3));
      if (smin < 0 || srow + smax + 8 > end) {
        for (int j = 0; j < 4; ++j) hpass_px_c1_simd(srow, drow, ax, fill, end, x + j);
        continue;
      }
      auto ld = [&](int st) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(srow + st)); };
      const __m256i p01 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi64(ld(s0), ld(s1)));
      const __m256i p23 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi64(ld(s2), ld(s3)));
      const __m256i w01 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wts + size_t(x) * 8));
      const __m256i w23 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wts + size_t(x + 2) * 8));
      // lanes: (x | x+1) and (x+2 | x+3); two hadds leave lane 0 = (x, x+2, ..), lane 1 = (x+1, x+3, ..)
      __m256i h = _mm256_hadd_epi32(_mm256_madd_epi16(p01, w01), _mm256_madd_epi16(p23, w23));
      h = _mm256_hadd_epi32(h, h);
      __m128i v = _mm_unpacklo_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
      v = _mm_srai_epi32(_mm_add_epi32(v, half), kPrec);
      v = _mm_packs_epi32(v, v);
      v = _mm_packus_epi16(v, v);
      const uint32_t r = uint32_t(_mm_cvtsi128_si32(v));
      std::memcpy(drow + x, &r, 4);
    }
    if (count >= 4) return;
  }
  for (; x < count; ++x) hpass_px_c1_simd(srow, drow, ax, fill, end, x);
}

// Vertical: 32 bytes of a row at a time, two rows per madd; weight pairs hoisted out of the loop.
__attribute__((target("avx2"))) void vpass_row_simd(const uint8_t* const* rows, const int16_t* w, int n, int len,
                                                    uint8_t* dst) {
  const __m256i half = _mm256_set1_epi32(kHalf);
  const int np = (n + 1) / 2;
  __m256i wp[32];
  const uint8_t* r0[32];
  const uint8_t* r1[32];
  thread_local std::vector<uint8_t> zeros;
  if (int(zeros.size()) < len) zeros.assign(size_t(len), 0);
  for (int j = 0; j < np; ++j) {
    const int t = 2 * j;
    const int32_t wb = t + 1 < n ? w[t + 1] : 0;
    wp[j] = _mm256_set1_epi32(int32_t(uint16_t(w[t])) | (wb << 16));
    r0[j] = rows[t];
    r1[j] = t + 1 < n ? rows[t + 1] : zeros.data();
  }
  int k = 0;
  // a row that is not a multiple of 16 long ends with an overlapping group (same values rewritten)
  for (int k0 = 0; len >= 16 && k0 < len; k0 += 16) {
    k = std::min(k0, len - 16);
    __m256i acc0 = half, acc1 = half;
    for (int j = 0; j < np; ++j) {
      const __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r0[j] + k)));
      const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r1[j] + k)));
      acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), wp[j]));
      acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), wp[j]));
    }
    const __m256i r16 = _mm256_packs_epi32(_mm256_srai_epi32(acc0, kPrec), _mm256_srai_epi32(acc1, kPrec));
    const __m256i r8 = _mm256_permute4x64_epi64(_mm256_packus_epi16(r16, r16), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k), _mm256_castsi256_si128(r8));
  }
  if (len >= 16) return;
  for (; k < len; ++k) {
    int32_t acc = kHalf;
    for (int t = 0; t < n; ++t) acc += int32_t(w[t]) * int32_t(rows[t][k]);
    dst[k] = fix_u8(acc);
  }
}
#endif

void vpass_row_scalar(const uint8_t* const* rows, const int16_t* w, int n, int len, int32_t* acc, uint8_t* dst) {
  for (int k = 0; k < len; ++k) acc[k] = kHalf;
  for (int t = 0; t < n; ++t) {
    const uint8_t* r = rows[t];
    const int32_t wt = w[t];
    for (int k = 0; k < len; ++k) acc[k] += wt * int32_t(r[k]);
  }
  for (int k = 0; k < len; ++k) dst[k] = fix_u8(acc[k]);
}

// One output row of the horizontal pass. `end` bounds what the SIMD loads may touch.
void hpass_row(const uint8_t* srow, uint8_t* drow, const Axis& ax, const uint8_t* fill, int C, const uint8_t* end) {
#if TRD_HAVE_AVX2
  if (g_simd) {
    if (C == 3) return hpass_row_c3_simd(srow, drow, ax, fill, end);
    if (C == 1) return hpass_row_c1_simd(srow, drow, ax, fill, end);
    if (C == 4) return hpass_row_c4_simd(srow, drow, ax, fill, end);
  }
#endif
  switch (C) {
    case 1: return hpass_row_c<1>(srow, drow, ax, fill, C);
    case 3: return hpass_row_c<3>(srow, drow, ax, fill, C);
    case 4: return hpass_row_c<4>(srow, drow, ax, fill, C);
    default: return hpass_row_c<0>(srow, drow, ax, fill, C);
  }
}

void vpass_row(const uint8_t* const* rows, const int16_t* w, int n, int len, int32_t* acc, uint8_t* dst) {
#if TRD_HAVE_AVX2
  if (g_simd && n <= 64) return vpass_row_simd(rows, w, n, len, dst);
#endif
  vpass_row_scalar(rows, w, n, len, acc, dst);
}

void fill_row(uint8_t* d, int w, int C, const uint8_t* fill) {
  for (int x = 0; x < w; ++x) std::memcpy(d + size_t(x) * size_t(C), fill, size_t(C));
}

// Vertical pass of output row y: rows come from `base` (row r at base + (r - r0) * stride).
void vertical_row(const Axis& ay, int y, const uint8_t* base, int r0, size_t stride, int len, ResampleScratch& s,
                  uint8_t* d) {
  const int st = ay.start[size_t(y)];
  const int n = ay.ntaps[size_t(y)];
  const int16_t* w = &ay.w[size_t(y) * size_t(ay.taps)];
  thread_local std::vector<const uint8_t*> rows;
  rows.resize(size_t(n));
  for (int t = 0; t < n; ++t) rows[size_t(t)] = base + size_t(st + t - r0) * stride;
  vpass_row(rows.data(), w, n, len, s.acc.data(), d);
}

}  // namespace

bool cpu_avx2() { return g_simd; }

void resample(const ImgC& in, const Img& out, const Axis& ay, const Axis& ax, const uint8_t* fill,
              ResampleScratch& s) {
  const int C = in.c, ow = out.w, oh = out.h;
  const size_t rowlen = size_t(ow) * size_t(C);
  const uint8_t* in_end = in.p + in.shape().bytes();
  if (ax.identity && ay.identity) {  // a plain window copy
    const size_t off = size_t(ax.start[0]) * size_t(C);
    for (int y = 0; y < oh; ++y) std::memcpy(out.row(y), in.row(ay.start[size_t(y)]) + off, rowlen);
    return;
  }
  if (ay.identity) {  // horizontal pass only, straight into the output
    for (int y = 0; y < oh; ++y) hpass_row(in.row(ay.start[size_t(y)]), out.row(y), ax, fill, C, in_end);
    return;
  }
  // Source rows [rlo, rhi) feed the vertical pass.
  int rlo = INT_MAX, rhi = -1;
  for (int y = 0; y < oh; ++y) {
    const int st = ay.start[size_t(y)];
    if (st < 0) continue;
    rlo = std::min(rlo, st);
    rhi = std::max(rhi, st + ay.ntaps[size_t(y)]);
  }
  const size_t in_stride = size_t(in.w) * size_t(C);
  if (rhi <= rlo) {  // every output row lies outside the resized image
    for (int y = 0; y < oh; ++y) fill_row(out.row(y), ow, C, fill);
    return;
  }
  if (ax.identity) {  // vertical pass only, reading the source with a column offset
    const uint8_t* base = in.row(rlo) + size_t(ax.start[0]) * size_t(C);
    s.acc.resize(rowlen);
    for (int y = 0; y < oh; ++y) {
      if (ay.start[size_t(y)] < 0)
        fill_row(out.row(y), ow, C, fill);
      else
        vertical_row(ay, y, base, rlo, in_stride, int(rowlen), s, out.row(y));
    }
    return;
  }
  // Both axes: run the (costlier) horizontal pass on the fewer rows. Vertical first when the output
  // has fewer rows than the source rows it reads; the order is a function of the sizes only.
  if (oh < rhi - rlo) {
    int clo = INT_MAX, chi = -1;  // source columns the horizontal pass reads
    for (int x = 0; x < ow; ++x) {
      const int st = ax.start[size_t(x)];
      if (st < 0) continue;
      clo = std::min(clo, st);
      chi = std::max(chi, st + ax.ntaps[size_t(x)]);
    }
    const int ncols = chi - clo;
    const size_t tlen = size_t(ncols) * size_t(C);
    s.tmp.resize(size_t(oh) * tlen);
    s.acc.resize(std::max(tlen, rowlen));
    const uint8_t* base = in.row(rlo) + size_t(clo) * size_t(C);
    thread_local Axis axs;  // ax with starts relative to column clo
    axs = ax;
    for (auto& st : axs.start)
      if (st >= 0) st -= clo;
    const uint8_t* tmp_end = s.tmp.data() + s.tmp.size();
    for (int y = 0; y < oh; ++y) {
      if (ay.start[size_t(y)] < 0) {
        fill_row(out.row(y), ow, C, fill);
        continue;
      }
      uint8_t* t = s.tmp.data() + size_t(y) * tlen;
      vertical_row(ay, y, base, rlo, in_stride, int(tlen), s, t);
      hpass_row(t, out.row(y), axs, fill, C, tmp_end);
    }
    return;
  }
  s.tmp.resize(size_t(rhi - rlo) * rowlen);
  for (int r = rlo; r < rhi; ++r) hpass_row(in.row(r), s.tmp.data() + size_t(r - rlo) * rowlen, ax, fill, C, in_end);
  s.acc.resize(rowlen);
  for (int y = 0; y < oh; ++y) {
    uint8_t* d = out.row(y);
    if (ay.start[size_t(y)] < 0) {
      fill_row(d, ow, C, fill);
      continue;
    }
    vertical_row(ay, y, s.tmp.data(), rlo, rowlen, int(rowlen), s, d);
  }
}

}  // namespace trd
