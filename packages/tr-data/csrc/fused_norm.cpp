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
// The fused pass
// ---------------------------------------------------------------------------------------------
namespace {

// o[k] = float(s[k]) * a[k] + b[k]: the per-channel coefficients are laid out along the row, so the
// loop vectorises for any channel count. Same float operations in every clone: same bits.
TRD_CLONES void affine_row(const uint8_t* s, const float* a, const float* b, float* o, int n) {
  for (int k = 0; k < n; ++k) o[k] = float(s[k]) * a[k] + b[k];
}

template <int C>
void reverse_pixels_c(const uint8_t* s, uint8_t* d, int w) {
  for (int x = 0; x < w; ++x) {
    const uint8_t* p = s + size_t(w - 1 - x) * C;
    for (int c = 0; c < C; ++c) d[size_t(x) * C + c] = p[c];
  }
}

void reverse_pixels(const uint8_t* s, uint8_t* d, int w, int C) {
  switch (C) {
    case 1: return reverse_pixels_c<1>(s, d, w);
    case 3: return reverse_pixels_c<3>(s, d, w);
    case 4: return reverse_pixels_c<4>(s, d, w);
    default:
      for (int x = 0; x < w; ++x) std::memcpy(d + size_t(x) * size_t(C), s + size_t(w - 1 - x) * size_t(C), size_t(C));
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

void fused_write(const FusedSpec& f, const FusedParams& p, const ImgC& img, void* dst, std::vector<float>& row) {
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
  // Coefficients laid out along a row: rebuilt only when the row width, channels or constants change.
  thread_local std::vector<float> ca, cb, arow, brow, prow;
  thread_local std::vector<float> key_a, key_b;
  thread_local int key_n = -1, key_c = -1;
  thread_local std::vector<uint8_t> flipped;
  f.coefficients(C, ca, cb);
  const int n = W * C;
  if (n != key_n || C != key_c || ca != key_a || cb != key_b) {
    arow.resize(size_t(n));
    brow.resize(size_t(n));
    for (int k = 0; k < n; ++k) {
      arow[size_t(k)] = ca[size_t(k % C)];
      brow[size_t(k)] = cb[size_t(k % C)];
    }
    key_n = n;
    key_c = C;
    key_a = ca;
    key_b = cb;
  }
  float ev[64];
  for (int c = 0; c < C; ++c) ev[c] = float(f.erase_value.size() == 1 ? f.erase_value[0] : f.erase_value[size_t(c)]);
  const size_t rowlen = size_t(W) * size_t(oc);
  const bool f16 = f.dtype == OutDType::F16;
  const bool padded = oc != C;
  if (p.flip) flipped.resize(size_t(n));
#if TRD_X86
  if (f16 && !padded && g_use_f16c.load(std::memory_order_relaxed) && cpu_avx2()) {
    uint16_t eh[64];
    f32_to_f16(ev, eh, size_t(C));
    for (int y = 0; y < H; ++y) {
      const uint8_t* s = img.row(y);
      if (p.flip) {
        reverse_pixels(s, flipped.data(), W, C);
        s = flipped.data();
      }
      uint16_t* o = static_cast<uint16_t*>(dst) + size_t(y) * rowlen;
      affine_f16_row(s, arow.data(), brow.data(), o, n);
      if (p.erase && y >= p.ei && y < p.ei + p.eh) {
        for (int x = p.ej; x < p.ej + p.ew; ++x) std::memcpy(o + size_t(x) * size_t(C), eh, size_t(C) * 2);
      }
    }
    return;
  }
#endif
  if (f16) row.resize(rowlen);
  if (padded) prow.resize(size_t(n));
  for (int y = 0; y < H; ++y) {
    float* o = f16 ? row.data() : static_cast<float*>(dst) + size_t(y) * rowlen;
    const uint8_t* s = img.row(y);
    if (p.flip) {
      reverse_pixels(s, flipped.data(), W, C);
      s = flipped.data();
    }
    if (!padded) {
      affine_row(s, arow.data(), brow.data(), o, n);
    } else {
      affine_row(s, arow.data(), brow.data(), prow.data(), n);
      for (int x = 0; x < W; ++x) {
        float* q = o + size_t(x) * size_t(oc);
        std::memcpy(q, prow.data() + size_t(x) * size_t(C), size_t(C) * sizeof(float));
        for (int c = C; c < oc; ++c) q[c] = 0.f;
      }
    }
    if (p.erase && y >= p.ei && y < p.ei + p.eh) {
      for (int x = p.ej; x < p.ej + p.ew; ++x)
        for (int c = 0; c < C; ++c) o[size_t(x) * size_t(oc) + size_t(c)] = ev[c];
    }
    if (f16) f32_to_f16(o, static_cast<uint16_t*>(dst) + size_t(y) * rowlen, rowlen);
  }
}

}  // namespace trd
