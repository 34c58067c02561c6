// Batch normalisation over N*H*W per channel (tr/backend/cpu/ops/bn.py) with the relu, relu6 or silu and the residual
// add that follow it fused in: training forward y = act(bn(x) + z), backward (the mask read from y or
// recomputed from x; the residual's gradient written on the way), inference, folded inference parameters.
//
// Every kernel reads NHWC rows as vectors of 16 bytes (8 FP16/BF16 or 4 FP32 channels) when the channel
// count and the pointers allow it, else one element at a time. The reductions are chunked: a block holds a
// tile of channels (gx vector groups across, `lanes` rows in flight) and sums one chunk of rows, each thread
// in float over four rows and then in float64; a second kernel adds the chunks of each channel in a fixed
// order. The chunking depends only on (m, c, vector width), so the sums are the same on every run: no
// atomics. The forward statistics are one pass: sums of (x - K) and (x - K)^2 with K = the channel's value in
// row 0 (a shift near the data, so E[d^2] - E[d]^2 does not cancel).
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <type_traits>
#include <memory>

#include "cuda/context.hpp"
#include "ops/args/bn.hpp"
#include "ops/bn_kernels.cuh"

namespace tr::native {

namespace {

using namespace bnk;  // NOLINT: the shared BN device code

// y = act(affine(x) + z): the training forward (centered: (x - mean) * a + b) and inference (x * scale + bias).
template <class T, int V>
__global__ void __launch_bounds__(kBlock) apply_kernel(const T* __restrict__ x, const T* z, T* y, const float* mean,
                                                       const float* a, const float* b, Geo g, BnAct act) {
  const int grp = blockIdx.y * g.gx + threadIdx.x;
  if (grp >= g.groups) return;
  float mu[V], sa[V], sb[V];
  load_params<V>(a, grp * V, sa);
  load_params<V>(b, grp * V, sb);
  if (mean != nullptr) load_params<V>(mean, grp * V, mu);
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * g.rows, hi = min(g.m, lo + g.rows);
  for (std::int64_t r = lo + threadIdx.y; r < hi; r += 2 * g.lanes) {
    const bool two = r + g.lanes < hi;
    const std::int64_t o0 = r * g.c + grp * V, o1 = o0 + static_cast<std::int64_t>(g.lanes) * g.c;
    float v0[V], v1[V], z0[V], z1[V];
    load<T, V>(x + o0, v0);
    if (two) load<T, V>(x + o1, v1);
    if (z != nullptr) {
      load<T, V>(z + o0, z0);
      if (two) load<T, V>(z + o1, z1);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float p = mean != nullptr ? affine(v0[j], mu[j], sa[j], sb[j]) : v0[j] * sa[j] + sb[j];
      float q = mean != nullptr ? affine(v1[j], mu[j], sa[j], sb[j]) : v1[j] * sa[j] + sb[j];
      if (z != nullptr) {
        p = p + z0[j];
        q = q + z1[j];
      }
      v0[j] = activate(p, act);
      v1[j] = activate(q, act);
    }
    store<T, V>(y + o0, v0);
    if (two) store<T, V>(y + o1, v1);
  }
}

// dy + dy2 for one vector, rounded to T as an accumulate op would have stored the branch point's sum.
template <class T, int V>
__device__ __forceinline__ void add_second(const float (&d2)[V], float (&gv)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) gv[j] = kern::to_f(kern::from_f<T>(gv[j] + d2[j]));
}

// g = g * act'(.) for one vector (the multiply, not a select: a NaN gradient stays NaN, as on the CPU), the
// mask read from y (RELU_FROM_Y, RELU6_FROM_Y: yv) or recomputed from x.
template <class T, int V, BnMask MASK>
__device__ __forceinline__ void apply_mask(const float (&xv)[V], const float (&yv)[V], const BwdParams<V>& p,
                                           float (&gv)[V]) {
  if (MASK == BnMask::RELU_FROM_Y) {
#pragma unroll
    for (int j = 0; j < V; ++j) gv[j] = gv[j] * (yv[j] > 0.0f ? 1.0f : 0.0f);
  } else if (MASK == BnMask::RELU_FROM_X) {
#pragma unroll
    for (int j = 0; j < V; ++j) gv[j] = gv[j] * relu_passed<T>(affine(xv[j], p.mu[j], p.a[j], p.b[j]));
  } else if (MASK == BnMask::RELU6_FROM_Y) {
#pragma unroll
    for (int j = 0; j < V; ++j) gv[j] = gv[j] * (yv[j] > 0.0f && yv[j] < 6.0f ? 1.0f : 0.0f);
  } else if (MASK == BnMask::RELU6_FROM_X) {
#pragma unroll
    for (int j = 0; j < V; ++j) gv[j] = gv[j] * relu6_passed<T>(affine(xv[j], p.mu[j], p.a[j], p.b[j]));
  } else if (MASK == BnMask::SILU_FROM_X) {
#pragma unroll
    for (int j = 0; j < V; ++j) gv[j] = gv[j] * silu_slope(affine(xv[j], p.mu[j], p.a[j], p.b[j]));
  }
}

// The backward's rows: x and dy, and where the op has them dy2 (the branch point's second gradient) and y (the
// mask's source), loaded raw for U rows at a time.
template <class T, int V, BnMask MASK, bool DY2, int U>
struct BwdRows {
  RawOf<T, V> x[U], dy[U], dy2[DY2 ? U : 1], y[mask_from_y(MASK) ? U : 1];

