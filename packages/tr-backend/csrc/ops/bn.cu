// Batch normalisation over N*H*W per channel (tr/backend/cpu/ops/bn.py): training forward (two-pass float64
// statistics, running statistics with the unbiased variance), backward, inference and the folded inference
// parameters. One block per channel reduces with a fixed tree: deterministic, no atomics. (cuDNN frontend
// graphs for conv+genstats / bn_finalize / bn_apply come later; these kernels are the reference path.)
#include <cmath>

#include "cuda/context.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

constexpr int kBnThreads = 256;

template <class TX, class TY, class TP>
__global__ void bn_fwd_kernel(const TX* x, TY* y, const TP* gamma, const TP* beta, const TP* mean_in, const TP* var_in,
                              TP* mean_out, TP* var_out, TP* saved_mean, TP* saved_inv, std::int64_t m, int c,
                              double mom, double eps) {
  __shared__ double sd[32];
  const int ch = blockIdx.x;
  double s1 = 0.0;
  for (std::int64_t r = threadIdx.x; r < m; r += blockDim.x) s1 += static_cast<double>(kern::to_f(x[r * c + ch]));
  s1 = kern::block_reduce(s1, kern::Sum(), sd) * (1.0 / static_cast<double>(m));
  const float mean = static_cast<float>(s1);
  double s2 = 0.0;
  for (std::int64_t r = threadIdx.x; r < m; r += blockDim.x) {
    const float d = kern::to_f(x[r * c + ch]) - mean;
    s2 += static_cast<double>(d * d);
  }
  s2 = kern::block_reduce(s2, kern::Sum(), sd) * (1.0 / static_cast<double>(m));
  const double unbias = m > 1 ? static_cast<double>(m) / static_cast<double>(m - 1) : 1.0;
  const float inv = static_cast<float>(1.0 / sqrt(s2 + eps));
  const float a = kern::to_f(gamma[ch]) * inv;
  const float b = kern::to_f(beta[ch]);
  if (threadIdx.x == 0) {
    // numpy (NEP 50): (1 - m) * var_in is float32 arithmetic, the float64 batch term is added in float64
    const float keep = static_cast<float>(1.0 - mom);
    const float old_var = keep * kern::to_f(var_in[ch]), old_mean = keep * kern::to_f(mean_in[ch]);
    var_out[ch] = kern::from_f<TP>(static_cast<float>(static_cast<double>(old_var) + (mom * unbias) * s2));
    mean_out[ch] = kern::from_f<TP>(static_cast<float>(static_cast<double>(old_mean) + mom * s1));
    saved_mean[ch] = kern::from_f<TP>(mean);
    saved_inv[ch] = kern::from_f<TP>(inv);
  }
  for (std::int64_t r = threadIdx.x; r < m; r += blockDim.x) {
    const std::int64_t i = r * c + ch;
    y[i] = kern::from_f<TY>((kern::to_f(x[i]) - mean) * a + b);
  }
}

template <class TX, class TD, class TP>
__global__ void bn_bwd_kernel(const TX* x, const TD* dy, TX* dx, const TP* gamma, const TP* saved_mean,
                              const TP* saved_inv, TP* dgamma, TP* dbeta, std::int64_t m, int c) {
  __shared__ double sd[32];
  const int ch = blockIdx.x;
  const float mean = kern::to_f(saved_mean[ch]), inv = kern::to_f(saved_inv[ch]);
  double s1 = 0.0, s2 = 0.0;
  for (std::int64_t r = threadIdx.x; r < m; r += blockDim.x) {
    const std::int64_t i = r * c + ch;
    const float g = kern::to_f(dy[i]);
    const float xhat = (kern::to_f(x[i]) - mean) * inv;
    s1 += static_cast<double>(g);
    s2 += static_cast<double>(g * xhat);
  }
  s1 = kern::block_reduce(s1, kern::Sum(), sd);
  s2 = kern::block_reduce(s2, kern::Sum(), sd);
  if (threadIdx.x == 0) {
    dbeta[ch] = kern::from_f<TP>(static_cast<float>(s1));
    dgamma[ch] = kern::from_f<TP>(static_cast<float>(s2));
  }
  const double inv_m = 1.0 / static_cast<double>(m);
  const float t1 = static_cast<float>(s1 * inv_m);
  const float t2 = static_cast<float>(s2 * inv_m);
  const float k = kern::to_f(gamma[ch]) * inv;
  for (std::int64_t r = threadIdx.x; r < m; r += blockDim.x) {
    const std::int64_t i = r * c + ch;
    const float xhat = (kern::to_f(x[i]) - mean) * inv;  // read before dx[i] is written (dx may be x)
    dx[i] = kern::from_f<TX>(((kern::to_f(dy[i]) - xhat * t2) - t1) * k);
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
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      kern::dispatch_float(ydt, args, "y", [&](auto ty) {
        using TY = typename decltype(ty)::type;
        kern::dispatch_float(pdt, args, "gamma", [&](auto tp) {
          using TP = typename decltype(tp)::type;
          auto P = [&](int i) { return reinterpret_cast<TP*>(p[i]); };
          bn_fwd_kernel<TX, TY, TP><<<c, kBnThreads, 0, s>>>(reinterpret_cast<const TX*>(p[0]),
                                                             reinterpret_cast<TY*>(p[1]), P(2), P(3), P(4), P(5),
                                                             P(6), P(7), P(8), P(9), m, c, mom, eps);
        });
      });
    });
    check_launch("bn_fwd");
  });
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
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      kern::dispatch_float(ddt, args, "dy", [&](auto td) {
        using TD = typename decltype(td)::type;
        kern::dispatch_float(pdt, args, "gamma", [&](auto tp) {
          using TP = typename decltype(tp)::type;
          bn_bwd_kernel<TX, TD, TP><<<c, kBnThreads, 0, s>>>(
              static_cast<const TX*>(x), static_cast<const TD*>(dy), static_cast<TX*>(dx),
              static_cast<const TP*>(gamma), static_cast<const TP*>(mean), static_cast<const TP*>(inv),
              static_cast<TP*>(dgamma), static_cast<TP*>(dbeta), m, c);
        });
      });
    });
    check_launch("bn_bwd");
  });
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
