// Binary cross-entropy with logits and the mean squared error against the (smoothed) one-hot label, fused with
// top-1/top-5 accuracy (tr/backend/cpu/ops/onehot_loss.py; tr.algo.onehot_loss is the math).
//
// t = (1 - ls) [c == y] + ls / K; loss 0 (bce_logits): l = max(z, 0) - z t + log1p(exp(-|z|)), 1 (mse):
// l = (z - t)^2; result = (mean of l over N*K, top-1, top-5). Deterministic, no atomics, as softmax_ce.cu: one
// block per sample sums its row in a fixed tree into op-private scratch (float64), one block then sums the N
// partials in order. Ranks as softmax cross-entropy's ("first max wins"; a row with a NaN/Inf logit is a miss);
// a label outside [0, K) makes its sample's loss NaN. The backward is elementwise (dlogits may be the logits).
#include <cmath>
#include <memory>

#include "cuda/context.hpp"
#include "ops/args/onehot_loss.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

constexpr int kRowThreads = 256;

__device__ inline double element_loss(int loss, float z, float t) {
  const double zd = z, td = t;
  if (loss == 1) return (zd - td) * (zd - td);
  return (zd > 0.0 ? zd : 0.0) - zd * td + log1p(exp(-fabs(zd)));
}

template <class T>
__global__ void onehot_rows_kernel(const T* logits, const int* labels, double* loss_part, int* hits, int* pred,
                                   int k, int n, int loss, float off, float hit) {
  __shared__ double sd[32];
  __shared__ int si[32];
  const int b = blockIdx.x;
  const T* z = logits + static_cast<std::int64_t>(b) * k;
  const int y = labels[b];
  const bool valid = y >= 0 && y < k;
  const float zy = valid ? kern::to_f(z[y]) : 0.0f;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < k; c += blockDim.x) m = kern::nan_max(m, kern::to_f(z[c]));
  __shared__ float sf[32];
  m = kern::block_reduce(m, kern::Max(), sf);
  double sum = 0.0;
  int above = 0, nonfinite = 0, first = k;
  for (int c = threadIdx.x; c < k; c += blockDim.x) {
    const float v = kern::to_f(z[c]);
    sum += element_loss(loss, v, c == y ? off + hit : off);
    if (valid && (v > zy || (v == zy && c < y))) ++above;
    if (!isfinite(v)) ++nonfinite;
    if ((v == m || v != v) && c < first) first = c;
  }
  sum = kern::block_reduce(sum, kern::Sum(), sd);
  above = kern::block_reduce(above, kern::Sum(), si);
  nonfinite = kern::block_reduce(nonfinite, kern::Sum(), si);
  if (pred != nullptr) first = kern::block_reduce(first, kern::Min(), si);
  if (threadIdx.x == 0) {
    loss_part[b] = valid ? sum : NAN;
    const bool ranked = valid && nonfinite == 0;
    hits[b] = ranked && above < 1 ? 1 : 0;
    hits[n + b] = ranked && above < 5 ? 1 : 0;
    if (pred != nullptr) pred[b] = first < k ? first : 0;
  }
}

__global__ void onehot_result_kernel(const double* loss_part, const int* hits, float* result, int n, int k) {
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
    result[0] = static_cast<float>(loss / (static_cast<double>(n) * k));
    result[1] = static_cast<float>(static_cast<double>(top1) / n);
    result[2] = static_cast<float>(static_cast<double>(top5) / n);
  }
}

// The kernels' int loss: codes.hpp's OneHotLoss (the record checked its range).
static_assert(static_cast<int>(OneHotLoss::BCE_LOGITS) == 0 && static_cast<int>(OneHotLoss::MSE) == 1 &&
                  kNumOneHotLosses == 2,
              "the kernels read loss 0 as bce_logits and 1 as mse");
template <class A>
int loss_of(const A& args) {
  return static_cast<int>(args.loss);
}