  __device__ __forceinline__ void load(const T* xp, const T* dyp, const T* dy2p, const T* yp, std::int64_t o, int u) {
    x[u] = load_raw<T, V>(xp + o);
    dy[u] = load_raw<T, V>(dyp + o);
    if (DY2) dy2[u] = load_raw<T, V>(dy2p + o);
    if (mask_from_y(MASK)) y[u] = load_raw<T, V>(yp + o);
  }

  // row u's x and its masked output gradient g
  __device__ __forceinline__ void grad(int u, const BwdParams<V>& p, float (&xv)[V], float (&gv)[V]) const {
    widen<T, V>(x[u], xv);
    widen<T, V>(dy[u], gv);
    if (DY2) {
      float d2[V];
      widen<T, V>(dy2[DY2 ? u : 0], d2);
      add_second<T, V>(d2, gv);
    }
    float yv[V];
    if (mask_from_y(MASK)) widen<T, V>(y[mask_from_y(MASK) ? u : 0], yv);
    apply_mask<T, V, MASK>(xv, yv, p, gv);
  }
};

constexpr int bwd_unroll(BnMask mask, bool dy2) { return 2 + (dy2 ? 1 : 0) + (mask_from_y(mask) ? 1 : 0) > 2 ? 2 : 4; }

// Backward pass 1: g (written to dz when asked), and per chunk the sums of g and g * xhat.
template <class T, int V, BnMask MASK, bool DY2>
__global__ void __launch_bounds__(kBlock) bwd_reduce_kernel(const T* __restrict__ x, const T* dy, const T* dy2,
                                                            const T* y, T* dz,
                                                            const float* gamma, const float* beta, const float* mean,
                                                            const float* inv, Geo g, double* __restrict__ part) {
  constexpr int U = bwd_unroll(MASK, DY2);
  const int grp = blockIdx.y * g.gx + threadIdx.x;
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * g.rows, hi = min(g.m, lo + g.rows);
  double ds[V], dq[V];
#pragma unroll
  for (int j = 0; j < V; ++j) ds[j] = dq[j] = 0.0;
  if (grp < g.groups) {
    BwdParams<V> p;
    p.load_all(gamma, beta, mean, inv, grp * V, MASK);
    BwdRows<T, V, MASK, DY2, U> rows;
    sum_rows<V, U>(
        g, lo, hi, ds, dq, [&](std::int64_t rr, int u) { rows.load(x, dy, dy2, y, rr * g.c + grp * V, u); },
        [&](std::int64_t rr, bool valid, int u, float (&fs)[V], float (&fq)[V]) {
          float xv[V], gv[V];
          rows.grad(u, p, xv, gv);
          if (dz != nullptr && valid) store<T, V>(dz + rr * g.c + grp * V, gv);
          add_terms<V>(p, xv, gv, valid, fs, fq);
        });
  }
  tile_sums<V>(ds, dq, g, part);
}

// Backward pass 3: dx from g (read from dz, or dy masked again), two rows a step with both rows' loads first.
// dx may be x, dz may be dy.
template <class T, int V, BnMask MASK, bool DY2>
__global__ void __launch_bounds__(kBlock) bwd_apply_kernel(const T* x, const T* gsrc, const T* dy2, const T* y, T* dx,
                                                           const float* gamma, const float* beta, const float* mean,
                                                           const float* inv, const float* coef, Geo g) {
  const int grp = blockIdx.y * g.gx + threadIdx.x;
  if (grp >= g.groups) return;
  BwdParams<V> p;
  p.load_all(gamma, beta, mean, inv, grp * V, MASK);
  BwdApply<V> apply;
  apply.load(coef, g.c, grp * V);
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * g.rows, hi = min(g.m, lo + g.rows);
  for (std::int64_t r = lo + threadIdx.y; r < hi; r += 2 * g.lanes) {
    const std::int64_t r1 = min(r + g.lanes, hi - 1);
    BwdRows<T, V, MASK, DY2, 2> rows;
    rows.load(x, gsrc, dy2, y, r * g.c + grp * V, 0);
    rows.load(x, gsrc, dy2, y, r1 * g.c + grp * V, 1);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      float xv[V], gv[V];
      rows.grad(u, p, xv, gv);
      apply(p, xv, gv);
      if (u == 0 || r + g.lanes < hi) store<T, V>(dx + (u == 0 ? r : r1) * g.c + grp * V, gv);
    }
  }
}

