// Optimizer updates with device-side control (SEED_SYSTEM.md §7; tr/backend/cpu/ops/range/optimizer.py, lars.py).
//
// range_optimizer: one element-wise kernel over a whole FP32 byte range. lr, the NaN/Inf flag, the loss scale
// and Adam's step are read from device memory, so the captured graph never changes; a set flag skips the
// step. Per-step scalars (1 - lr wd, lr / scale, bias corrections) are computed once per block in float64
// and rounded to float32 exactly as the CPU backend rounds them, and with --fmad=false every element sees the
// same float32 operations in the same order, so SGD/momentum/Nesterov match the CPU backend bit for bit.
// lars_update: per-tensor norms by per-block float64 partials and a fixed-order single-block sum (no atomics).
#include <cmath>

#include "cuda/context.hpp"
#include "ops/args/optimizer.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

// The kernel's template parameter: codes.hpp's OptRule (tr.core.ops.OPTIMIZER_RULE_CODES) as an int.
constexpr int SGD = static_cast<int>(OptRule::SGD);
constexpr int MOMENTUM = static_cast<int>(OptRule::MOMENTUM);
constexpr int NESTEROV = static_cast<int>(OptRule::NESTEROV);
constexpr int ADAM = static_cast<int>(OptRule::ADAM);
constexpr int ADAMW = static_cast<int>(OptRule::ADAMW);
static_assert(kNumOptRules == 5, "range_optimizer dispatches on five rules");

struct Hyper {
  double b1, b2, eps, wd, lr_scale;  // lr_scale: the learning rate is *lr_p times it (a parameter group's)
};

struct Scalars {
  float decay;     // 1 - lr wd
  float lr_inv;    // lr / scale (sgd)
  float inv;       // 1 / scale
  float lr;        // lr
  float lr_bc1;    // lr * bc1 (adam)
  float bc2;       // bc2 (adam)
  bool unscaled;   // 1 / scale == 1 exactly: g is used as is
};

template <int R>
__global__ void optimizer_kernel(float* w, const float* g, float* m, float* v, std::int64_t n, const float* lr_p,
                                 const int* flag, const float* scale_p, const int* step_p, Hyper h) {
  if (*flag != 0) return;
  __shared__ Scalars sc;
  if (threadIdx.x == 0) {
    const double lr = static_cast<double>(*lr_p) * h.lr_scale;
    const double inv = 1.0 / static_cast<double>(*scale_p);
    sc.decay = static_cast<float>(1.0 - lr * h.wd);
    sc.lr_inv = static_cast<float>(lr * inv);
    sc.inv = static_cast<float>(inv);
    sc.lr = static_cast<float>(lr);
    sc.unscaled = inv == 1.0;
    if (R == ADAM || R == ADAMW) {
      const double t = static_cast<double>(*step_p) + 1.0;
      const double bc1 = 1.0 / (1.0 - pow(h.b1, t));
      const double bc2 = 1.0 / (1.0 - pow(h.b2, t));
      sc.lr_bc1 = static_cast<float>(lr * bc1);
      sc.bc2 = static_cast<float>(bc2);
    }
  }
  __syncthreads();
  const Scalars s = sc;
  const float beta = static_cast<float>(h.b1);
  const bool decay = h.wd != 0.0;
  TR_GRID_STRIDE(i, n) {
    float wi = w[i];
    const float gi = g[i];
    if (R == SGD) {
      if (decay) wi = wi * s.decay;
      wi = wi - gi * s.lr_inv;
    } else if (R == MOMENTUM || R == NESTEROV) {
      const float gs = s.unscaled ? gi : gi * s.inv;
      const float mi = m[i] * beta + gs;
      m[i] = mi;
      if (decay) wi = wi * s.decay;
      const float step = R == NESTEROV ? (mi * beta + gs) * s.lr : mi * s.lr;
      wi = wi - step;
    } else {
      float gp;
      if (R == ADAMW) {
        if (decay) wi = wi * s.decay;
        gp = s.unscaled ? gi : gi * s.inv;
      } else {
        gp = gi * s.inv;
        if (decay) gp = gp + wi * static_cast<float>(h.wd);
      }
      const float mi = m[i] * beta + gp * static_cast<float>(1.0 - h.b1);
      const float vi = v[i] * static_cast<float>(h.b2) + gp * gp * static_cast<float>(1.0 - h.b2);
      m[i] = mi;
      v[i] = vi;
      const float denom = sqrtf(vi * s.bc2) + static_cast<float>(h.eps);
      wi = wi - (mi * s.lr_bc1) / denom;
    }
    w[i] = wi;
  }
}

}  // namespace

