// Batch normalisation over N*H*W per channel (tr/backend/cpu/ops/bn.py): training forward (two-pass float64
// statistics, running statistics with the unbiased variance), backward, inference and the folded inference
// parameters. Reductions are chunked and summed in a fixed order: deterministic, no atomics.
#include <algorithm>
#include <cmath>
#include <memory>

#include "cuda/context.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

// The statistics are two-stage reductions, so every SM takes part and reads are coalesced: a block holds 32
// neighbouring channels (threadIdx.x: one warp reads 32 consecutive values of a row) and 8 row lanes, and sums
// one chunk of rows in float64; a second kernel adds the chunks of each channel in order. The chunking depends
// only on (m, c), so the sums are the same on every run and every device: deterministic, no atomics.
constexpr int kTile = 32;   // channels per block
constexpr int kLanes = 8;   // rows in flight per block

struct Chunking {
  std::int64_t rows;  // rows per chunk
  int chunks;
};

Chunking chunking(std::int64_t m, int c) {
  const std::int64_t tiles = (c + kTile - 1) / kTile;
  const std::int64_t want = std::max<std::int64_t>(1, 1024 / tiles);  // about a thousand blocks in all
  const std::int64_t rows = std::max<std::int64_t>(64, (m + want - 1) / want);
  return {rows, static_cast<int>((m + rows - 1) / rows)};
}

dim3 stat_grid(const Chunking& k, int c) { return dim3(k.chunks, (c + kTile - 1) / kTile); }

// Sums the block's lanes in lane order into out[chunk * c + ch].
__device__ void lanes_to(double v, double (*sh)[kTile], double* out, int c) {
  const int ch = blockIdx.y * kTile + threadIdx.x;
  sh[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0 && ch < c) {
    double t = 0.0;
    for (int l = 0; l < kLanes; ++l) t += sh[l][threadIdx.x];
    out[static_cast<std::int64_t>(blockIdx.x) * c + ch] = t;
  }
}

// Pass 1: sum of x; pass 2 (mean given): sum of (x - mean)^2, the square taken in float as the CPU does.
template <class TX>
__global__ void bn_partial_kernel(const TX* x, const float* mean, double* out, std::int64_t m, int c,
                                  std::int64_t rows) {
  __shared__ double sh[kLanes][kTile];
  const int ch = blockIdx.y * kTile + threadIdx.x;
  const std::int64_t lo = blockIdx.x * rows, hi = min(m, lo + rows);
  double acc = 0.0;
  if (ch < c) {
    if (mean == nullptr) {
      for (std::int64_t r = lo + threadIdx.y; r < hi; r += kLanes) acc += static_cast<double>(kern::to_f(x[r * c + ch]));
    } else {
      const float mu = mean[ch];
      for (std::int64_t r = lo + threadIdx.y; r < hi; r += kLanes) {
        const float d = kern::to_f(x[r * c + ch]) - mu;
        acc += static_cast<double>(d * d);
      }
    }
  }
  lanes_to(acc, sh, out, c);
}

__global__ void bn_mean_kernel(const double* part, int chunks, std::int64_t m, int c, double* s1, float* mean) {
  TR_GRID_STRIDE(ch, c) {
    double t = 0.0;
    for (int k = 0; k < chunks; ++k) t += part[static_cast<std::int64_t>(k) * c + ch];
    t *= 1.0 / static_cast<double>(m);
    s1[ch] = t;
    mean[ch] = static_cast<float>(t);
  }
}

// Variance, running statistics, saved statistics and the coefficients of y = (x - mean) * a + b.
template <class TP>
__global__ void bn_var_kernel(const double* part, int chunks, std::int64_t m, int c, const double* s1,
                              const TP* gamma, const TP* beta, const TP* mean_in, const TP* var_in, TP* mean_out,
                              TP* var_out, TP* saved_mean, TP* saved_inv, const float* mean, float* coef_a,
                              float* coef_b, double mom, double eps) {
  TR_GRID_STRIDE(ch, c) {
    double s2 = 0.0;
    for (int k = 0; k < chunks; ++k) s2 += part[static_cast<std::int64_t>(k) * c + ch];
    s2 *= 1.0 / static_cast<double>(m);
    const double unbias = m > 1 ? static_cast<double>(m) / static_cast<double>(m - 1) : 1.0;
    const float inv = static_cast<float>(1.0 / sqrt(s2 + eps));
    // numpy (NEP 50): (1 - m) * var_in is float32 arithmetic, the float64 batch term is added in float64
    const float keep = static_cast<float>(1.0 - mom);
    const float old_var = keep * kern::to_f(var_in[ch]), old_mean = keep * kern::to_f(mean_in[ch]);
    var_out[ch] = kern::from_f<TP>(static_cast<float>(static_cast<double>(old_var) + (mom * unbias) * s2));
    mean_out[ch] = kern::from_f<TP>(static_cast<float>(static_cast<double>(old_mean) + mom * s1[ch]));
    saved_mean[ch] = kern::from_f<TP>(mean[ch]);
    saved_inv[ch] = kern::from_f<TP>(inv);
    coef_a[ch] = kern::to_f(gamma[ch]) * inv;
    coef_b[ch] = kern::to_f(beta[ch]);
  }
}