__global__ void bn_update_eq_kernel(const float* gamma, const float* beta, const float* mean, const float* var,
                                    float* scale, float* bias, int c, float eps) {
  TR_GRID_STRIDE(i, c) {
    const float sc = gamma[i] / sqrtf(var[i] + eps);
    scale[i] = sc;
    bias[i] = beta[i] - mean[i] * sc;
  }
}

// ---- host side -------------------------------------------------------------------------------------------

// Calls fn(integral_constant<BnMask>, bool_constant<dy2>) for the runtime mask and dy2's presence.
template <class Fn>
void with_mask(BnMask mask, bool dy2, Fn&& fn) {
  auto d = [&](auto mc) {
    if (dy2) {
      fn(mc, std::true_type{});
    } else {
      fn(mc, std::false_type{});
    }
  };
  switch (mask) {
    case BnMask::RELU_FROM_X:
      return d(std::integral_constant<BnMask, BnMask::RELU_FROM_X>{});
    case BnMask::RELU_FROM_Y:
      return d(std::integral_constant<BnMask, BnMask::RELU_FROM_Y>{});
    case BnMask::RELU6_FROM_X:
      return d(std::integral_constant<BnMask, BnMask::RELU6_FROM_X>{});
    case BnMask::RELU6_FROM_Y:
      return d(std::integral_constant<BnMask, BnMask::RELU6_FROM_Y>{});
    case BnMask::SILU_FROM_X:
      return d(std::integral_constant<BnMask, BnMask::SILU_FROM_X>{});
    case BnMask::NONE:
      break;
  }
  d(std::integral_constant<BnMask, BnMask::NONE>{});
}

