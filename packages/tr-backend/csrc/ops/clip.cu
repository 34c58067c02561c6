// Gradient clipping by the global norm (torch.nn.utils.clip_grad_norm_), one op over the gradients' span.
// Semantics: tr/backend/cpu/ops/clip.py and tr/backend/rules/clip.py. The sum of squares is deterministic: each
// of a fixed number of blocks sums its grid-stride share in float64 and reduces it in a fixed tree; one block then
// sums the partials in a fixed order (no atomics), as lars_update's norms do.
#include <algorithm>
#include <cmath>

#include "cuda/context.hpp"
#include "ops/args/clip.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

constexpr int kClipBlocks = 256;

__global__ void squares_kernel(const float* g, std::int64_t n, double* partial) {
  __shared__ double sd[32];
  double acc = 0.0;
  TR_GRID_STRIDE(i, n) { acc += static_cast<double>(g[i]) * g[i]; }
  acc = kern::block_reduce(acc, kern::Sum(), sd);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block: the partials in a fixed order, then the norm and the divisor (rules/clip.py's divisor()).
__global__ void divisor_kernel(const double* partial, int blocks, const float* scale, const int* flag, float* divisor,
                               float* norm, double max_norm) {
  __shared__ double sd[32];
  double acc = 0.0;
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) acc += partial[b];
  acc = kern::block_reduce(acc, kern::Sum(), sd);
  if (threadIdx.x != 0) return;
  const double s = static_cast<double>(*scale);
  const double nrm = sqrt(acc) / s;
  const double coef = max_norm / (nrm + 1e-6);
  *norm = static_cast<float>(nrm);
  *divisor = static_cast<float>(*flag != 0 || coef >= 1.0 ? s : s / coef);
}

// One block a unit: the float64 sums of its weights' and gradients' squares in a fixed tree, then the factor
// (rules/clip.py's agc_factor) applied to the unit's gradients in float32.
__global__ void agc_kernel(const float* w, float* g, std::int64_t per, const float* scale, const int* flag, double clip,
                           double eps) {
  if (*flag != 0) return;
  __shared__ double sd[32];
  __shared__ float factor;
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * per;
  double ww = 0.0, gg = 0.0;
  for (std::int64_t i = threadIdx.x; i < per; i += blockDim.x) {
    ww += static_cast<double>(w[base + i]) * w[base + i];
    gg += static_cast<double>(g[base + i]) * g[base + i];
  }
  ww = kern::block_reduce(ww, kern::Sum(), sd);
  gg = kern::block_reduce(gg, kern::Sum(), sd);
  if (threadIdx.x == 0) {
    const double gn = sqrt(gg) / static_cast<double>(*scale);
    const double wn = clip * fmax(sqrt(ww), eps);
    factor = static_cast<float>(gn < wn ? 1.0 : wn / fmax(gn, 1e-6));
  }
  __syncthreads();
  const float f = factor;
  if (f == 1.0f) return;
  for (std::int64_t i = threadIdx.x; i < per; i += blockDim.x) g[base + i] = g[base + i] * f;
}

}  // namespace

std::unique_ptr<Op> clip_agc(Context&, const ClipAgcArgs& args) {
  if (args.units < 1 || args.per < 0) bad(args, "units must be >= 1 and per >= 0");
  if (!(args.clip > 0.0 && std::isfinite(args.clip))) bad(args, "clip must be a finite number > 0");
  if (!(args.eps >= 0.0 && std::isfinite(args.eps))) bad(args, "eps must be a finite number >= 0");
  const auto units = static_cast<unsigned>(args.units);
  const std::int64_t per = args.per;
  const double clip = args.clip, eps = args.eps;
  const float* w = static_cast<const float*>(args.w.ptr);
  float* g = static_cast<float*>(args.g.ptr);
  const float* scale = static_cast<const float*>(args.scale.ptr);
  const int* flag = static_cast<const int*>(args.flag.ptr);
  return fn_op([=](cudaStream_t s) {
    agc_kernel<<<units, kern::kThreads, 0, s>>>(w, g, per, scale, flag, clip, eps);
    check_launch("clip_agc");
  });
}

std::unique_ptr<Op> clip_grad_norm(Context&, const ClipGradNormArgs& args) {
  if (args.n < 0) bad(args, "n must be >= 0, got " + std::to_string(args.n));
  if (!(args.max_norm > 0.0 && std::isfinite(args.max_norm))) {
    bad(args, "max_norm must be a finite number > 0, got " + std::to_string(args.max_norm));
  }
  const std::int64_t n = args.n;
  const double max_norm = args.max_norm;
  const float* g = static_cast<const float*>(args.g);
  const float* scale = static_cast<const float*>(args.scale.ptr);
  const int* flag = static_cast<const int*>(args.flag.ptr);
  float* divisor = static_cast<float*>(args.divisor.ptr);
  float* norm = static_cast<float*>(args.norm.ptr);
  const auto wanted = std::min<std::int64_t>(kClipBlocks, kern::blocks_for(n));  // fixed by n: a fixed order
  const int blocks = static_cast<int>(std::max<std::int64_t>(1, wanted));
  auto scratch = std::make_shared<DeviceBuffer>(kClipBlocks * sizeof(double));
  return fn_op([=](cudaStream_t s) {
    double* partial = scratch->as<double>();
    squares_kernel<<<blocks, kern::kThreads, 0, s>>>(g, n, partial);
    check_launch("clip_grad_norm squares");
    divisor_kernel<<<1, kern::kThreads, 0, s>>>(partial, blocks, scale, flag, divisor, norm, max_norm);
    check_launch("clip_grad_norm divisor");
  });
}

}  // namespace tr::native
