// Element-wise activations: act_fwd (optional INT8 mask x > 0), act_bwd (from x or from relu's mask), act_inf.
// Each formula follows the CPU backend's order of float operations (tr/backend/cpu/ops/activation.py); with
// --fmad=false only the transcendental functions (exp, tanh, erfc) differ from numpy, by an ulp or two.
#include <cmath>

#include "cuda/context.hpp"
#include "ops/args/activation.hpp"
#include "ops/codes.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float clip(float x, float lo, float hi) {
  if (x != x) return x;  // numpy's clip keeps NaN
  return fminf(fmaxf(x, lo), hi);
}

__device__ __forceinline__ float phi_cdf(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }

__device__ __forceinline__ float forward(ActKind kind, float x) {
  switch (kind) {
    case ActKind::RELU:
      return kern::nan_max(x, 0.0f);
    case ActKind::TANH:
      return tanhf(x);
    case ActKind::SIGMOID:
      return sigmoid(x);
    case ActKind::RELU6:
      return clip(x, 0.0f, 6.0f);
    case ActKind::LEAKY_RELU:
      return kern::nan_max(x, x * 0.01f);
    case ActKind::SILU:
      return x * sigmoid(x);
    case ActKind::HARDSWISH: {
      const float t = clip(x + 3.0f, 0.0f, 6.0f) * x;
      return t * static_cast<float>(1.0 / 6.0);
    }
    case ActKind::ELU: {
      const float m = (x != x) ? x : fminf(x, 0.0f);
      return kern::nan_max(x, 0.0f) + expm1f(m);
    }
    case ActKind::GELU:
      return x * phi_cdf(x);
    default:
      return x;
  }
}

__device__ __forceinline__ float derivative(ActKind kind, float x) {
  switch (kind) {
    case ActKind::RELU:
      return x > 0.0f ? 1.0f : 0.0f;
    case ActKind::TANH: {
      const float t = tanhf(x);
      return 1.0f - t * t;
    }
    case ActKind::SIGMOID: {
      const float s = sigmoid(x);
      return s * (1.0f - s);
    }
    case ActKind::SILU: {
      const float s = sigmoid(x);
      return s * ((1.0f - s) * x + 1.0f);
    }
    case ActKind::RELU6:
      return (x > 0.0f ? 1.0f : 0.0f) * (x < 6.0f ? 1.0f : 0.0f);
    case ActKind::LEAKY_RELU:
      return (x > 0.0f ? 1.0f : 0.0f) * 0.99f + 0.01f;
    case ActKind::HARDSWISH: {
      float d = x * static_cast<float>(1.0 / 3.0) + 0.5f;
      if (x <= -3.0f) d = 0.0f;
      if (x >= 3.0f) d = 1.0f;
      return d;
    }
    case ActKind::ELU: {
      const float m = (x != x) ? x : fminf(x, 0.0f);
      return expf(m);
    }
    case ActKind::GELU: {
      const float t = expf(x * x * -0.5f) * 0.3989422804014327f * x;
      return phi_cdf(x) + t;
    }
    default:
      return 1.0f;
  }
}

template <class TX, class TY>
__global__ void act_fwd_kernel(const TX* x, TY* y, signed char* mask, std::int64_t n, ActKind kind) {
  TR_GRID_STRIDE(i, n) {
    const float v = kern::to_f(x[i]);
    if (mask != nullptr) mask[i] = v > 0.0f ? 1 : 0;
    y[i] = kern::from_f<TY>(forward(kind, v));
  }
}

template <class TX, class TD>
__global__ void act_bwd_kernel(const TX* x, const TD* dy, TD* dx, const signed char* mask, std::int64_t n,
                               ActKind kind) {
  TR_GRID_STRIDE(i, n) {
    const float g = kern::to_f(dy[i]);
    const float d = mask != nullptr ? (mask[i] != 0 ? 1.0f : 0.0f) : derivative(kind, kern::to_f(x[i]));
    dx[i] = kern::from_f<TD>(g * d);
  }
}

// act_fwd (mask: where it writes [x > 0], or null) and act_inf (mask null).
template <class A>
std::unique_ptr<Op> act_forward(const A& args, signed char* mask) {
  const std::int64_t n = args.n;
  const ActKind kind = args.kind;
  const DT xdt = args.x.dt, ydt = args.y.dt;
  const void* x = args.x.ptr;
  void* y = args.y.ptr;
  kern::dispatch_float(xdt, args, "x", [](auto) {});
  kern::dispatch_float(ydt, args, "y", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    const unsigned blocks = kern::blocks_for(n);
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      kern::dispatch_float(ydt, args, "y", [&](auto ty) {
        using TY = typename decltype(ty)::type;
        act_fwd_kernel<TX, TY><<<blocks, kern::kThreads, 0, s>>>(static_cast<const TX*>(x), static_cast<TY*>(y),
                                                                 mask, n, kind);
      });
    });
    check_launch("act_fwd");
  });
}

}  // namespace

std::unique_ptr<Op> act_fwd(Context&, const ActFwdArgs& args) {
  return act_forward(args, static_cast<signed char*>(args.mask.ptr));
}

std::unique_ptr<Op> act_inf(Context&, const ActInfArgs& args) { return act_forward(args, nullptr); }

std::unique_ptr<Op> act_bwd(Context&, const ActBwdArgs& args) {
  const std::int64_t n = args.n;
  const ActKind kind = args.kind;
  const DT xdt = args.x.dt, ddt = args.dy.dt;
  if (args.dx.dt != ddt) bad(args, "dx and dy must have one dtype");
  const void* x = args.x.ptr;
  const void* dy = args.dy.ptr;
  void* dx = args.dx.ptr;
  const auto* mask = static_cast<const signed char*>(args.mask.ptr);
  kern::dispatch_float(xdt, args, "x", [](auto) {});
  kern::dispatch_float(ddt, args, "dy", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    const unsigned blocks = kern::blocks_for(n);
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      kern::dispatch_float(ddt, args, "dy", [&](auto td) {
        using TD = typename decltype(td)::type;
        act_bwd_kernel<TX, TD><<<blocks, kern::kThreads, 0, s>>>(
            static_cast<const TX*>(x), static_cast<const TD*>(dy), static_cast<TD*>(dx), mask, n, kind);
      });
    });
    check_launch("act_bwd");
  });
}

}  // namespace tr::native
