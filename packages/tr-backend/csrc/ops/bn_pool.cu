// Batch norm + relu + max pooling (tr/backend/cpu/ops/bn_pool.py): the CBR before a pool as one op pair, so the
// full-resolution activation and its gradient never go through memory.
//
// Forward: the statistics of x as bn_fwd computes them, then one thread per (output position, vector of
// channels) normalises its window's inputs, rounds them to x's dtype, applies the relu and keeps the first
// maximum (strict '>', as maxpool_fwd), writing the pooled output and the INT8 argmax. Backward: per input
// position, the pooled gradient routed back through the mask (maxpool_bwd's rule: a copy where windows do not
// overlap, a sum in window order where they do, rounded to x's dtype), times the relu recomputed from x, then
// bn_bwd's chunked reduction and apply. Deterministic: fixed chunks, fixed order, no atomics.
#include <algorithm>
#include <memory>
#include <type_traits>

#include "cuda/context.hpp"
#include "ops/args/bn_pool.hpp"
#include "ops/bn_kernels.cuh"

namespace tr::native {

namespace {

using namespace bnk;  // NOLINT: the shared BN device code

// Row indices are 32-bit in these kernels (the host refuses more than 2^31 - 1 rows): a 64-bit division per
// row is emulated and was most of the kernels' time.
struct Win {
  int n, h, w, kh, kw, sh, sw, ph, pw, p, q;
  int overlap;   // windows share inputs (stride < kernel): the backward sums
  int disjoint;  // stride == kernel, no padding: an input lies in at most one window, found by division
};

template <class A>
Win win_of(const A& a) {
  auto g = [](std::int64_t v) { return static_cast<int>(v); };
  Win w{g(a.n), g(a.h), g(a.w), g(a.kh), g(a.kw), g(a.sh), g(a.sw), g(a.ph), g(a.pw), g(a.p), g(a.q), 0, 0};
  w.overlap = (w.sh < w.kh || w.sw < w.kw) ? 1 : 0;
  w.disjoint = (w.sh == w.kh && w.sw == w.kw && w.ph == 0 && w.pw == 0) ? 1 : 0;
  if (static_cast<std::int64_t>(w.n) * w.h * w.w >= (1LL << 31)) bad(a, "more than 2^31 - 1 rows");
  return w;
}

template <int V>
__device__ __forceinline__ void load_mask(const signed char* p, int (&out)[V]) {
  using R = typename Raw<V>::type;
  const R r = *reinterpret_cast<const R*>(p);
  const signed char* e = reinterpret_cast<const signed char*>(&r);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = e[j];
}

template <int V>
__device__ __forceinline__ void store_mask(signed char* p, const int (&in)[V]) {
  using R = typename Raw<V>::type;
  R r;
  signed char* e = reinterpret_cast<signed char*>(&r);
#pragma unroll
  for (int j = 0; j < V; ++j) e[j] = static_cast<signed char>(in[j]);
  *reinterpret_cast<R*>(p) = r;
}

// Forward pass 3 (after bn_kernels' stats and finish): g runs over the pooled rows (n, op, oq). K: the window's
// side when it is K x K (its taps' loads are issued together, clamped into the image), 0: any window.
template <class T, int V, int K>
__global__ void __launch_bounds__(kBlock) pool_apply_kernel(const T* __restrict__ x, T* y, signed char* mask,
                                                            const float* coef, Geo g, Win w) {
  const int grp = blockIdx.y * g.gx + threadIdx.x;
  if (grp >= g.groups) return;
  float mu[V], sa[V], sb[V];
  load_params<V>(coef, grp * V, mu);
  load_params<V>(coef + g.c, grp * V, sa);
  load_params<V>(coef + 2 * g.c, grp * V, sb);
  const int taps = K > 0 ? K * K : w.kh * w.kw, kw = K > 0 ? K : w.kw;
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * g.rows, hi = min(g.m, lo + g.rows);
  for (std::int64_t r = lo + threadIdx.y; r < hi; r += g.lanes) {
    const int ri = static_cast<int>(r), nr = ri / w.q;
    const int oq = ri - nr * w.q, n = nr / w.p, op = nr - n * w.p;
    RawOf<T, V> raw[K > 0 ? K * K : 1];
    if (K > 0) {
#pragma unroll
      for (int t = 0; t < (K > 0 ? K * K : 1); ++t) {
        const int hh = max(0, min(op * w.sh - w.ph + t / kw, w.h - 1));
        const int ww = max(0, min(oq * w.sw - w.pw + t % kw, w.w - 1));
        raw[t] = load_raw<T, V>(x + ((static_cast<std::int64_t>(n) * w.h + hh) * w.w + ww) * g.c + grp * V);
      }
    }
    float best[V];
    int arg[V];
#pragma unroll
    for (int t = 0; t < taps; ++t) {
      const int hh = op * w.sh - w.ph + t / kw, ww = oq * w.sw - w.pw + t % kw;
      float v[V];
      if (hh >= 0 && hh < w.h && ww >= 0 && ww < w.w) {
        if (K > 0) {
          widen<T, V>(raw[K > 0 ? t : 0], v);
        } else {
          load<T, V>(x + ((static_cast<std::int64_t>(n) * w.h + hh) * w.w + ww) * g.c + grp * V, v);
        }
#pragma unroll
        for (int j = 0; j < V; ++j) {  // the activation as bn_fwd then act_fwd would have stored it
          v[j] = kern::nan_max(kern::to_f(kern::from_f<T>(affine(v[j], mu[j], sa[j], sb[j]))), 0.0f);
        }
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = -INFINITY;
      }
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (t == 0 || v[j] > best[j]) {  // strict '>': the first max wins, NaN never replaces
          best[j] = v[j];
          arg[j] = t;
        }
      }
    }
    store<T, V>(y + r * g.c + grp * V, best);
    store_mask<V>(mask + r * g.c + grp * V, arg);
  }
}

// The pooled gradient routed back to input position (n, hh, ww) for one vector, rounded to T, times the relu
// recomputed from x (xv: that position's x).
template <class T, int V>
__device__ __forceinline__ void routed_grad(const T* dy, const signed char* mask, const Geo& g, const Win& w, int grp,
                                            std::int64_t r, const float (&xv)[V], const BwdParams<V>& p,
                                            float (&gv)[V]) {
  const int ri = static_cast<int>(r), nr = ri / w.w;
  const int ww = ri - nr * w.w, n = nr / w.h, hh = nr - n * w.h;
#pragma unroll
  for (int j = 0; j < V; ++j) gv[j] = 0.0f;
  if (w.disjoint) {  // the one window holding this input, if any (inputs past the last window get nothing)
    const int op = hh / w.kh, oq = ww / w.kw;
    if (op < w.p && oq < w.q) {
      const int t = (hh - op * w.kh) * w.kw + (ww - oq * w.kw);
      const std::int64_t o = ((static_cast<std::int64_t>(n) * w.p + op) * w.q + oq) * g.c + grp * V;
      float d[V];
      int code[V];
      load<T, V>(dy + o, d);
      load_mask<V>(mask + o, code);
#pragma unroll
      for (int j = 0; j < V; ++j) gv[j] = code[j] == t ? d[j] : 0.0f;
    }
  }
  if (!w.disjoint) {
    // the windows holding this input: rows op in [op_lo, op_hi], columns oq likewise; visited with op and oq
    // descending, i.e. window positions t = (ah - op*sh) * kw + (aw - oq*sw) ascending, the CPU's order
    const int ah = hh + w.ph, aw = ww + w.pw;
    const int op_lo = ah >= w.kh ? (ah - w.kh) / w.sh + 1 : 0, op_hi = min(ah / w.sh, w.p - 1);
    const int oq_lo = aw >= w.kw ? (aw - w.kw) / w.sw + 1 : 0, oq_hi = min(aw / w.sw, w.q - 1);
    for (int op = op_hi; op >= op_lo; --op) {
      for (int oq = oq_hi; oq >= oq_lo; --oq) {
        const int t = (ah - op * w.sh) * w.kw + (aw - oq * w.sw);
        const std::int64_t o = ((static_cast<std::int64_t>(n) * w.p + op) * w.q + oq) * g.c + grp * V;
        float d[V];
        int code[V];
        load<T, V>(dy + o, d);
        load_mask<V>(mask + o, code);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          if (w.overlap) {
            gv[j] = gv[j] + d[j] * (code[j] == t ? 1.0f : 0.0f);  // the CPU's dy * (code == t), NaN included
          } else if (code[j] == t) {
            gv[j] = d[j];
          }
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    gv[j] = kern::to_f(kern::from_f<T>(gv[j])) * relu_passed<T>(affine(xv[j], p.mu[j], p.a[j], p.b[j]));
  }
}

template <class T, int V>
__global__ void __launch_bounds__(kBlock) pool_bwd_reduce_kernel(const T* __restrict__ x, const T* dy,
                                                                 const signed char* mask, const float* gamma,
                                                                 const float* beta, const float* mean,
                                                                 const float* inv, Geo g, Win w,
                                                                 double* __restrict__ part) {
  const int grp = blockIdx.y * g.gx + threadIdx.x;
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * g.rows, hi = min(g.m, lo + g.rows);
  double ds[V], dq[V];
#pragma unroll
  for (int j = 0; j < V; ++j) ds[j] = dq[j] = 0.0;
  if (grp < g.groups) {
    BwdParams<V> p;
    p.load_all(gamma, beta, mean, inv, grp * V, BnMask::RELU_FROM_X);
    RawOf<T, V> raw[kUnroll];
    sum_rows<V, kUnroll>(
        g, lo, hi, ds, dq, [&](std::int64_t rr, int u) { raw[u] = load_raw<T, V>(x + rr * g.c + grp * V); },
        [&](std::int64_t rr, bool valid, int u, float (&fs)[V], float (&fq)[V]) {
          float xv[V], gv[V];
          widen<T, V>(raw[u], xv);
          routed_grad<T, V>(dy, mask, g, w, grp, rr, xv, p, gv);
          add_terms<V>(p, xv, gv, valid, fs, fq);
        });
  }
  tile_sums<V>(ds, dq, g, part);
}

template <class T, int V>
__global__ void __launch_bounds__(kBlock) pool_bwd_apply_kernel(const T* x, const T* dy, const signed char* mask,
                                                                T* dx, const float* gamma, const float* beta,
                                                                const float* mean, const float* inv,
                                                                const float* coef, Geo g, Win w) {
  const int grp = blockIdx.y * g.gx + threadIdx.x;
  if (grp >= g.groups) return;
  BwdParams<V> p;
  p.load_all(gamma, beta, mean, inv, grp * V, BnMask::RELU_FROM_X);
  BwdApply<V> apply;
  apply.load(coef, g.c, grp * V);
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * g.rows, hi = min(g.m, lo + g.rows);
  for (std::int64_t r = lo + threadIdx.y; r < hi; r += g.lanes) {
    float xv[V], gv[V];
    load<T, V>(x + r * g.c + grp * V, xv);
    routed_grad<T, V>(dy, mask, g, w, grp, r, xv, p, gv);
    apply(p, xv, gv);
    store<T, V>(dx + r * g.c + grp * V, gv);
  }
}

// Disjoint windows that cover the input exactly (VGG's 2x2/2): one thread per (window, vector) reads the pooled
// gradient and mask once and visits its kh*kw inputs, so there is no index arithmetic per input row. g runs
// over the pooled rows. pass 0: the chunk sums of g and g * xhat; pass 1: dx.
template <class T, int V, int PASS>
__global__ void __launch_bounds__(kBlock) pool_bwd_window_kernel(const T* __restrict__ x, const T* dy,
                                                                 const signed char* mask, T* dx, const float* gamma,
                                                                 const float* beta, const float* mean,
                                                                 const float* inv, const float* coef, Geo g, Win w,
                                                                 double* __restrict__ part) {
  const int grp = blockIdx.y * g.gx + threadIdx.x;
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * g.rows, hi = min(g.m, lo + g.rows);
  double ds[V], dq[V];
#pragma unroll
  for (int j = 0; j < V; ++j) ds[j] = dq[j] = 0.0;
  if (grp < g.groups) {
    BwdParams<V> p;
    p.load_all(gamma, beta, mean, inv, grp * V, BnMask::RELU_FROM_X);
    BwdApply<V> apply;
    if (PASS == 1) apply.load(coef, g.c, grp * V);
    for (std::int64_t r = lo + threadIdx.y; r < hi; r += g.lanes) {
      const int ro = static_cast<int>(r), nr = ro / w.q;
      const int oq = ro - nr * w.q, n = nr / w.p, op = nr - n * w.p;
      float d[V];
      int code[V];
      load<T, V>(dy + r * g.c + grp * V, d);
      load_mask<V>(mask + r * g.c + grp * V, code);
      float fs[V], fq[V];
#pragma unroll
      for (int j = 0; j < V; ++j) fs[j] = fq[j] = 0.0f;
      for (int t = 0; t < w.kh * w.kw; ++t) {
        const int hh = op * w.kh + t / w.kw, ww = oq * w.kw + t % w.kw;
        const std::int64_t o = ((static_cast<std::int64_t>(n) * w.h + hh) * w.w + ww) * g.c + grp * V;
        float xv[V], gv[V];
        load<T, V>(x + o, xv);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          gv[j] = (code[j] == t ? d[j] : 0.0f) * relu_passed<T>(affine(xv[j], p.mu[j], p.a[j], p.b[j]));
        }
        if (PASS == 0) {
          add_terms<V>(p, xv, gv, true, fs, fq);
        } else {
          apply(p, xv, gv);
          store<T, V>(dx + o, gv);
        }
      }
      if (PASS == 0) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          ds[j] += static_cast<double>(fs[j]);
          dq[j] += static_cast<double>(fq[j]);
        }
      }
    }
  }
  if (PASS == 0) tile_sums<V>(ds, dq, g, part);
}

