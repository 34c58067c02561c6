// Softmax cross-entropy with label smoothing, fused with top-1/top-5 accuracy (tr/backend/cpu/ops/softmax_ce.py).
//
// Deterministic, no atomics: one block per sample reduces with a fixed tree and writes the sample's loss
// (float64) and hits to op-private scratch; one single-block kernel then sums the N partials in a fixed
// order and writes result = (mean loss, top-1 fraction, top-5 fraction). Ranks follow "first max wins":
// class c ranks above y iff z_c > z_y, or z_c == z_y and c < y. A row with any NaN/Inf logit is a miss in
// top-1 and top-5 (NaN compares false, so it would otherwise rank first). A label outside [0, K) cannot raise on
// the device: its sample's loss is NaN (so the step's loss shows it) and it counts as a miss; the backward
// leaves its row without the one-hot term.
// With lam (FP32 [1], the mixup op's) sample b's target mixes y[b] (lam) and y[n-1-b] (1 - lam), timm's
// mixup_target: the loss weighs the two labels' log-probabilities so, and the backward subtracts
// fl32((1-ls) lam) at y[b], then fl32((1-ls) fl32(1-lam)) at y[n-1-b] (the CPU's order; lam = 1: the plain bytes).
#include <cmath>
#include <memory>

#include "cuda/context.hpp"
#include "ops/args/softmax_ce.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

constexpr int kRowThreads = 256;

template <class T, class TP>
__global__ void sce_rows_kernel(const T* logits, const int* labels, TP* probs, double* loss_part, int* hits,
                                int* pred, int k, int n, float ls, const float* lam) {
  __shared__ float sf[32];
  __shared__ double sd[32];
  __shared__ int si[32];
  const int b = blockIdx.x;
  const T* z = logits + static_cast<std::int64_t>(b) * k;
  const int y = labels[b];
  const int yr = lam != nullptr ? labels[n - 1 - b] : y;
  const bool valid = y >= 0 && y < k && yr >= 0 && yr < k;

  float m = -INFINITY;
  for (int c = threadIdx.x; c < k; c += blockDim.x) m = kern::nan_max(m, kern::to_f(z[c]));
  m = kern::block_reduce(m, kern::Max(), sf);

  const float zy = valid ? kern::to_f(z[y]) : 0.0f;
  const float zyr = valid ? kern::to_f(z[yr]) : 0.0f;
  float se = 0.0f;
  double ss = 0.0;
  int above = 0;
  int nonfinite = 0;
  int first = k;  // first index holding the max (or the first NaN): numpy's argmax
  for (int c = threadIdx.x; c < k; c += blockDim.x) {
    const float v = kern::to_f(z[c]);
    const float s = v - m;
    se += expf(s);
    ss += static_cast<double>(s);
    if (valid && (v > zy || (v == zy && c < y))) ++above;
    if (!isfinite(v)) ++nonfinite;
    if ((v == m || v != v) && c < first) first = c;
  }
  se = kern::block_reduce(se, kern::Sum(), sf);
  ss = kern::block_reduce(ss, kern::Sum(), sd);
  above = kern::block_reduce(above, kern::Sum(), si);
  nonfinite = kern::block_reduce(nonfinite, kern::Sum(), si);
  if (pred != nullptr) first = kern::block_reduce(first, kern::Min(), si);

  if (probs != nullptr) {
    TP* p = probs + static_cast<std::int64_t>(b) * k;
    for (int c = threadIdx.x; c < k; c += blockDim.x) p[c] = kern::from_f<TP>(expf(kern::to_f(z[c]) - m) / se);
  }
  if (threadIdx.x == 0) {
    const double lse = static_cast<double>(logf(se));
    double logp = static_cast<double>(zy - m) - lse;
    if (lam != nullptr) {
      const double a = static_cast<double>(*lam);
      logp = a * logp + (1.0 - a) * (static_cast<double>(zyr - m) - lse);
    }
    double loss = -(1.0 - static_cast<double>(ls)) * logp;
    if (ls != 0.0f) loss -= (static_cast<double>(ls) / k) * (ss - k * lse);
    loss_part[b] = valid ? loss : NAN;
    const bool ranked = valid && nonfinite == 0;
    hits[b] = ranked && above < 1 ? 1 : 0;
    hits[n + b] = ranked && above < 5 ? 1 : 0;
    if (pred != nullptr) pred[b] = first < k ? first : 0;
  }
}

__global__ void sce_result_kernel(const double* loss_part, const int* hits, float* result, int n) {
  __shared__ double sd[32];
  __shared__ int si[32];
  double loss = 0.0;
  int top1 = 0, top5 = 0;
  for (int b = threadIdx.x; b < n; b += blockDim.x) {
    loss += loss_part[b];
    top1 += hits[b];
    top5 += hits[n + b];
  }
  loss = kern::block_reduce(loss, kern::Sum(), sd);
  top1 = kern::block_reduce(top1, kern::Sum(), si);
  top5 = kern::block_reduce(top5, kern::Sum(), si);
  if (threadIdx.x == 0) {
    result[0] = static_cast<float>(loss / n);
    result[1] = static_cast<float>(static_cast<double>(top1) / n);
    result[2] = static_cast<float>(static_cast<double>(top5) / n);
  }
}

