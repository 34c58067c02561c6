// Mixup / CutMix of the training batch with its reverse, in place, bit-identical to the CPU backend
// (tr/backend/cpu/ops/mixup.py; the draw is tr.core.mixup.draw, whose docstring has the method).
//
// One single-thread kernel advances the seed (seed <- splitmix64(seed), as dropout's), draws the step's
// parameters in float64 and writes them to op-private scratch and lam to its output; a grid-stride kernel then
// mixes every pixel pair (n, N-1-n) (the middle sample of an odd batch with itself, as x.flip(0) pairs it).
// The draw uses only IEEE float64 +, -, *, /, sqrt, written as the explicitly rounded intrinsics so that no
// multiply-add is fused (the CPU's operations one for one), plus exact frexp, ldexp and floor; log and exp are
// tr.core.mixup's polynomials, with the same coefficients (hex literals of the same doubles).
#include <cmath>
#include <memory>

#include "cuda/context.hpp"
#include "ops/args/mixup.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

// --- the draw (tests/test_mixup_draw_host.py compiles this part for the host and holds it to tr.core.mixup) ---
constexpr unsigned long long kFirstBeta = 16;  // tr.core.mixup.FIRST_BETA
constexpr int kMaxDraws = 4096;                // tr.core.mixup.MAX_DRAWS

struct Draw {
  int mode;       // 0: not mixed, 1: Mixup, 2: CutMix
  float a, b;     // Mixup's factors: float32(lam), float32(1 - lam)
  int y0, y1, x0, x1;  // CutMix's box: rows [y0, y1), columns [x0, x1)
};

__device__ const double kLogC[12] = {
    0x1.0000000000000p+0, 0x1.5555555555555p-2, 0x1.999999999999ap-3, 0x1.2492492492492p-3,
    0x1.c71c71c71c71cp-4, 0x1.745d1745d1746p-4, 0x1.3b13b13b13b14p-4, 0x1.1111111111111p-4,
    0x1.e1e1e1e1e1e1ep-5, 0x1.af286bca1af28p-5, 0x1.8618618618618p-5, 0x1.642c8590b2164p-5};
__device__ const double kExpC[18] = {
    0x1.0000000000000p+0, 0x1.0000000000000p+0, 0x1.0000000000000p-1, 0x1.5555555555555p-3,
    0x1.5555555555555p-5, 0x1.1111111111111p-7, 0x1.6c16c16c16c17p-10, 0x1.a01a01a01a01ap-13,
    0x1.a01a01a01a01ap-16, 0x1.71de3a556c734p-19, 0x1.27e4fb7789f5cp-22, 0x1.ae64567f544e4p-26,
    0x1.1eed8eff8d898p-29, 0x1.6124613a86d09p-33, 0x1.93974a8c07c9dp-37, 0x1.ae7f3e733b81fp-41,
    0x1.ae7f3e733b81fp-45, 0x1.952c77030ad4ap-49};
constexpr double kLn2 = 0x1.62e42fefa39efp-1;
constexpr double kInvLn2 = 0x1.71547652b82fep+0;
constexpr double kSqrtHalf = 0x1.6a09e667f3bcdp-1;
constexpr double kThird = 0x1.5555555555555p-2;  // 1.0 / 3.0, rounded

__device__ double det_log(double x) {
  int e = 0;
  double m = frexp(x, &e);
  if (m < kSqrtHalf) {
    m = __dmul_rn(m, 2.0);
    e -= 1;
  }
  const double s = __ddiv_rn(__dsub_rn(m, 1.0), __dadd_rn(m, 1.0));
  const double z = __dmul_rn(s, s);
  double p = kLogC[11];
  for (int i = 10; i >= 0; --i) p = __dadd_rn(__dmul_rn(p, z), kLogC[i]);
  return __dadd_rn(__dmul_rn(__dmul_rn(2.0, s), p), __dmul_rn(static_cast<double>(e), kLn2));
}