// Overlapping (or padded) windows, walked by cell: cell (n, cp, cq) is the sh x sw block of inputs at padded
// rows cp*sh .. cp*sh + sh - 1 (columns likewise); the windows holding any of them are op = cp - a, oq = cq - b
// for a, b < W = ceil(k / s), so one thread per (cell, vector) loads those W x W pooled gradients and masks and
// its inputs first, then routes each input's gradient from them in maxpool_bwd's order (op, oq descending: the
// window position t ascending). No per-input search or division. g runs over the cells; PASS as above.
struct Cells {
  int cp, cq;  // cells per image: ceil((h + ph) / sh) x ceil((w + pw) / sw)
};

template <int V>
using MaskRaw = typename Raw<V>::type;

// S: the cell's side when both strides are S (its inputs' loads are issued together), 0: any strides.
template <class T, int V, int W, int S, int PASS>
__global__ void __launch_bounds__(kBlock) pool_bwd_cell_kernel(const T* __restrict__ x, const T* dy,
                                                               const signed char* mask, T* dx, const float* gamma,
                                                               const float* beta, const float* mean, const float* inv,
                                                               const float* coef, Geo g, Win w, Cells cl,
                                                               double* __restrict__ part) {
  const int grp = blockIdx.y * g.gx + threadIdx.x;
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * g.rows, hi = min(g.m, lo + g.rows);
  double ds[V], dq[V];
#pragma unroll
  for (int j = 0; j < V; ++j) ds[j] = dq[j] = 0.0;
  if (grp < g.groups) {
    BwdParams<V> p;
    p.load_all(gamma, beta, mean, inv, grp * V, BnMask::RELU_FROM_X);
    BwdApply<V> apply;
    if (PASS == 1) apply.load(coef, g.c, grp * V);
    for (std::int64_t r = lo + threadIdx.y; r < hi; r += g.lanes) {
      const int rc = static_cast<int>(r), nr = rc / cl.cq;
      const int cq = rc - nr * cl.cq, n = nr / cl.cp, cp = nr - n * cl.cp;
      RawOf<T, V> draw[W][W];
      MaskRaw<V> mraw[W][W];
      bool ok[W][W];
#pragma unroll
      for (int a = 0; a < W; ++a) {
#pragma unroll
        for (int b = 0; b < W; ++b) {
          const int op = cp - a, oq = cq - b;
          ok[a][b] = op >= 0 && op < w.p && oq >= 0 && oq < w.q;
          const std::int64_t o =
              ((static_cast<std::int64_t>(n) * w.p + max(0, min(op, w.p - 1))) * w.q + max(0, min(oq, w.q - 1))) *
                  g.c + grp * V;
          draw[a][b] = load_raw<T, V>(dy + o);
          mraw[a][b] = *reinterpret_cast<const MaskRaw<V>*>(mask + o);
        }
      }
      constexpr int SX = S > 0 ? S : 1;
      RawOf<T, V> xraw[SX][SX];  // with S: the cell's inputs, loaded now (clamped into the image)
      if (S > 0) {
#pragma unroll
        for (int i = 0; i < SX; ++i) {
#pragma unroll
          for (int k = 0; k < SX; ++k) {
            const int hh = max(0, min(cp * SX + i - w.ph, w.h - 1)), ww = max(0, min(cq * SX + k - w.pw, w.w - 1));
            xraw[i][k] = load_raw<T, V>(x + ((static_cast<std::int64_t>(n) * w.h + hh) * w.w + ww) * g.c + grp * V);
          }
        }
      }
      float fs[V], fq[V];
#pragma unroll
      for (int j = 0; j < V; ++j) fs[j] = fq[j] = 0.0f;
      const int sh = S > 0 ? S : w.sh, sw = S > 0 ? S : w.sw;
#pragma unroll
      for (int i = 0; i < sh; ++i) {
        const int ah = cp * sh + i, hh = ah - w.ph;
        if (hh < 0 || hh >= w.h) continue;
#pragma unroll
        for (int k = 0; k < sw; ++k) {
          const int aw = cq * sw + k, ww = aw - w.pw;
          if (ww < 0 || ww >= w.w) continue;
          const std::int64_t o = ((static_cast<std::int64_t>(n) * w.h + hh) * w.w + ww) * g.c + grp * V;
          float xv[V], gv[V];
          if (S > 0) {
            widen<T, V>(xraw[S > 0 ? i : 0][S > 0 ? k : 0], xv);
          } else {
            load<T, V>(x + o, xv);
          }
#pragma unroll
          for (int j = 0; j < V; ++j) gv[j] = 0.0f;
#pragma unroll
          for (int a = 0; a < W; ++a) {
#pragma unroll
            for (int b = 0; b < W; ++b) {
              const int th = ah - (cp - a) * sh, tw = aw - (cq - b) * sw;
              if (!ok[a][b] || th >= w.kh || tw >= w.kw) continue;
              const int t = th * w.kw + tw;
              float d[V];
              widen<T, V>(draw[a][b], d);
              const signed char* code = reinterpret_cast<const signed char*>(&mraw[a][b]);
#pragma unroll
              for (int j = 0; j < V; ++j) {
                if (w.overlap) {
                  gv[j] = gv[j] + d[j] * (code[j] == t ? 1.0f : 0.0f);  // the CPU's dy * (code == t)
                } else if (code[j] == t) {
                  gv[j] = d[j];
                }
              }
            }
          }
#pragma unroll
          for (int j = 0; j < V; ++j) {
            gv[j] = kern::to_f(kern::from_f<T>(gv[j])) * relu_passed<T>(affine(xv[j], p.mu[j], p.a[j], p.b[j]));
          }
          if (PASS == 0) {
            add_terms<V>(p, xv, gv, true, fs, fq);
          } else {
            apply(p, xv, gv);
            store<T, V>(dx + o, gv);
          }
        }
      }
      if (PASS == 0) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          ds[j] += static_cast<double>(fs[j]);
          dq[j] += static_cast<double>(fq[j]);
        }
      }
    }
  }
  if (PASS == 0) tile_sums<V>(ds, dq, g, part);
}