template <class TX, class TY>
__global__ void bn_apply_kernel(const TX* x, TY* y, const float* mean, const float* a, const float* b,
                                std::int64_t n, int c) {
  TR_GRID_STRIDE(i, n) {
    const int ch = static_cast<int>(i % c);
    y[i] = kern::from_f<TY>((kern::to_f(x[i]) - mean[ch]) * a[ch] + b[ch]);
  }
}

// Backward pass 1: per chunk, the sums of dy and of dy * xhat (two partial arrays).
template <class TX, class TD, class TP>
__global__ void bn_bwd_partial_kernel(const TX* x, const TD* dy, const TP* saved_mean, const TP* saved_inv,
                                      double* out1, double* out2, std::int64_t m, int c, std::int64_t rows) {
  __shared__ double sh[kLanes][kTile];
  const int ch = blockIdx.y * kTile + threadIdx.x;
  const std::int64_t lo = blockIdx.x * rows, hi = min(m, lo + rows);
  double s1 = 0.0, s2 = 0.0;
  if (ch < c) {
    const float mean = kern::to_f(saved_mean[ch]), inv = kern::to_f(saved_inv[ch]);
    for (std::int64_t r = lo + threadIdx.y; r < hi; r += kLanes) {
      const std::int64_t i = r * c + ch;
      const float g = kern::to_f(dy[i]);
      const float xhat = (kern::to_f(x[i]) - mean) * inv;
      s1 += static_cast<double>(g);
      s2 += static_cast<double>(g * xhat);
    }
  }
  lanes_to(s1, sh, out1, c);
  __syncthreads();
  lanes_to(s2, sh, out2, c);
}

// dbeta, dgamma, and the coefficients of dx = ((dy - xhat * t2) - t1) * k.
template <class TP>
__global__ void bn_bwd_finish_kernel(const double* part1, const double* part2, int chunks, std::int64_t m, int c,
                                     const TP* gamma, const TP* saved_inv, TP* dgamma, TP* dbeta, float* t1,
                                     float* t2, float* kk) {
  TR_GRID_STRIDE(ch, c) {
    double s1 = 0.0, s2 = 0.0;
    for (int k = 0; k < chunks; ++k) {
      s1 += part1[static_cast<std::int64_t>(k) * c + ch];
      s2 += part2[static_cast<std::int64_t>(k) * c + ch];
    }
    dbeta[ch] = kern::from_f<TP>(static_cast<float>(s1));
    dgamma[ch] = kern::from_f<TP>(static_cast<float>(s2));
    const double inv_m = 1.0 / static_cast<double>(m);
    t1[ch] = static_cast<float>(s1 * inv_m);
    t2[ch] = static_cast<float>(s2 * inv_m);
    kk[ch] = kern::to_f(gamma[ch]) * kern::to_f(saved_inv[ch]);
  }
}

template <class TX, class TD, class TP>
__global__ void bn_bwd_apply_kernel(const TX* x, const TD* dy, TX* dx, const TP* saved_mean, const TP* saved_inv,
                                    const float* t1, const float* t2, const float* kk, std::int64_t n, int c) {
  TR_GRID_STRIDE(i, n) {
    const int ch = static_cast<int>(i % c);
    const float xhat = (kern::to_f(x[i]) - kern::to_f(saved_mean[ch])) * kern::to_f(saved_inv[ch]);
    dx[i] = kern::from_f<TX>(((kern::to_f(dy[i]) - xhat * t2[ch]) - t1[ch]) * kk[ch]);  // dx may be x
  }
}

template <class TX, class TY, class TP>
__global__ void bn_inf_kernel(const TX* x, const TP* scale, const TP* bias, TY* y, std::int64_t n, int c) {
  TR_GRID_STRIDE(i, n) {
    const int ch = static_cast<int>(i % c);
    y[i] = kern::from_f<TY>(kern::to_f(x[i]) * kern::to_f(scale[ch]) + kern::to_f(bias[ch]));
  }
}