// onehot_loss_fwd (no pred) and onehot_loss_inf (pred optional): the records' common fields and pred.
template <class A>
std::unique_ptr<Op> onehot_forward(const A& args, const Dev& pred_t) {
  const int n = static_cast<int>(args.n), k = static_cast<int>(args.k);
  const int loss = loss_of(args);
  const double ls = args.label_smoothing;
  const float off = static_cast<float>(ls / k), hit = static_cast<float>(1.0 - ls);
  const DT zdt = args.logits.dt;
  const void* z = args.logits.ptr;
  const int* labels = static_cast<const int*>(args.labels.ptr);
  float* result = static_cast<float*>(args.result.ptr);
  int* pred = static_cast<int*>(pred_t.ptr);
  auto scratch = std::make_shared<DeviceBuffer>(static_cast<std::size_t>(n) * (sizeof(double) + 2 * sizeof(int)));
  kern::dispatch_float(zdt, args, "logits", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    double* part = static_cast<double*>(scratch->get());
    int* hits = reinterpret_cast<int*>(part + n);
    kern::dispatch_float(zdt, args, "logits", [&](auto tz) {
      using T = typename decltype(tz)::type;
      onehot_rows_kernel<T><<<n, kRowThreads, 0, s>>>(static_cast<const T*>(z), labels, part, hits, pred, k, n, loss,
                                                      off, hit);
    });
    check_launch("onehot_loss rows");
    onehot_result_kernel<<<1, 1024, 0, s>>>(part, hits, result, n, k);
    check_launch("onehot_loss result");
  });
}

// dlogits = (sigmoid(z) - t) (bce) or 2 (z - t) (mse), times scale[0] / (N*K); reads z[i] before writing d[i].
// With div (a gradient-accumulation window's samples; null when absent) div[0] takes N's place, in double.
template <class TZ, class TD>
__global__ void onehot_bwd_kernel(const TZ* z, const int* labels, const float* scale, const float* div, TD* d,
                                  std::int64_t n, int k, int loss, float off, float hit) {
  const double count = (div != nullptr ? static_cast<double>(div[0]) : static_cast<double>(n)) * k;
  const float factor = static_cast<float>((loss == 1 ? 2.0 : 1.0) * static_cast<double>(scale[0]) / count);
  TR_GRID_STRIDE(i, n * k) {
    const std::int64_t b = i / k;
    const int c = static_cast<int>(i - b * k);
    const float v = kern::to_f(z[i]);
    const float p = loss == 1 ? v : 0.5f * (1.0f + tanhf(0.5f * v));
    float g = p - off;
    if (labels[b] == c) g = g - hit;
    d[i] = kern::from_f<TD>(g * factor);
  }
}

}  // namespace

std::unique_ptr<Op> onehot_loss_fwd(Context&, const OnehotLossFwdArgs& args) { return onehot_forward(args, Dev{}); }

std::unique_ptr<Op> onehot_loss_inf(Context&, const OnehotLossInfArgs& args) {
  return onehot_forward(args, args.pred);
}

std::unique_ptr<Op> onehot_loss_bwd(Context&, const OnehotLossBwdArgs& args) {
  const std::int64_t n = args.n;
  const int k = static_cast<int>(args.k);
  const int loss = loss_of(args);
  const double ls = args.label_smoothing;
  const float off = static_cast<float>(ls / k), hit = static_cast<float>(1.0 - ls);
  const DT zdt = args.logits.dt, ddt = args.dlogits.dt;
  const void* z = args.logits.ptr;
  const int* labels = static_cast<const int*>(args.labels.ptr);
  const float* scale = static_cast<const float*>(args.scale.ptr);
  const float* div = static_cast<const float*>(args.div.ptr);  // null when absent
  void* d = args.dlogits.ptr;
  kern::dispatch_float(zdt, args, "logits", [](auto) {});
  kern::dispatch_float(ddt, args, "dlogits", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(zdt, args, "logits", [&](auto tz) {
      using TZ = typename decltype(tz)::type;
      kern::dispatch_float(ddt, args, "dlogits", [&](auto td) {
        using TD = typename decltype(td)::type;
        onehot_bwd_kernel<TZ, TD><<<kern::blocks_for(n * k), kern::kThreads, 0, s>>>(
            static_cast<const TZ*>(z), labels, scale, div, static_cast<TD*>(d), n, k, loss, off, hit);
      });
    });
    check_launch("onehot_loss_bwd");
  });
}

}  // namespace tr::native