std::unique_ptr<Op> range_optimizer(Context&, const RangeOptimizerArgs& args) {
  const int rule = static_cast<int>(args.rule);  // a code of OptRule: the record checked its range
  const std::int64_t n = args.n;
  if (!(args.lr_scale >= 0.0 && std::isfinite(args.lr_scale))) bad(args, "lr_scale must be a finite number >= 0");
  const Hyper h{args.beta1, args.beta2, args.eps, args.weight_decay, args.lr_scale};
  float* w = static_cast<float*>(args.w);
  const float* g = static_cast<const float*>(args.g);
  // the moments and the step count each rule reads (optional fields: a rule that needs one refuses its absence)
  if (rule != SGD && args.m == nullptr) bad(args, "pointer argument 'm' is missing (every rule but sgd needs it)");
  if (rule >= ADAM && args.v == nullptr) bad(args, "pointer argument 'v' is missing (adam and adamw need it)");
  if (rule >= ADAM && !args.step) bad(args, "pointer argument 'step' is missing (adam and adamw need it)");
  float* m = rule != SGD ? static_cast<float*>(args.m) : nullptr;
  float* v = rule >= ADAM ? static_cast<float*>(args.v) : nullptr;
  const int* step = rule >= ADAM ? static_cast<const int*>(args.step.ptr) : nullptr;
  const float* lr = static_cast<const float*>(args.lr.ptr);
  const int* flag = static_cast<const int*>(args.flag.ptr);
  const float* scale = static_cast<const float*>(args.grad_scale.ptr);
  return fn_op([=](cudaStream_t s) {
    const unsigned blocks = kern::blocks_for(n);
    switch (rule) {
      case SGD:
        optimizer_kernel<SGD><<<blocks, kern::kThreads, 0, s>>>(w, g, m, v, n, lr, flag, scale, step, h);
        break;
      case MOMENTUM:
        optimizer_kernel<MOMENTUM><<<blocks, kern::kThreads, 0, s>>>(w, g, m, v, n, lr, flag, scale, step, h);
        break;
      case NESTEROV:
        optimizer_kernel<NESTEROV><<<blocks, kern::kThreads, 0, s>>>(w, g, m, v, n, lr, flag, scale, step, h);
        break;
      case ADAM:
        optimizer_kernel<ADAM><<<blocks, kern::kThreads, 0, s>>>(w, g, m, v, n, lr, flag, scale, step, h);
        break;
      default:
        optimizer_kernel<ADAMW><<<blocks, kern::kThreads, 0, s>>>(w, g, m, v, n, lr, flag, scale, step, h);
        break;
    }
    check_launch("range_optimizer");
  });
}

// ---- LARS --------------------------------------------------------------------------------------------------
namespace {

constexpr int kLarsBlocks = 256;

__global__ void lars_norms_kernel(const float* w, const float* g, std::int64_t n, double* partial) {
  __shared__ double sd[32];
  double ww = 0.0, gg = 0.0;
  TR_GRID_STRIDE(i, n) {
    ww += static_cast<double>(w[i]) * w[i];
    gg += static_cast<double>(g[i]) * g[i];
  }
  ww = kern::block_reduce(ww, kern::Sum(), sd);
  gg = kern::block_reduce(gg, kern::Sum(), sd);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = ww;
    partial[gridDim.x + blockIdx.x] = gg;
  }
}

