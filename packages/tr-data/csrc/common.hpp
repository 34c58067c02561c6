// Shared pieces of the tr.data native core: errors, image views, Philox4x32-10.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

// Auto-vectorised loops get an AVX2 clone chosen at load time (ifunc); the default clone is SSE2.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(TR_DATA_ASAN)
#define TRD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TRD_CLONES
#endif

namespace trd {

// ---------------------------------------------------------------------------------------------
// Errors. The Python layer maps each class to the tr.core.errors class of the same meaning.
// ---------------------------------------------------------------------------------------------
struct DataErr : std::runtime_error {  // -> tr.core.errors.DataError
  using std::runtime_error::runtime_error;
};
struct ShapeErr : std::runtime_error {  // -> tr.core.errors.ShapeError
  using std::runtime_error::runtime_error;
};
struct ConfigErr : std::runtime_error {  // -> tr.core.errors.ConfigError
  using std::runtime_error::runtime_error;
};
struct PhaseErr : std::runtime_error {  // -> tr.core.errors.PhaseError
  using std::runtime_error::runtime_error;
};
struct Cancelled : std::runtime_error {  // an epoch was abandoned; not an error of the data
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------------------------------------
// Images: uint8, HWC, rows contiguous (row stride = w * c).
// ---------------------------------------------------------------------------------------------
struct Shape3 {
  int h = 0, w = 0, c = 0;
  size_t bytes() const { return size_t(h) * size_t(w) * size_t(c); }
  bool operator==(const Shape3& o) const { return h == o.h && w == o.w && c == o.c; }
  bool operator!=(const Shape3& o) const { return !(*this == o); }
  std::string str() const {
    return std::to_string(h) + "x" + std::to_string(w) + "x" + std::to_string(c);
  }
};

struct ImgC {  // read-only view
  const uint8_t* p = nullptr;
  int h = 0, w = 0, c = 0;
  Shape3 shape() const { return {h, w, c}; }
  const uint8_t* row(int y) const { return p + size_t(y) * size_t(w) * size_t(c); }
};

struct Img {  // writable view
  uint8_t* p = nullptr;
  int h = 0, w = 0, c = 0;
  Shape3 shape() const { return {h, w, c}; }
  uint8_t* row(int y) const { return p + size_t(y) * size_t(w) * size_t(c); }
  operator ImgC() const { return ImgC{p, h, w, c}; }
};

// ---------------------------------------------------------------------------------------------
// Limits (the same numbers as tr/data/checks.py; _native.limits() returns them). Sides stay far
// below 2^31, so int coordinates plus a padding, a kernel radius or a crop offset never overflow.
// ---------------------------------------------------------------------------------------------
constexpr long long kMaxSide = 1LL << 20;               // any size, padding or output side
constexpr size_t kMaxImageBytes = size_t(1) << 30;      // an image a transform produces
constexpr long long kMaxKernel = 1023;                  // GaussianBlur kernel side
constexpr double kMaxScale = 1e4;                       // scale factors, area fractions, aspect ratios
constexpr double kMaxMagnitude = 1e6;                   // other float parameters
constexpr int kMaxChannels = 64;
constexpr long long kMaxWorkers = 4096;                 // Preprocessor worker threads

// The shape (h, w, c) computed in 64 bits; DataErr naming `what` when it is empty or over the limits.
inline Shape3 checked_shape(const std::string& what, long long h, long long w, long long c) {
  if (h < 1 || w < 1 || c < 1)
    throw DataErr(what + " produced an empty image (" + std::to_string(h) + "x" + std::to_string(w) + "x" +
                  std::to_string(c) + ")");
  if (h > kMaxSide || w > kMaxSide || c > kMaxChannels ||
      (unsigned long long)(h * w) * (unsigned long long)c > kMaxImageBytes)
    throw DataErr(what + " would produce a " + std::to_string(h) + "x" + std::to_string(w) + "x" + std::to_string(c) +
                  " image, over the limit (sides <= " + std::to_string(kMaxSide) + ", at most " +
                  std::to_string(kMaxImageBytes) + " bytes)");
  return {int(h), int(w), int(c)};
}

// The CPU runs AVX2 (checked once; the hand-written kernels dispatch on it). resample.cpp.
bool cpu_avx2();

inline uint8_t clip_u8(int v) { return uint8_t(v < 0 ? 0 : (v > 255 ? 255 : v)); }

// float -> uint8 the way torch's `.clamp(0, 255).to(torch.uint8)` does: clamp, then truncate.
inline uint8_t trunc_u8(float v) {
  v = v < 0.f ? 0.f : (v > 255.f ? 255.f : v);
  return uint8_t(v);
}

// Round half to even without a libm call (|v| < 2^22 here); torch.round's rule.
inline float rint_f(float v) {
  const float big = 8388608.f;  // 2^23
  return v >= 0.f ? (v + big) - big : -((-v + big) - big);
}

// float -> uint8 with rounding to nearest (ties away from zero; values are >= 0 here).
inline uint8_t round_u8(float v) {
  v = v < 0.f ? 0.f : (v > 255.f ? 255.f : v);
  return uint8_t(v + 0.5f);
}

// ---------------------------------------------------------------------------------------------
// Philox4x32-10, identical to tr.core.philox: key = (seed lo32, seed hi32),
// counter = (offset lo32, offset hi32, 0, 0).
// ---------------------------------------------------------------------------------------------
struct Philox4 {
  uint32_t r[4];
};

inline Philox4 philox4x32_10(uint64_t seed, uint64_t offset) noexcept {
  uint32_t c0 = uint32_t(offset), c1 = uint32_t(offset >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    const uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

inline uint64_t splitmix64(uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  uint64_t z = x;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// tr.core.philox.derive_seed, one part at a time: h = splitmix64(h ^ part).
constexpr uint64_t kDeriveInit = 0x6A09E667F3BCC908ull;
inline uint64_t derive_step(uint64_t h, uint64_t part) noexcept { return splitmix64(h ^ part); }

inline float philox_uniform(const Philox4& p) noexcept {
  return float(p.r[0] >> 8) * (1.0f / 16777216.0f);
}

// tr.core.philox.normal: Box-Muller on (r0, r1), computed in double, returned as float32.
inline float philox_normal(const Philox4& p, double mean, double std) noexcept {
  const double u1 = double((p.r[0] >> 8) | 1u) * (1.0 / 16777216.0);
  const double u2 = double(p.r[1] >> 8) * (1.0 / 16777216.0);
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  return float(mean + std * z);
}

// A sequence of draws: the k-th draw of a stream is Philox(key, base + k).
// Each transform of a chain owns the stream with base = slot << 32 (see pipeline.cpp).
class Stream {
 public:
  Stream(uint64_t key, uint64_t base) : key_(key), base_(base) {}
  Philox4 next() noexcept { return philox4x32_10(key_, base_ + n_++); }
  float uniform() noexcept { return philox_uniform(next()); }
  // lo + (hi - lo) * u, in double, with u the float32 uniform.
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * double(uniform()); }
  uint64_t u64() noexcept {
    const Philox4 p = next();
    return (uint64_t(p.r[0]) << 32) | p.r[1];
  }
  // Closed range [lo, hi]: lo + uint64 % (hi - lo + 1)  (tr.core.philox.randint).
  int64_t randint(int64_t lo, int64_t hi) noexcept {
    return lo + int64_t(u64() % uint64_t(hi - lo + 1));
  }
  uint64_t key() const { return key_; }
  uint64_t used() const { return n_; }

 private:
  uint64_t key_, base_;
  uint64_t n_ = 0;
};

// Python's round() on a double: round half to even.
inline long long round_half_even(double v) {
  double r = std::nearbyint(v);  // default rounding mode: to nearest, ties to even
  return (long long)r;
}

}  // namespace trd