// The epilogue activation a backward mask undoes.
constexpr BnAct act_of(BnMask mask) {
  switch (mask) {
    case BnMask::RELU_FROM_X:
    case BnMask::RELU_FROM_Y:
      return BnAct::RELU;
    case BnMask::RELU6_FROM_X:
    case BnMask::RELU6_FROM_Y:
      return BnAct::RELU6;
    case BnMask::SILU_FROM_X:
      return BnAct::SILU;
    case BnMask::NONE:
      break;
  }
  return BnAct::NONE;
}

std::string describe(const char* op, const Geo& g, BnAct act, bool res) {
  const char* a = act == BnAct::RELU ? " +relu" : act == BnAct::RELU6 ? " +relu6" : act == BnAct::SILU ? " +silu" : "";
  return std::string(op) + a + (res ? " +residual" : "") + ", vec" + std::to_string(g.v) + ", " +
         std::to_string(g.chunks) + "x" + std::to_string(g.tiles) + " blocks of " + std::to_string(g.gx) + "x" +
         std::to_string(g.lanes);
}

}  // namespace

std::unique_ptr<Op> bn_fwd(Context&, const BnFwdArgs& args) {
  const std::int64_t m = args.m;
  const int c = static_cast<int>(args.c);
  const BnAct act = args.act;
  const bool res = static_cast<bool>(args.z);
  const double mom = args.momentum, eps = args.eps;
  const Geo g = geometry(m, c, vector_width(args.x.dt, c, {args.x, args.y, args.z}));
  const void* x = args.x.ptr;
  const void* z = args.z.ptr;
  void* y = args.y.ptr;
  float *gamma = fp32(args.gamma), *beta = fp32(args.beta), *mean_in = fp32(args.mean_in), *var_in = fp32(args.var_in);
  float *mean_out = fp32(args.mean_out), *var_out = fp32(args.var_out), *smean = fp32(args.saved_mean),
        *sinv = fp32(args.saved_inv_std);
  const Partials pt = partials(g);
  auto scratch = pt.buf;
  double* part = pt.part;
  float* coef = pt.coef;
  const dim3 grid(g.chunks, g.tiles), block(g.gx, g.lanes);
  return fn_op([=](cudaStream_t s) {
    (void)scratch;  // owned by the op
    dispatch(args, g.v, [&](auto tag, auto vc) {
      using T = typename decltype(tag)::type;
      constexpr int V = decltype(vc)::value;
      const T* xp = static_cast<const T*>(x);
      stats_kernel<T, V><<<grid, block, 0, s>>>(xp, g, part);
      stats_finish_kernel<T><<<finish_blocks(c), finish_block(), 0, s>>>(xp, part, g, gamma, beta, mean_in, var_in, mean_out,
                                                               var_out, smean, sinv, coef, mom, eps);
      apply_kernel<T, V><<<grid, block, 0, s>>>(xp, static_cast<const T*>(z), static_cast<T*>(y), coef, coef + c,
                                                coef + 2 * c, g, act);
    });
    check_launch("bn_fwd");
  }, describe("bn_fwd", g, act, res));
}