struct Lars {
  double momentum, wd, tc, eps, clip;  // clip: the trust ratio's upper bound (LARS().trust_ratio_clip)
};

// One block: sums the partials in a fixed order, then eta and lr * eta into `out` (and ratio[0]).
__global__ void lars_ratio_kernel(const double* partial, int blocks, const float* lr, const int* flag,
                                  const float* scale, float* ratio, float* out, Lars p) {
  __shared__ double sd[32];
  double ww = 0.0, gg = 0.0;
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) {
    ww += partial[b];
    gg += partial[blocks + b];
  }
  ww = kern::block_reduce(ww, kern::Sum(), sd);
  gg = kern::block_reduce(gg, kern::Sum(), sd);
  if (threadIdx.x != 0) return;
  if (*flag != 0) {
    *ratio = 1.0f;
    return;
  }
  const double inv = 1.0 / static_cast<double>(*scale);
  const double wn = sqrt(ww), gn = sqrt(gg) * inv;
  double eta = 1.0;
  if (!(wn < 1e-12 || gn < 1e-12)) eta = fmin(p.tc * wn / (gn + p.wd * wn + p.eps), p.clip);
  *ratio = static_cast<float>(eta);
  out[0] = static_cast<float>(inv);
  out[1] = static_cast<float>(static_cast<double>(*lr) * eta);
}

__global__ void lars_apply_kernel(float* w, const float* g, float* m, std::int64_t n, const int* flag,
                                  const float* k, Lars p, int nesterov) {
  if (*flag != 0) return;
  const float inv = k[0], step = k[1];
  const float beta = static_cast<float>(p.momentum), wd = static_cast<float>(p.wd);
  TR_GRID_STRIDE(i, n) {
    float t = g[i] * inv;
    if (p.wd != 0.0) t = t + w[i] * wd;
    t = t * step;
    const float mi = m[i] * beta + t;
    m[i] = mi;
    w[i] = nesterov ? w[i] - (t + mi * beta) : w[i] - mi;
  }
}

}  // namespace

std::unique_ptr<Op> lars_update(Context&, const LarsUpdateArgs& args) {
  const std::int64_t n = args.n;
  const int nesterov = args.nesterov ? 1 : 0;
  const Lars p{args.momentum, args.weight_decay, args.trust_coefficient, args.eps, args.trust_clip};
  float* w = static_cast<float*>(args.w.ptr);
  const float* g = static_cast<const float*>(args.g.ptr);
  float* m = static_cast<float*>(args.m.ptr);
  const float* lr = static_cast<const float*>(args.lr.ptr);
  const int* flag = static_cast<const int*>(args.flag.ptr);
  const float* scale = static_cast<const float*>(args.grad_scale.ptr);
  float* ratio = static_cast<float*>(args.ratio.ptr);
  const int blocks = static_cast<int>(std::min<std::int64_t>(kLarsBlocks, kern::blocks_for(n)));
  auto scratch = std::make_shared<DeviceBuffer>(2 * kLarsBlocks * sizeof(double) + 2 * sizeof(float));
  return fn_op([=](cudaStream_t s) {
    double* partial = scratch->as<double>();
    float* k = reinterpret_cast<float*>(partial + 2 * kLarsBlocks);
    lars_norms_kernel<<<blocks, kern::kThreads, 0, s>>>(w, g, n, partial);
    check_launch("lars norms");
    lars_ratio_kernel<<<1, kern::kThreads, 0, s>>>(partial, blocks, lr, flag, scale, ratio, k, p);
    check_launch("lars ratio");
    lars_apply_kernel<<<kern::blocks_for(n), kern::kThreads, 0, s>>>(w, g, m, n, flag, k, p, nesterov);
    check_launch("lars update");
  });
}

}  // namespace tr::native
