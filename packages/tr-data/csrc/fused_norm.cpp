#include "fused_norm.hpp"

#include <atomic>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define TRD_X86 1
#endif

namespace trd {

void FusedSpec::build() {
  if (mean.empty() || mean.size() != std.size())
    throw ConfigErr("normalization needs as many std values as mean values, got " + std::to_string(mean.size()) +
                    " and " + std::to_string(std.size()));
  for (double s : std)
    if (!(s > 0.0)) throw ConfigErr("normalization std must be > 0, got " + std::to_string(s));
  if (pad_channels_to < 0 || pad_channels_to > 64)
    throw ConfigErr("pad_channels_to must be in [0, 64], got " + std::to_string(pad_channels_to));
}

void fused_draw(const FusedSpec& f, uint64_t sample_seed, const Shape3& in, FusedParams& p) {
  p = FusedParams{};
  if (f.has_flip) {
    Stream s(sample_seed, 0);
    p.flip = s.uniform() < f.flip_p;
  }
  if (f.has_erase) {
    Stream s(sample_seed, 16);
    if (!(s.uniform() < f.erase_p)) return;
    // torchvision.transforms.RandomErasing.get_params, with Philox draws.
    const double area = double(in.h) * double(in.w);
    const double lr0 = std::log(f.erase_ratio_lo), lr1 = std::log(f.erase_ratio_hi);
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double ea = area * s.uniform(f.erase_scale_lo, f.erase_scale_hi);
      const double ar = std::exp(s.uniform(lr0, lr1));
      const long long h = round_half_even(std::sqrt(ea * ar));
      const long long w = round_half_even(std::sqrt(ea / ar));
      if (!(h < in.h && w < in.w)) continue;
      p.ei = int(s.randint(0, in.h - h));
      p.ej = int(s.randint(0, in.w - w));
      p.eh = int(h);
      p.ew = int(w);
      p.erase = p.eh > 0 && p.ew > 0;
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// FP32 -> FP16
// ---------------------------------------------------------------------------------------------
namespace {

// Round-to-nearest-even conversion on the bits (F. Giesen's float_to_half_fast3_rtne).
inline uint16_t f2h_soft(float fv) {
  uint32_t f;
  std::memcpy(&f, &fv, 4);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  uint16_t o;
  if (f >= (uint32_t(127 + 16) << 23)) {  // Inf or NaN, or too large: Inf
    o = f > (255u << 23) ? 0x7E00 : 0x7C00;
  } else if (f < (113u << 23)) {  // subnormal or zero: align with a magic add (RNE by the FPU)
    const uint32_t magic_u = uint32_t((127 - 15) + (23 - 10) + 1) << 23;
    float magic, x;
    std::memcpy(&magic, &magic_u, 4);
    std::memcpy(&x, &f, 4);
    x += magic;
    uint32_t xu;
    std::memcpy(&xu, &x, 4);
    o = uint16_t(xu - magic_u);
  } else {
    const uint32_t mant_odd = (f >> 13) & 1u;
    f += (uint32_t(15 - 127) << 23) + 0xFFFu;
    f += mant_odd;
    o = uint16_t(f >> 13);
  }
  return uint16_t(o | (sign >> 16));
}

void f2h_soft_n(const float* s, uint16_t* d, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = f2h_soft(s[i]);
}

#if TRD_X86
__attribute__((target("avx,f16c"))) void f2h_f16c_n(const float* s, uint16_t* d, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(s + i);
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
  }
  for (; i < n; ++i) {
    const __m128i h = _mm_cvtps_ph(_mm_set_ss(s[i]), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    d[i] = uint16_t(_mm_extract_epi16(h, 0));
  }
}

bool detect_f16c() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool osxsave = (c >> 27) & 1u, avx = (c >> 28) & 1u, f16c = (c >> 29) & 1u;
  if (!(osxsave && avx && f16c)) return false;
  // The OS must save the YMM state (XCR0 bits 1 and 2).
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 6u) == 6u;
}
#else
bool detect_f16c() { return false; }
#endif

const bool g_has_f16c = detect_f16c();
std::atomic<bool> g_use_f16c{g_has_f16c};

}  // namespace

bool cpu_has_f16c() { return g_has_f16c; }
void set_f16c_enabled(bool on) { g_use_f16c.store(on && g_has_f16c); }
bool f16c_enabled() { return g_use_f16c.load(); }

void f32_to_f16(const float* src, uint16_t* dst, size_t n) {
#if TRD_X86
  if (g_use_f16c.load(std::memory_order_relaxed)) return f2h_f16c_n(src, dst, n);
#endif
  f2h_soft_n(src, dst, n);
}

// ---------------------------------------------------------------------------------------------
// FP32 -> BF16
// ---------------------------------------------------------------------------------------------
// bits + 0x7FFF + (bit 16) carries into the upper half exactly when the lower half is above the halfway point, or at
// it with an odd upper half: round to nearest even, overflow to +-Inf (the carry reaches the exponent). A NaN whose
// payload lies in the low half would truncate to Inf, so NaNs are set apart. Branch-free: the loop vectorises.
namespace {
TRD_CLONES void f2bf_n(const float* s, uint16_t* d, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t f;
    std::memcpy(&f, s + i, 4);
    const uint16_t r = uint16_t((f + 0x7FFFu + ((f >> 16) & 1u)) >> 16);
    d[i] = (f & 0x7FFFFFFFu) > 0x7F800000u ? uint16_t(0x7FC0) : r;
  }
}
}  // namespace