// softmax_ce_fwd (probs, no pred) and softmax_ce_inf (no probs, pred when given): the records' common fields, and
// probs and pred (null when absent).
template <class A>
std::unique_ptr<Op> sce_forward(const A& args, const Dev& probs_t, const Dev& pred_t, const Dev& lam_t) {
  const int n = static_cast<int>(args.n), k = static_cast<int>(args.k);
  const float ls = static_cast<float>(args.label_smoothing);
  const DT zdt = args.logits.dt;
  const DT pdt = probs_t ? probs_t.dt : zdt;
  const void* z = args.logits.ptr;
  const int* labels = static_cast<const int*>(args.labels.ptr);
  void* probs = probs_t.ptr;
  float* result = static_cast<float*>(args.result.ptr);
  int* pred = static_cast<int*>(pred_t.ptr);
  const float* lam = static_cast<const float*>(lam_t.ptr);  // null when absent
  auto scratch = std::make_shared<DeviceBuffer>(static_cast<std::size_t>(n) * (sizeof(double) + 2 * sizeof(int)));
  kern::dispatch_float(zdt, args, "logits", [](auto) {});
  kern::dispatch_float(pdt, args, "probs", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    double* part = static_cast<double*>(scratch->get());
    int* hits = reinterpret_cast<int*>(part + n);
    kern::dispatch_float(zdt, args, "logits", [&](auto tz) {
      using T = typename decltype(tz)::type;
      kern::dispatch_float(pdt, args, "probs", [&](auto tp) {
        using TP = typename decltype(tp)::type;
        sce_rows_kernel<T, TP><<<n, kRowThreads, 0, s>>>(static_cast<const T*>(z), labels, static_cast<TP*>(probs),
                                                         part, hits, pred, k, n, ls, lam);
      });
    });
    check_launch("softmax_ce rows");
    sce_result_kernel<<<1, 1024, 0, s>>>(part, hits, result, n);
    check_launch("softmax_ce result");
  });
}

// factor = scale[0] / count in double, rounded once (the CPU backend's float64 quotient); count is div[0] (a
// gradient-accumulation window's samples) when div is given, else n: div[0] == n gives the same factor.
template <class TP, class TD>
__global__ void sce_bwd_kernel(const TP* probs, const int* labels, const float* scale, const float* div, TD* d,
                               std::int64_t n, int k, float off, float hit, const float* lam) {
  const double count = div != nullptr ? static_cast<double>(div[0]) : static_cast<double>(n);
  const float factor = static_cast<float>(static_cast<double>(scale[0]) / count);
  const float h1 = lam != nullptr ? __fmul_rn(hit, lam[0]) : hit;
  const float h2 = lam != nullptr ? __fmul_rn(hit, __fsub_rn(1.0f, lam[0])) : 0.0f;
  TR_GRID_STRIDE(i, n * k) {
    const std::int64_t b = i / k;
    const int c = static_cast<int>(i - b * k);
    float v = __fsub_rn(kern::to_f(probs[i]), off);
    if (labels[b] == c) v = __fsub_rn(v, h1);
    if (lam != nullptr && labels[n - 1 - b] == c) v = __fsub_rn(v, h2);
    d[i] = kern::from_f<TD>(v * factor);
  }
}

}  // namespace

std::unique_ptr<Op> softmax_ce_fwd(Context&, const SoftmaxCeFwdArgs& args) {
  return sce_forward(args, args.probs, Dev{}, args.lam);
}

std::unique_ptr<Op> softmax_ce_inf(Context&, const SoftmaxCeInfArgs& args) {
  return sce_forward(args, Dev{}, args.pred, Dev{});
}

std::unique_ptr<Op> softmax_ce_bwd(Context&, const SoftmaxCeBwdArgs& args) {
  const std::int64_t n = args.n;
  const int k = static_cast<int>(args.k);
  const double ls = args.label_smoothing;
  const float off = static_cast<float>(ls / k), hit = static_cast<float>(1.0 - ls);
  const DT pdt = args.probs.dt, ddt = args.dlogits.dt;
  const void* probs = args.probs.ptr;
  const int* labels = static_cast<const int*>(args.labels.ptr);
  const float* scale = static_cast<const float*>(args.scale.ptr);
  const float* div = static_cast<const float*>(args.div.ptr);  // null when absent
  void* d = args.dlogits.ptr;
  const float* lam = static_cast<const float*>(args.lam.ptr);  // null when absent
  kern::dispatch_float(pdt, args, "probs", [](auto) {});
  kern::dispatch_float(ddt, args, "dlogits", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(pdt, args, "probs", [&](auto tp) {
      using TP = typename decltype(tp)::type;
      kern::dispatch_float(ddt, args, "dlogits", [&](auto td) {
        using TD = typename decltype(td)::type;
        sce_bwd_kernel<TP, TD><<<kern::blocks_for(n * k), kern::kThreads, 0, s>>>(
            static_cast<const TP*>(probs), labels, scale, div, static_cast<TD*>(d), n, k, off, hit, lam);
      });
    });
    check_launch("softmax_ce_bwd");
  });
}

}  // namespace tr::native