std::string describe(const char* op, const Geo& g, const Win& w) {
  return std::string(op) + " " + std::to_string(w.kh) + "x" + std::to_string(w.kw) + "/" + std::to_string(w.sh) +
         ", vec" + std::to_string(g.v) + ", " + std::to_string(g.chunks) + "x" + std::to_string(g.tiles) +
         " blocks of " + std::to_string(g.gx) + "x" + std::to_string(g.lanes);
}

}  // namespace

std::unique_ptr<Op> bn_maxpool_fwd(Context&, const BnMaxpoolFwdArgs& args) {
  const std::int64_t m = args.m;
  const int c = static_cast<int>(args.c);
  const Win w = win_of(args);
  const double mom = args.momentum, eps = args.eps;
  const int v = vector_width(args.x.dt, c, {args.x, args.y, args.mask});
  const Geo gs = geometry(m, c, v);  // over the input rows: the statistics
  const Geo gp = geometry(static_cast<std::int64_t>(w.n) * w.p * w.q, c, v);  // over the pooled rows
  const void* x = args.x.ptr;
  void* y = args.y.ptr;
  auto* mask = static_cast<signed char*>(args.mask.ptr);
  float *gamma = fp32(args.gamma), *beta = fp32(args.beta), *mean_in = fp32(args.mean_in), *var_in = fp32(args.var_in);
  float *mean_out = fp32(args.mean_out), *var_out = fp32(args.var_out), *smean = fp32(args.saved_mean),
        *sinv = fp32(args.saved_inv_std);
  const Partials pt = partials(gs);
  auto scratch = pt.buf;
  double* part = pt.part;
  float* coef = pt.coef;
  return fn_op([=](cudaStream_t s) {
    (void)scratch;
    dispatch(args, v, [&](auto tag, auto vc) {
      using T = typename decltype(tag)::type;
      constexpr int V = decltype(vc)::value;
      const T* xp = static_cast<const T*>(x);
      stats_kernel<T, V><<<dim3(gs.chunks, gs.tiles), dim3(gs.gx, gs.lanes), 0, s>>>(xp, gs, part);
      stats_finish_kernel<T><<<finish_blocks(c), finish_block(), 0, s>>>(xp, part, gs, gamma, beta, mean_in, var_in, mean_out,
                                                               var_out, smean, sinv, coef, mom, eps);
      const dim3 grid(gp.chunks, gp.tiles), block(gp.gx, gp.lanes);
      T* yp = static_cast<T*>(y);
      if (w.kh == 2 && w.kw == 2) {  // VGG's 2x2
        pool_apply_kernel<T, V, 2><<<grid, block, 0, s>>>(xp, yp, mask, coef, gp, w);
      } else if (w.kh == 3 && w.kw == 3) {  // ResNet's 3x3
        pool_apply_kernel<T, V, 3><<<grid, block, 0, s>>>(xp, yp, mask, coef, gp, w);
      } else {
        pool_apply_kernel<T, V, 0><<<grid, block, 0, s>>>(xp, yp, mask, coef, gp, w);
      }
    });
    check_launch("bn_maxpool_fwd");
  }, describe("bn_maxpool_fwd", gp, w));
}