__device__ double det_exp(double x) {
  if (x > 709.0) return INFINITY;
  if (x < -708.0) return 0.0;
  const double n = floor(__dadd_rn(__dmul_rn(x, kInvLn2), 0.5));
  const double r = __dsub_rn(x, __dmul_rn(n, kLn2));
  double p = kExpC[17];
  for (int i = 16; i >= 0; --i) p = __dadd_rn(__dmul_rn(p, r), kExpC[i]);
  return ldexp(p, static_cast<int>(n));
}

// (2k + 1) 2^-53, k the top 52 bits of (r0, r1): in (0, 1), exact
__device__ double uniform_at(unsigned long long key, unsigned long long counter) {
  const uint4 r = kern::philox4(key, counter);
  const unsigned long long k = (static_cast<unsigned long long>(r.x) << 20) | (r.y >> 12);
  return static_cast<double>(2 * k + 1) * 0x1p-53;
}

struct Uniforms {
  unsigned long long key;
  int i;
  __device__ bool next(double* u) {
    if (i >= kMaxDraws) return false;
    *u = uniform_at(key, kFirstBeta + static_cast<unsigned long long>(i));
    ++i;
    return true;
  }
};

// log of a Gamma(a) sample: Marsaglia-Tsang, a < 1 through Gamma(a + 1) U^(1/a) (tr.core.mixup._log_gamma)
__device__ double log_gamma(double a, Uniforms& u) {
  const bool boost = a < 1.0;
  const double aa = boost ? __dadd_rn(a, 1.0) : a;
  const double d = __dsub_rn(aa, kThird);
  const double c = __ddiv_rn(1.0, __dsqrt_rn(__dmul_rn(9.0, d)));
  double v = 1.0;
  for (;;) {
    double u1, u2, w;
    const bool ok1 = u.next(&u1);
    const bool ok2 = u.next(&u2);
    if (!ok1 || !ok2) break;
    const double p = __dsub_rn(__dmul_rn(2.0, u1), 1.0), q = __dsub_rn(__dmul_rn(2.0, u2), 1.0);
    const double s = __dadd_rn(__dmul_rn(p, p), __dmul_rn(q, q));
    if (s >= 1.0 || s == 0.0) continue;
    const double xn = __dmul_rn(p, __dsqrt_rn(__ddiv_rn(__dmul_rn(-2.0, det_log(s)), s)));
    const double t = __dadd_rn(1.0, __dmul_rn(c, xn));
    if (t <= 0.0) continue;
    v = __dmul_rn(__dmul_rn(t, t), t);
    if (!u.next(&w)) break;
    const double x2 = __dmul_rn(xn, xn);
    if (w < __dsub_rn(1.0, __dmul_rn(0.0331, __dmul_rn(x2, x2)))) break;
    if (det_log(w) < __dadd_rn(__dmul_rn(0.5, x2), __dmul_rn(d, __dadd_rn(__dsub_rn(1.0, v), det_log(v))))) break;
  }
  double lg = det_log(__dmul_rn(d, v));
  if (boost) {
    double w;
    if (!u.next(&w)) w = 0.5;
    lg = __dadd_rn(lg, __ddiv_rn(det_log(w), a));
  }
  return lg;
}