std::unique_ptr<Op> bn_bwd(Context&, const BnBwdArgs& args) {
  const std::int64_t m = args.m;
  const int c = static_cast<int>(args.c);
  const BnMask mask = args.mask;
  // the mask's source: a recomputed mask reads beta, a read one y (null on the device otherwise)
  if (mask_from_x(mask) && !args.beta) bad(args, "a mask recomputed from x needs beta");
  if (mask_from_y(mask) && !args.y) bad(args, "a mask read from y needs y");
  const Geo g = geometry(m, c, vector_width(args.x.dt, c, {args.x, args.dy, args.dx, args.y, args.dz, args.dy2}));
  const void* x = args.x.ptr;
  const void* dy = args.dy.ptr;
  const void* dy2 = args.dy2.ptr;
  const void* y = args.y.ptr;
  void* dz = args.dz.ptr;
  void* dx = args.dx.ptr;
  float *gamma = fp32(args.gamma), *beta = fp32(args.beta), *smean = fp32(args.saved_mean),
        *sinv = fp32(args.saved_inv_std);
  float *dgamma = fp32(args.dgamma), *dbeta = fp32(args.dbeta);
  const Partials pt = partials(g);
  auto scratch = pt.buf;
  double* part = pt.part;
  float* coef = pt.coef;
  const dim3 grid(g.chunks, g.tiles), block(g.gx, g.lanes);
  return fn_op([=](cudaStream_t s) {
    (void)scratch;
    dispatch(args, g.v, [&](auto tag, auto vc) {
      using T = typename decltype(tag)::type;
      constexpr int V = decltype(vc)::value;
      const T* xp = static_cast<const T*>(x);
      const T* yp = static_cast<const T*>(y);
      T* dzp = static_cast<T*>(dz);
      const T* dy2p = static_cast<const T*>(dy2);
      const T* dyp = static_cast<const T*>(dy);
      with_mask(mask, dy2p != nullptr, [&](auto mc, auto dc) {
        constexpr BnMask M = decltype(mc)::value;
        constexpr bool D2 = decltype(dc)::value;
        bwd_reduce_kernel<T, V, M, D2><<<grid, block, 0, s>>>(xp, dyp, dy2p, yp, dzp, gamma, beta, smean, sinv, g,
                                                              part);
        bwd_finish_kernel<<<finish_blocks(c), finish_block(), 0, s>>>(part, g, gamma, sinv, dgamma, dbeta, coef);
        T* dxp = static_cast<T*>(dx);
        if (dzp != nullptr) {  // with dz written, g is read back from it: already summed and masked
          bwd_apply_kernel<T, V, BnMask::NONE, false><<<grid, block, 0, s>>>(xp, dzp, nullptr, nullptr, dxp, gamma, beta,
                                                                        smean, sinv, coef, g);
        } else {
          bwd_apply_kernel<T, V, M, D2><<<grid, block, 0, s>>>(xp, dyp, dy2p, yp, dxp, gamma, beta, smean, sinv,
                                                               coef, g);
        }
      });
    });
    check_launch("bn_bwd");
  }, describe("bn_bwd", g, act_of(mask), dz != nullptr) + (dy2 != nullptr ? " +dy2" : ""));
}

std::unique_ptr<Op> bn_inf(Context&, const BnInfArgs& args) {
  const std::int64_t m = args.m;
  const int c = static_cast<int>(args.c);
  const BnAct act = args.act;
  const bool res = static_cast<bool>(args.z);
  const Geo g = geometry(m, c, vector_width(args.x.dt, c, {args.x, args.y, args.z}));
  const void* x = args.x.ptr;
  const void* z = args.z.ptr;
  void* y = args.y.ptr;
  const float* scale = fp32(args.scale);
  const float* bias = fp32(args.bias);
  const dim3 grid(g.chunks, g.tiles), block(g.gx, g.lanes);
  return fn_op([=](cudaStream_t s) {
    dispatch(args, g.v, [&](auto tag, auto vc) {
      using T = typename decltype(tag)::type;
      constexpr int V = decltype(vc)::value;
      apply_kernel<T, V><<<grid, block, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(z),
                                                static_cast<T*>(y), nullptr, scale, bias, g, act);
    });
    check_launch("bn_inf");
  }, describe("bn_inf", g, act, res));
}

std::unique_ptr<Op> bn_update_eq(Context&, const BnUpdateEqArgs& args) {
  const int c = static_cast<int>(args.c);
  const float eps = static_cast<float>(args.eps);
  float *gamma = fp32(args.gamma), *beta = fp32(args.beta), *mean = fp32(args.mean), *var = fp32(args.var),
        *scale = fp32(args.scale), *bias = fp32(args.bias);
  return fn_op([=](cudaStream_t s) {
    bn_update_eq_kernel<<<kern::blocks_for(c), kern::kThreads, 0, s>>>(gamma, beta, mean, var, scale, bias, c, eps);
    check_launch("bn_update_eq");
  });
}

}  // namespace tr::native