void f32_to_bf16(const float* src, uint16_t* dst, size_t n) { f2bf_n(src, dst, n); }

// ---------------------------------------------------------------------------------------------
// The fused pass
// ---------------------------------------------------------------------------------------------
namespace {

// o[k] = float(s[k]) * a[k] + b[k]: the per-channel coefficients are laid out along the row, so the
// loop vectorises for any channel count. Same float operations in every clone: same bits.
TRD_CLONES void affine_row(const uint8_t* s, const float* a, const float* b, float* o, int n) {
  for (int k = 0; k < n; ++k) o[k] = float(s[k]) * a[k] + b[k];
}

// d = the row s (w pixels of C channels) as OC channels, the extra ones 0, mirrored when `flip`.
template <int C, int OC>
void widen_row_c(const uint8_t* s, uint8_t* d, int w, bool flip) {
  for (int x = 0; x < w; ++x) {
    const uint8_t* p = s + size_t(flip ? w - 1 - x : x) * C;
    uint8_t* q = d + size_t(x) * OC;
    for (int c = 0; c < C; ++c) q[c] = p[c];
    for (int c = C; c < OC; ++c) q[c] = 0;
  }
}

void widen_row(const uint8_t* s, uint8_t* d, int w, int C, int oc, bool flip) {
  if (C == 3 && oc == 4) return widen_row_c<3, 4>(s, d, w, flip);
  if (C == 1 && oc == 4) return widen_row_c<1, 4>(s, d, w, flip);
  if (C == 1 && oc == 1) return widen_row_c<1, 1>(s, d, w, flip);
  if (C == 3 && oc == 3) return widen_row_c<3, 3>(s, d, w, flip);
  if (C == 4 && oc == 4) return widen_row_c<4, 4>(s, d, w, flip);
  for (int x = 0; x < w; ++x) {
    std::memcpy(d + size_t(x) * size_t(oc), s + size_t(flip ? w - 1 - x : x) * size_t(C), size_t(C));
    std::memset(d + size_t(x) * size_t(oc) + C, 0, size_t(oc - C));
  }
}

}  // namespace

void FusedSpec::coefficients(int C, std::vector<float>& a, std::vector<float>& b) const {
  a.resize(size_t(C));
  b.resize(size_t(C));
  for (int c = 0; c < C; ++c) {
    const size_t k = mean.size() == 1 ? 0 : size_t(c);
    a[size_t(c)] = float(1.0 / (255.0 * std[k]));
    b[size_t(c)] = float(-mean[k] / std[k]);
  }
}

#if TRD_X86
// float(x) * a + b -> FP16 in one pass (the same float operations as affine_row, then F16C's RNE).
__attribute__((target("avx2,f16c"))) void affine_f16_row(const uint8_t* s, const float* a, const float* b, uint16_t* o,
                                                          int n) {
  int k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + k))));
    const __m256 y = _mm256_add_ps(_mm256_mul_ps(x, _mm256_loadu_ps(a + k)), _mm256_loadu_ps(b + k));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + k), _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  if (k < n) {
    float t[8];
    affine_row(s + k, a + k, b + k, t, n - k);
    f2h_f16c_n(t, o + k, size_t(n - k));
  }
}
#endif

#if TRD_X86
// widen_row for RGB -> RGB0, four pixels (12 bytes in, 16 out) per shuffle where the 16-byte load stays in
// the row; the rest pixel by pixel. Same bytes as widen_row_c<3, 4>.
__attribute__((target("avx2"))) void widen_row_3to4_simd(const uint8_t* s, uint8_t* d, int w, bool flip) {
  const __m128i fwd = _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
  const __m128i rev = _mm_setr_epi8(9, 10, 11, -1, 6, 7, 8, -1, 3, 4, 5, -1, 0, 1, 2, -1);
  auto one = [&](int x) {
    const uint8_t* p = s + size_t(flip ? w - 1 - x : x) * 3;
    uint8_t* q = d + size_t(x) * 4;
    q[0] = p[0];
    q[1] = p[1];
    q[2] = p[2];
    q[3] = 0;
  };
  int x = 0;
  if (!flip) {
    for (; x + 6 <= w; x += 4)  // pixels x .. x+3 read bytes 3x .. 3x+15 <= 3w-1
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + size_t(x) * 4),
                       _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + size_t(x) * 3)), fwd));
  } else {
    // output pixels x .. x+3 are source pixels w-4-x .. w-1-x, read as bytes 3(w-4-x) .. 3(w-4-x)+15: inside
    // the row for x >= 2, so the first two output pixels go one by one
    for (; x < 2 && x < w; ++x) one(x);
    for (; x + 4 <= w; x += 4)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + size_t(x) * 4),
                       _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + size_t(w - 4 - x) * 3)), rev));
  }
  for (; x < w; ++x) one(x);
}
#endif