template <class TP>
__global__ void bn_update_eq_kernel(const TP* gamma, const TP* beta, const TP* mean, const TP* var, TP* scale,
                                    TP* bias, int c, float eps) {
  TR_GRID_STRIDE(i, c) {
    const float sc = kern::to_f(gamma[i]) / sqrtf(kern::to_f(var[i]) + eps);
    scale[i] = kern::from_f<TP>(sc);
    bias[i] = kern::from_f<TP>(kern::to_f(beta[i]) - kern::to_f(mean[i]) * sc);
  }
}

std::unique_ptr<Op> bn_fwd(Context&, const OpArgs& args) {
  const std::int64_t m = args.i("m");
  const int c = static_cast<int>(args.i("c"));
  const double mom = args.f("momentum"), eps = args.f("eps");
  const DT xdt = args.dt("x"), ydt = args.dt("y"), pdt = args.dt("gamma");
  std::uintptr_t p[10];
  const char* names[10] = {"x", "y", "gamma", "beta", "mean_in", "var_in", "mean_out", "var_out", "saved_mean",
                           "saved_inv_std"};
  for (int i = 0; i < 10; ++i) p[i] = reinterpret_cast<std::uintptr_t>(args.ptr(names[i]));
  for (int i = 3; i < 10; ++i) {
    if (args.dt(names[i]) != pdt) args.bad(std::string(names[i]) + " must have gamma's dtype");
  }
  for (DT dt : {xdt, ydt, pdt}) kern::dispatch_float(dt, args, "x, y, gamma", [](auto) {});
  const Chunking ck = chunking(m, c);
  // scratch: chunk partials (float64), s1 (float64), mean, a, b (float)
  auto scratch = std::make_shared<DeviceBuffer>((static_cast<std::size_t>(ck.chunks) + 1) * c * sizeof(double) +
                                                3 * static_cast<std::size_t>(c) * sizeof(float));
  double* part = scratch->as<double>();
  double* s1 = part + static_cast<std::int64_t>(ck.chunks) * c;
  float* mean = reinterpret_cast<float*>(s1 + c);
  float* ca = mean + c;
  float* cb = ca + c;
  const dim3 grid = stat_grid(ck, c), block(kTile, kLanes);
  return fn_op([=](cudaStream_t s) {
    (void)scratch;  // owned by the op
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      const TX* xp = reinterpret_cast<const TX*>(p[0]);
      bn_partial_kernel<TX><<<grid, block, 0, s>>>(xp, nullptr, part, m, c, ck.rows);
      bn_mean_kernel<<<kern::blocks_for(c), kern::kThreads, 0, s>>>(part, ck.chunks, m, c, s1, mean);
      bn_partial_kernel<TX><<<grid, block, 0, s>>>(xp, mean, part, m, c, ck.rows);
      kern::dispatch_float(pdt, args, "gamma", [&](auto tp) {
        using TP = typename decltype(tp)::type;
        auto P = [&](int i) { return reinterpret_cast<TP*>(p[i]); };
        bn_var_kernel<TP><<<kern::blocks_for(c), kern::kThreads, 0, s>>>(part, ck.chunks, m, c, s1, P(2), P(3), P(4),
                                                                          P(5), P(6), P(7), P(8), P(9), mean, ca, cb,
                                                                          mom, eps);
      });
      kern::dispatch_float(ydt, args, "y", [&](auto ty) {
        using TY = typename decltype(ty)::type;
        bn_apply_kernel<TX, TY><<<kern::blocks_for(m * c), kern::kThreads, 0, s>>>(
            xp, reinterpret_cast<TY*>(p[1]), mean, ca, cb, m * c, c);
      });
    });
    check_launch("bn_fwd");
  }, "bn_fwd " + std::to_string(ck.chunks) + " chunks");
}

