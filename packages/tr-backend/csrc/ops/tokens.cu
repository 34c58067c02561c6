// A Vision Transformer's token sequence (tr/backend/cpu/ops/tokens.py): the patch tokens with a class token and
// a position embedding, their gradients, and class-token pooling. Each output is one float32 expression rounded
// once to its type (--fmad=false), the CPU backend's bytes; dcls and dpos are one running float32 sum an element,
// the samples added in order, no atomics, so every launch gives the same bytes.
#include <cstdint>
#include <string>

#include "cuda/context.hpp"
#include "ops/args/tokens.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

// y[i, j, k] for i < n, j < t, k < c: c0 = cls ? 1 : 0.
template <class TX, class TY>
__global__ void tokens_fwd_kernel(const TX* x, const float* cls, const float* pos, TY* y, std::int64_t n,
                                  std::int64_t p, std::int64_t t, std::int64_t c) {
  const std::int64_t c0 = cls != nullptr ? 1 : 0;
  TR_GRID_STRIDE(e, n * t * c) {
    const std::int64_t k = e % c, j = (e / c) % t, i = e / (c * t);
    float v = j < c0 ? cls[k] : kern::to_f(x[(i * p + (j - c0)) * c + k]);
    if (pos != nullptr) v = v + pos[j * c + k];
    y[e] = kern::from_f<TY>(v);
  }
}

template <class TD, class TX>
__global__ void tokens_dx_kernel(const TD* dy, TX* dx, std::int64_t n, std::int64_t p, std::int64_t t,
                                 std::int64_t c, std::int64_t c0) {
  TR_GRID_STRIDE(e, n * p * c) {
    const std::int64_t k = e % c, j = (e / c) % p, i = e / (c * p);
    dx[e] = kern::from_f<TX>(kern::to_f(dy[(i * t + j + c0) * c + k]));
  }
}

// dst[j, k] = the sum over samples i of dy[i, j, k] (j < rows), samples in order.
template <class TD>
__global__ void tokens_sum_kernel(const TD* dy, float* dst, std::int64_t n, std::int64_t t, std::int64_t rows,
                                  std::int64_t c) {
  TR_GRID_STRIDE(e, rows * c) {
    float s = kern::to_f(dy[e]);
    for (std::int64_t i = 1; i < n; ++i) s = s + kern::to_f(dy[i * t * c + e]);
    dst[e] = s;
  }
}

template <class TS, class TD>
__global__ void pick_kernel(const TS* src, TD* dst, std::int64_t n, std::int64_t t, std::int64_t c, bool backward) {
  if (!backward) {
    TR_GRID_STRIDE(e, n * c) { dst[e] = kern::from_f<TD>(kern::to_f(src[(e / c) * t * c + e % c])); }
  } else {
    TR_GRID_STRIDE(e, n * t * c) {
      const std::int64_t k = e % c, j = (e / c) % t, i = e / (c * t);
      dst[e] = kern::from_f<TD>(j == 0 ? kern::to_f(src[i * c + k]) : 0.0f);
    }
  }
}

template <class A>
void check_sizes(const A& args, std::int64_t n, std::int64_t p, std::int64_t t, std::int64_t c) {
  if (n < 1 || p < 1 || c < 1 || (t != p && t != p + 1)) {
    bad(args, "sizes n=" + std::to_string(n) + " p=" + std::to_string(p) + " t=" + std::to_string(t) +
                  " c=" + std::to_string(c) + " are not a token sequence");
  }
}

}  // namespace

std::unique_ptr<Op> tokens_fwd(Context&, const TokensFwdArgs& args) {
  const std::int64_t n = args.n, p = args.p, t = args.t, c = args.c;
  check_sizes(args, n, p, t, c);
  if ((t == p + 1) != static_cast<bool>(args.cls)) bad(args, "t = p + 1 exactly when a class token is given");
  const DT xdt = args.x.dt, ydt = args.y.dt;
  const void* x = args.x.ptr;
  void* y = args.y.ptr;
  const float* cls = args.cls ? static_cast<const float*>(args.cls.ptr) : nullptr;
  const float* pos = args.pos ? static_cast<const float*>(args.pos.ptr) : nullptr;
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      kern::dispatch_float(ydt, args, "y", [&](auto ty) {
        using TY = typename decltype(ty)::type;
        tokens_fwd_kernel<TX, TY><<<kern::blocks_for(n * t * c), kern::kThreads, 0, s>>>(
            static_cast<const TX*>(x), cls, pos, static_cast<TY*>(y), n, p, t, c);
      });
    });
    check_launch("tokens_fwd");
  });
}

std::unique_ptr<Op> tokens_bwd(Context&, const TokensBwdArgs& args) {
  const std::int64_t n = args.n, p = args.p, t = args.t, c = args.c;
  check_sizes(args, n, p, t, c);
  if ((t == p + 1) != static_cast<bool>(args.dcls)) bad(args, "t = p + 1 exactly when dcls is given");
  const std::int64_t c0 = t - p;
  const bool with_dx = static_cast<bool>(args.dx);
  const DT ddt = args.dy.dt, xdt = with_dx ? args.dx.dt : DT::F32;
  const void* dy = args.dy.ptr;
  void* dx = args.dx.ptr;
  float* dcls = args.dcls ? static_cast<float*>(args.dcls.ptr) : nullptr;
  float* dpos = args.dpos ? static_cast<float*>(args.dpos.ptr) : nullptr;
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(ddt, args, "dy", [&](auto td) {
      using TD = typename decltype(td)::type;
      const TD* g = static_cast<const TD*>(dy);
      if (with_dx) {
        kern::dispatch_float(xdt, args, "dx", [&](auto tx) {
          using TX = typename decltype(tx)::type;
          tokens_dx_kernel<TD, TX><<<kern::blocks_for(n * p * c), kern::kThreads, 0, s>>>(g, static_cast<TX*>(dx),
                                                                                           n, p, t, c, c0);
        });
      }
      if (dpos != nullptr) {
        tokens_sum_kernel<TD><<<kern::blocks_for(t * c), kern::kThreads, 0, s>>>(g, dpos, n, t, t, c);
      }
      if (dcls != nullptr) {
        tokens_sum_kernel<TD><<<kern::blocks_for(c), kern::kThreads, 0, s>>>(g, dcls, n, t, 1, c);
      }
    });
    check_launch("tokens_bwd");
  });
}

std::unique_ptr<Op> token_pick(Context&, const TokenPickArgs& args) {
  const std::int64_t n = args.n, t = args.t, c = args.c;
  if (n < 1 || t < 1 || c < 1) bad(args, "n, t and c must be >= 1");
  const bool backward = args.backward;
  const DT sdt = args.src.dt, ddt = args.dst.dt;
  const void* src = args.src.ptr;
  void* dst = args.dst.ptr;
  const std::int64_t count = backward ? n * t * c : n * c;
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(sdt, args, "src", [&](auto ts) {
      using TS = typename decltype(ts)::type;
      kern::dispatch_float(ddt, args, "dst", [&](auto td) {
        using TD = typename decltype(td)::type;
        pick_kernel<TS, TD><<<kern::blocks_for(count), kern::kThreads, 0, s>>>(static_cast<const TS*>(src),
                                                                                static_cast<TD*>(dst), n, t, c,
                                                                                backward);
      });
    });
    check_launch(backward ? "token_pick_bwd" : "token_pick_fwd");
  });
}

}  // namespace tr::native