void fused_write(const FusedSpec& f, const FusedParams& p, const ImgC& img, void* dst, FusedScratch& sc) {
  const int C = img.c, W = img.w, H = img.h;
  const int oc = f.out_channels(C);
  const size_t nm = f.mean.size();
  if (C < 1 || C > 64) throw ShapeErr("FusedNormalization takes 1 to 64 channels, got " + std::to_string(C));
  if (f.erase_value.size() != 1 && f.erase_value.size() != size_t(C))
    throw ShapeErr("RandomErasing has " + std::to_string(f.erase_value.size()) + " values but the image has " +
                   std::to_string(C) + " channels");
  if (nm != 1 && nm != size_t(C))
    throw ShapeErr("normalization has " + std::to_string(nm) + " channels but the image has " + std::to_string(C) +
                   " (shape " + img.shape().str() + ")");
  // Coefficients laid out along the output row, rebuilt only when the width, channels or constants change.
  // A padded channel has a = b = 0: float(0) * 0 + 0 = +0, the zero it must hold, by the same operations.
  f.coefficients(C, sc.ca, sc.cb);
  const size_t rowlen = size_t(W) * size_t(oc);
  if (W != sc.key_w || C != sc.key_c || oc != sc.key_oc || sc.ca != sc.key_a || sc.cb != sc.key_b) {
    sc.arow.assign(rowlen, 0.f);
    sc.brow.assign(rowlen, 0.f);
    for (size_t x = 0; x < size_t(W); ++x)
      for (int c = 0; c < C; ++c) {
        sc.arow[x * size_t(oc) + size_t(c)] = sc.ca[size_t(c)];
        sc.brow[x * size_t(oc) + size_t(c)] = sc.cb[size_t(c)];
      }
    sc.key_w = W;
    sc.key_c = C;
    sc.key_oc = oc;
    sc.key_a = sc.ca;
    sc.key_b = sc.cb;
  }
  float ev[64];
  for (int c = 0; c < C; ++c) ev[c] = float(f.erase_value.size() == 1 ? f.erase_value[0] : f.erase_value[size_t(c)]);
  const bool f16 = f.dtype == OutDType::F16;
  const bool narrow = f.dtype != OutDType::F32;  // the FP32 row goes through sc.row, then is rounded into dst
  const bool widen = oc != C || p.flip;  // the row goes through sc.px first
  if (widen) sc.px.resize(rowlen);
  if (narrow) sc.row.resize(rowlen);
  const float* A = sc.arow.data();
  const float* B = sc.brow.data();
  uint8_t* px = sc.px.data();
  float* frow = sc.row.data();
  const int n = int(rowlen);
#if TRD_X86
  if (f16 && g_use_f16c.load(std::memory_order_relaxed) && cpu_avx2()) {
    uint16_t eh[64];
    f32_to_f16(ev, eh, size_t(C));
    for (int y = 0; y < H; ++y) {
      const uint8_t* s = img.row(y);
      if (widen) {
        if (C == 3 && oc == 4)
          widen_row_3to4_simd(s, px, W, p.flip);
        else
          widen_row(s, px, W, C, oc, p.flip);
        s = px;
      }
      uint16_t* o = static_cast<uint16_t*>(dst) + size_t(y) * rowlen;
      affine_f16_row(s, A, B, o, n);
      if (p.erase && y >= p.ei && y < p.ei + p.eh)
        for (int x = p.ej; x < p.ej + p.ew; ++x) std::memcpy(o + size_t(x) * size_t(oc), eh, size_t(C) * 2);
    }
    return;
  }
#endif
  for (int y = 0; y < H; ++y) {
    float* o = narrow ? frow : static_cast<float*>(dst) + size_t(y) * rowlen;
    const uint8_t* s = img.row(y);
    if (widen) {
      widen_row(s, px, W, C, oc, p.flip);
      s = px;
    }
    affine_row(s, A, B, o, n);
    if (p.erase && y >= p.ei && y < p.ei + p.eh) {
      for (int x = p.ej; x < p.ej + p.ew; ++x)
        for (int c = 0; c < C; ++c) o[size_t(x) * size_t(oc) + size_t(c)] = ev[c];
    }
    // BF16 from the same FP32 row: the erase values and the padded +0 round like every other value
    if (f16)
      f32_to_f16(o, static_cast<uint16_t*>(dst) + size_t(y) * rowlen, rowlen);
    else if (narrow)
      f32_to_bf16(o, static_cast<uint16_t*>(dst) + size_t(y) * rowlen, rowlen);
  }
}

}  // namespace trd