std::unique_ptr<Op> bn_bwd(Context&, const OpArgs& args) {
  const std::int64_t m = args.i("m");
  const int c = static_cast<int>(args.i("c"));
  const DT xdt = args.dt("x"), ddt = args.dt("dy"), pdt = args.dt("gamma");
  if (args.dt("dx") != xdt) args.bad("dx must have x's dtype");
  const void* x = args.ptr("x");
  const void* dy = args.ptr("dy");
  void* dx = args.ptr("dx");
  const void* gamma = args.ptr("gamma");
  const void* mean = args.ptr("saved_mean");
  const void* inv = args.ptr("saved_inv_std");
  void* dgamma = args.ptr("dgamma");
  void* dbeta = args.ptr("dbeta");
  for (DT dt : {xdt, ddt, pdt}) kern::dispatch_float(dt, args, "x, dy, gamma", [](auto) {});
  const Chunking ck = chunking(m, c);
  // scratch: two chunk-partial arrays (float64), t1, t2, k (float)
  auto scratch = std::make_shared<DeviceBuffer>(2 * static_cast<std::size_t>(ck.chunks) * c * sizeof(double) +
                                                3 * static_cast<std::size_t>(c) * sizeof(float));
  double* part1 = scratch->as<double>();
  double* part2 = part1 + static_cast<std::int64_t>(ck.chunks) * c;
  float* t1 = reinterpret_cast<float*>(part2 + static_cast<std::int64_t>(ck.chunks) * c);
  float* t2 = t1 + c;
  float* kk = t2 + c;
  const dim3 grid = stat_grid(ck, c), block(kTile, kLanes);
  return fn_op([=](cudaStream_t s) {
    (void)scratch;  // owned by the op
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      kern::dispatch_float(ddt, args, "dy", [&](auto td) {
        using TD = typename decltype(td)::type;
        kern::dispatch_float(pdt, args, "gamma", [&](auto tp) {
          using TP = typename decltype(tp)::type;
          const TX* xp = static_cast<const TX*>(x);
          const TD* dyp = static_cast<const TD*>(dy);
          const TP* mp = static_cast<const TP*>(mean);
          const TP* ip = static_cast<const TP*>(inv);
          bn_bwd_partial_kernel<TX, TD, TP><<<grid, block, 0, s>>>(xp, dyp, mp, ip, part1, part2, m, c, ck.rows);
          bn_bwd_finish_kernel<TP><<<kern::blocks_for(c), kern::kThreads, 0, s>>>(
              part1, part2, ck.chunks, m, c, static_cast<const TP*>(gamma), ip, static_cast<TP*>(dgamma),
              static_cast<TP*>(dbeta), t1, t2, kk);
          bn_bwd_apply_kernel<TX, TD, TP><<<kern::blocks_for(m * c), kern::kThreads, 0, s>>>(
              xp, dyp, static_cast<TX*>(dx), mp, ip, t1, t2, kk, m * c, c);
        });
      });
    });
    check_launch("bn_bwd");
  }, "bn_bwd " + std::to_string(ck.chunks) + " chunks");
}

std::unique_ptr<Op> bn_inf(Context&, const OpArgs& args) {
  const std::int64_t n = args.i("n");
  const int c = static_cast<int>(args.i("c"));
  const DT xdt = args.dt("x"), ydt = args.dt("y"), pdt = args.dt("scale");
  if (args.dt("bias") != pdt) args.bad("bias must have scale's dtype");
  const void* x = args.ptr("x");
  const void* scale = args.ptr("scale");
  const void* bias = args.ptr("bias");
  void* y = args.ptr("y");
  for (DT dt : {xdt, ydt, pdt}) kern::dispatch_float(dt, args, "x, y, scale", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      kern::dispatch_float(ydt, args, "y", [&](auto ty) {
        using TY = typename decltype(ty)::type;
        kern::dispatch_float(pdt, args, "scale", [&](auto tp) {
          using TP = typename decltype(tp)::type;
          bn_inf_kernel<TX, TY, TP><<<kern::blocks_for(n), kern::kThreads, 0, s>>>(
              static_cast<const TX*>(x), static_cast<const TP*>(scale), static_cast<const TP*>(bias),
              static_cast<TY*>(y), n, c);
        });
      });
    });
    check_launch("bn_inf");
  });
}

std::unique_ptr<Op> bn_update_eq(Context&, const OpArgs& args) {
  const int c = static_cast<int>(args.i("c"));
  const float eps = static_cast<float>(args.f("eps"));
  const DT pdt = args.dt("gamma");
  for (const char* nm : {"beta", "mean", "var", "scale", "bias"}) {
    if (args.dt(nm) != pdt) args.bad(std::string(nm) + " must have gamma's dtype");
  }
  const void* gamma = args.ptr("gamma");
  const void* beta = args.ptr("beta");
  const void* mean = args.ptr("mean");
  const void* var = args.ptr("var");
  void* scale = args.ptr("scale");
  void* bias = args.ptr("bias");
  kern::dispatch_float(pdt, args, "gamma", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(pdt, args, "gamma", [&](auto tp) {
      using TP = typename decltype(tp)::type;
      bn_update_eq_kernel<TP><<<kern::blocks_for(c), kern::kThreads, 0, s>>>(
          static_cast<const TP*>(gamma), static_cast<const TP*>(beta), static_cast<const TP*>(mean),
          static_cast<const TP*>(var), static_cast<TP*>(scale), static_cast<TP*>(bias), c, eps);
    });
    check_launch("bn_update_eq");
  });
}

}  // namespace

void register_bn_ops() {
  register_factory("bn_fwd", &bn_fwd);
  register_factory("bn_bwd", &bn_bwd);
  register_factory("bn_inf", &bn_inf);
  register_factory("bn_update_eq", &bn_update_eq);
}

}  // namespace tr::native