std::unique_ptr<Op> bn_maxpool_bwd(Context&, const BnMaxpoolBwdArgs& args) {
  const std::int64_t m = args.m;
  const int c = static_cast<int>(args.c);
  const Win w = win_of(args);
  const int v = vector_width(args.x.dt, c, {args.x, args.dy, args.dx, args.mask});
  // windows that tile the input exactly: walk the windows; windows of at most two per input row and column
  // (k <= 2s): walk the cells; otherwise every input row finds its windows
  const bool by_window = w.disjoint && w.h == w.p * w.kh && w.w == w.q * w.kw;
  const int wh = (w.kh + w.sh - 1) / w.sh, wwn = (w.kw + w.sw - 1) / w.sw;
  const int cell_w = by_window ? 0 : std::max(wh, wwn) <= 1 ? 1 : std::max(wh, wwn) <= 2 ? 2 : 0;
  const Cells cl{(w.h + w.ph + w.sh - 1) / w.sh, (w.w + w.pw + w.sw - 1) / w.sw};
  const std::int64_t cells = static_cast<std::int64_t>(w.n) * cl.cp * cl.cq;
  if (cell_w && cells >= (1LL << 31)) bad(args, "more than 2^31 - 1 pooling cells");
  const Geo g = by_window ? geometry(static_cast<std::int64_t>(w.n) * w.p * w.q, c, v)
                : cell_w  ? geometry(cells, c, v)
                          : geometry(m, c, v);
  Geo gm = g;
  gm.m = m;  // the BN statistics are over the input rows whatever the walk
  const void* x = args.x.ptr;
  const void* dy = args.dy.ptr;
  const auto* mask = static_cast<const signed char*>(args.mask.ptr);
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
    dispatch(args, v, [&](auto tag, auto vc) {
      using T = typename decltype(tag)::type;
      constexpr int V = decltype(vc)::value;
      const T* xp = static_cast<const T*>(x);
      const T* dyp = static_cast<const T*>(dy);
      auto cells_pass = [&](auto pc, T* dxp, const float* cf, double* pt) {
        constexpr int PASS = decltype(pc)::value;
        if (cell_w == 2 && w.sh == 2 && w.sw == 2) {  // ResNet's 3x3/2
          pool_bwd_cell_kernel<T, V, 2, 2, PASS><<<grid, block, 0, s>>>(xp, dyp, mask, dxp, gamma, beta, smean,
                                                                        sinv, cf, g, w, cl, pt);
        } else if (cell_w == 2) {
          pool_bwd_cell_kernel<T, V, 2, 0, PASS><<<grid, block, 0, s>>>(xp, dyp, mask, dxp, gamma, beta, smean,
                                                                        sinv, cf, g, w, cl, pt);
        } else {
          pool_bwd_cell_kernel<T, V, 1, 0, PASS><<<grid, block, 0, s>>>(xp, dyp, mask, dxp, gamma, beta, smean,
                                                                        sinv, cf, g, w, cl, pt);
        }
      };
      if (by_window) {
        pool_bwd_window_kernel<T, V, 0><<<grid, block, 0, s>>>(xp, dyp, mask, nullptr, gamma, beta, smean, sinv,
                                                               nullptr, g, w, part);
      } else if (cell_w) {
        cells_pass(std::integral_constant<int, 0>{}, nullptr, nullptr, part);
      } else {
        pool_bwd_reduce_kernel<T, V><<<grid, block, 0, s>>>(xp, dyp, mask, gamma, beta, smean, sinv, g, w, part);
      }
      bwd_finish_kernel<<<finish_blocks(c), finish_block(), 0, s>>>(part, gm, gamma, sinv, dgamma, dbeta, coef);
      if (by_window) {
        pool_bwd_window_kernel<T, V, 1><<<grid, block, 0, s>>>(xp, dyp, mask, static_cast<T*>(dx), gamma, beta,
                                                               smean, sinv, coef, g, w, nullptr);
      } else if (cell_w) {
        cells_pass(std::integral_constant<int, 1>{}, static_cast<T*>(dx), coef, nullptr);
      } else {
        pool_bwd_apply_kernel<T, V><<<grid, block, 0, s>>>(xp, dyp, mask, static_cast<T*>(dx), gamma, beta, smean,
                                                           sinv, coef, g, w);
      }
    });
    check_launch("bn_maxpool_bwd");
  }, describe(by_window ? "bn_maxpool_bwd by window" : cell_w ? "bn_maxpool_bwd by cell" : "bn_maxpool_bwd", g, w));
}

}  // namespace tr::native