__global__ void mixup_draw_kernel(unsigned long long* seed, Draw* out, float* lam_out, long long h, long long w,
                                  double mixup_alpha, double cutmix_alpha, double prob, double switch_prob) {
  const unsigned long long key = kern::splitmix64(*seed);
  *seed = key;
  Draw dr{0, 1.0f, 0.0f, 0, 0, 0, 0};
  double lam = 1.0;
  if (uniform_at(key, 0) < prob) {
    const bool cut = (mixup_alpha > 0.0 && cutmix_alpha > 0.0) ? uniform_at(key, 1) < switch_prob
                                                                : cutmix_alpha > 0.0;
    const double alpha = cut ? cutmix_alpha : mixup_alpha;
    Uniforms u{key, 0};
    const double lg1 = log_gamma(alpha, u);
    const double lg2 = log_gamma(alpha, u);
    lam = __ddiv_rn(1.0, __dadd_rn(1.0, det_exp(__dsub_rn(lg2, lg1))));
    if (lam != 1.0 && !cut) {
      dr.mode = 1;
      dr.a = static_cast<float>(lam);
      dr.b = static_cast<float>(__dsub_rn(1.0, lam));
    } else if (lam != 1.0) {  // timm's rand_bbox and correct_lam
      const double ratio = __dsqrt_rn(__dsub_rn(1.0, lam));
      const long long cut_h = static_cast<long long>(__dmul_rn(static_cast<double>(h), ratio));
      const long long cut_w = static_cast<long long>(__dmul_rn(static_cast<double>(w), ratio));
      const long long cy = kern::philox4(key, 2).x % static_cast<unsigned long long>(h);
      const long long cx = kern::philox4(key, 3).x % static_cast<unsigned long long>(w);
      const auto clip = [](long long v, long long hi) { return v < 0 ? 0 : (v > hi ? hi : v); };
      dr.y0 = static_cast<int>(clip(cy - cut_h / 2, h));
      dr.y1 = static_cast<int>(clip(cy + cut_h / 2, h));
      dr.x0 = static_cast<int>(clip(cx - cut_w / 2, w));
      dr.x1 = static_cast<int>(clip(cx + cut_w / 2, w));
      const long long area = static_cast<long long>(dr.y1 - dr.y0) * (dr.x1 - dr.x0);
      lam = __dsub_rn(1.0, __ddiv_rn(static_cast<double>(area), static_cast<double>(h * w)));
      dr.mode = 2;
    }
  }
  *out = dr;
  *lam_out = static_cast<float>(lam);
}

// --- the draw: end ---

template <class T>
__global__ void mixup_apply_kernel(T* x, const Draw* draw, std::int64_t n, std::int64_t w, std::int64_t c,
                                   std::int64_t per) {
  const Draw dr = *draw;
  if (dr.mode == 0) return;
  const std::int64_t pairs = (n + 1) / 2;
  TR_GRID_STRIDE(i, pairs * per) {
    const std::int64_t s = i / per, e = i - s * per, r = n - 1 - s;
    T* xs = x + s * per + e;
    T* xr = x + r * per + e;
    if (dr.mode == 1) {
      const float vs = kern::to_f(*xs), vr = kern::to_f(*xr);
      *xs = kern::from_f<T>(__fadd_rn(__fmul_rn(vs, dr.a), __fmul_rn(vr, dr.b)));
      if (r != s) *xr = kern::from_f<T>(__fadd_rn(__fmul_rn(vr, dr.a), __fmul_rn(vs, dr.b)));
    } else if (r != s) {
      const std::int64_t pix = e / c, yy = pix / w, xx = pix - yy * w;
      if (yy >= dr.y0 && yy < dr.y1 && xx >= dr.x0 && xx < dr.x1) {
        const T t = *xs;
        *xs = *xr;
        *xr = t;
      }
    }
  }
}

}  // namespace

std::unique_ptr<Op> mixup(Context&, const MixupArgs& args) {
  const std::int64_t n = args.n, h = args.h, w = args.w, c = args.c, per = h * w * c;
  const double ma = args.mixup_alpha, ca = args.cutmix_alpha, prob = args.prob, sw = args.switch_prob;
  const DT xdt = args.x.dt;
  void* x = args.x.ptr;
  auto* seed = static_cast<unsigned long long*>(args.seed.ptr);
  auto* lam = static_cast<float*>(args.lam.ptr);
  auto scratch = std::make_shared<DeviceBuffer>(sizeof(Draw));
  kern::dispatch_float(xdt, args, "x", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    Draw* dr = static_cast<Draw*>(scratch->get());
    mixup_draw_kernel<<<1, 1, 0, s>>>(seed, dr, lam, h, w, ma, ca, prob, sw);
    check_launch("mixup draw");
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using T = typename decltype(tx)::type;
      mixup_apply_kernel<T><<<kern::blocks_for(((n + 1) / 2) * per), kern::kThreads, 0, s>>>(
          static_cast<T*>(x), dr, n, w, c, per);
    });
    check_launch("mixup");
  });
}

}  // namespace tr::native
