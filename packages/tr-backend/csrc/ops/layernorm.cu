// Layer norm (tr/backend/cpu/ops/layernorm.py): each of the N*H*W rows of x normalised over its C values.
//
// Row kernels (ln_fwd, and ln_bwd's dx): a warp per row when C <= kWarpMaxC, else a block per row; each thread
// reads its share of the row as 16-byte vectors (8 FP16/BF16 or 4 FP32 values) when C and the pointers allow it,
// else one value at a time, and re-reads the row (from L1) for each pass instead of holding it in registers.
// The row sums are float64 per thread, then a fixed xor-butterfly over the warp (and, for a block, the warps
// added in warp order): every thread ends with the same sum, and every run with the same bytes. The float32
// expressions are the CPU backend's, operation for operation (the op files are built with --fmad=false):
//   forward   mean = s1 / C, var = sum((x - mean)^2) / C (float64, from the float64 mean),
//             rstd = 1 / sqrt(var + eps); y = (((x - mu) * r) * gamma) + beta with mu, r the float32 roundings
//   backward  xhat = (x - mu) * r, g = dy * gamma, t1 = float(sum(g) / C), t2 = float(sum(g * xhat) / C),
//             dx = ((g - t1) - xhat * t2) * r
// so the two backends differ only by the order of the float64 sums.
//
// The residual join fused in (tr.graph.passes.fuse_add_norm): ln_fwd with z normalises the row x + z, added in
// float and rounded to T as add_fwd rounds it (the CPU's order too). The first pass writes it to sum when given and
// the later passes re-read it from there; each thread reads and writes only its own elements of the row, in every
// pass, so sum may be x or z (the catalogue's in-place pairs) and needs no barrier. Without sum (inference, nothing
// else reads it) each pass recomputes the rounded x + z. ln_bwd with dx2 rounds dx to T and adds dx2 in float,
// accumulate's operations, as it stores dx (which may be dx2: each element is read before its thread writes it).
//
// dgamma = sum over rows of dy * xhat and dbeta = sum over rows of dy are column sums: batch norm's chunked
// reduction (bn_kernels.cuh): a block holds a tile of channels and one chunk of rows, each thread adds its rows
// in float over four rows and then in float64, a fixed tree over the block's lanes writes the chunk's partial,
// and a second kernel adds each channel's chunks in a fixed order. No atomics: the same bytes on every run.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>

#include "cuda/context.hpp"
#include "ops/args/layernorm.hpp"
#include "ops/bn_kernels.cuh"

namespace tr::native {

namespace {

using bnk::Geo;
using bnk::kBlock;
using bnk::kUnroll;
using bnk::RawOf;

constexpr int kWarpMaxC = 1024;  // up to this C a warp takes a row; wider rows take a block of kBlock threads
constexpr std::int64_t kMaxRowBlocks = 1 << 20;  // grid-stride beyond this many blocks

// The sum of v over the TPR threads of one row, the same value in each of them. TPR = 32: the row is one warp
// (the butterfly adds a + b and b + a: equal). TPR = kBlock: the warps' sums are then added in warp order.
template <int TPR>
__device__ __forceinline__ double row_sum(double v, double* shared) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (TPR == 32) {
    return v;
  } else {
    static_assert(TPR == kBlock, "a row is a warp or the whole block");
    if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = 0.0;
#pragma unroll
    for (int w = 0; w < TPR / 32; ++w) s += shared[w];
    __syncthreads();  // shared is reused by the next sum
    return s;
  }
}

template <int V>
__device__ __forceinline__ void load_fp32(const float* p, float (&out)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = p[j];
}

// Rows row0, row0 + stride, ...: every thread of a row's group runs the same iterations (a block-wide row
// synchronises inside row_sum, so its whole block does).
#define TR_LN_ROWS(row)                                                                                       \
  for (std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (kBlock / TPR) + threadIdx.x / TPR; \
       row < rows; row += static_cast<std::int64_t>(gridDim.x) * (kBlock / TPR))

// Join: the row is x + z (rounded to T). xs: where that row is kept (null: recomputed in every pass). x, z and xs
// are not __restrict__: xs may be x or z.
template <class T, int V, bool Join>
struct RowIn {
  static constexpr bool kJoin = Join;
  const T* x;
  const T* z;
  T* xs;

  // The row's values at offset off (a join's first pass also stores them to xs).
  __device__ __forceinline__ void get(std::int64_t off, bool first, float (&v)[V]) const {
    if constexpr (!Join) {
      bnk::load<T, V>(x + off, v);
    } else if (xs != nullptr && !first) {
      bnk::load<T, V>(xs + off, v);
    } else {
      float w[V];
      bnk::load<T, V>(x + off, v);
      bnk::load<T, V>(z + off, w);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = kern::to_f(kern::from_f<T>(v[j] + w[j]));  // add_fwd's value
      if (first && xs != nullptr) bnk::store<T, V>(xs + off, v);
    }
  }
};

template <class T, int V, int TPR, bool Join>
__global__ void __launch_bounds__(kBlock) ln_fwd_kernel(RowIn<T, V, Join> in, const float* __restrict__ gamma,
                                                        const float* __restrict__ beta, T* __restrict__ y,
                                                        float* smean, float* srstd, std::int64_t rows, int c,
                                                        double eps) {
  __shared__ double red[kBlock / 32];
  const int lane = threadIdx.x % TPR;
  const int nv = c / V;
  TR_LN_ROWS(row) {
    const std::int64_t base = row * c;
    double s = 0.0;
    for (int k = lane; k < nv; k += TPR) {
      float v[V];
      in.get(base + k * V, true, v);
#pragma unroll
      for (int j = 0; j < V; ++j) s += static_cast<double>(v[j]);
    }
    const double mean = row_sum<TPR>(s, red) / static_cast<double>(c);
    double q = 0.0;
    for (int k = lane; k < nv; k += TPR) {
      float v[V];
      in.get(base + k * V, false, v);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const double d = static_cast<double>(v[j]) - mean;
        q += d * d;
      }
    }
    const double var = row_sum<TPR>(q, red) / static_cast<double>(c);
    const float mu = static_cast<float>(mean);
    const float r = static_cast<float>(1.0 / sqrt(var + eps));
    if (smean != nullptr && lane == 0) {
      smean[row] = mu;
      srstd[row] = r;
    }
    T* yr = y + base;
    for (int k = lane; k < nv; k += TPR) {
      float v[V], gm[V], bt[V];
      in.get(base + k * V, false, v);
      load_fp32<V>(gamma + k * V, gm);
      load_fp32<V>(beta + k * V, bt);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = (((v[j] - mu) * r) * gm[j]) + bt[j];
      bnk::store<T, V>(yr + k * V, v);
    }
  }
}

// dx of each row (the per-row half of ln_bwd).
// dx2 (Add): added to the rounded dx; it may be dx itself, so neither is __restrict__.
template <class T, int V, int TPR, bool Add>
__global__ void __launch_bounds__(kBlock) ln_dx_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                                       const float* __restrict__ gamma, const float* smean,
                                                       const float* srstd, const T* dx2, T* dx, std::int64_t rows,
                                                       int c) {
  __shared__ double red[kBlock / 32];
  const int lane = threadIdx.x % TPR;
  const int nv = c / V;
  TR_LN_ROWS(row) {
    const T* xr = x + row * c;
    const T* dr = dy + row * c;
    const float mu = smean[row], r = srstd[row];
    double a = 0.0, b = 0.0;
    for (int k = lane; k < nv; k += TPR) {
      float xv[V], dv[V], gm[V];
      bnk::load<T, V>(xr + k * V, xv);
      bnk::load<T, V>(dr + k * V, dv);
      load_fp32<V>(gamma + k * V, gm);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xhat = (xv[j] - mu) * r;
        const float g = dv[j] * gm[j];
        a += static_cast<double>(g);
        b += static_cast<double>(g * xhat);
      }
    }
    const float t1 = static_cast<float>(row_sum<TPR>(a, red) / static_cast<double>(c));
    const float t2 = static_cast<float>(row_sum<TPR>(b, red) / static_cast<double>(c));
    T* out = dx + row * c;
    for (int k = lane; k < nv; k += TPR) {
      float xv[V], dv[V], gm[V], d2[V];
      bnk::load<T, V>(xr + k * V, xv);
      bnk::load<T, V>(dr + k * V, dv);
      load_fp32<V>(gamma + k * V, gm);
      if constexpr (Add) bnk::load<T, V>(dx2 + row * c + k * V, d2);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xhat = (xv[j] - mu) * r;
        const float g = dv[j] * gm[j];
        xv[j] = ((g - t1) - xhat * t2) * r;
        if constexpr (Add) xv[j] = kern::to_f(kern::from_f<T>(xv[j])) + d2[j];  // accumulate on the stored dx
      }
      bnk::store<T, V>(out + k * V, xv);
    }
  }
}

#undef TR_LN_ROWS

// dbeta and dgamma, pass 1: per chunk of rows, the sums of dy and dy * xhat of a tile of channels.
template <class T, int V>
__global__ void __launch_bounds__(kBlock) ln_param_grad_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                                               const float* __restrict__ smean,
                                                               const float* __restrict__ srstd, Geo g,
                                                               double* __restrict__ part) {
  const int grp = blockIdx.y * g.gx + threadIdx.x;
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * g.rows, hi = min(g.m, lo + g.rows);
  double ds[V], dq[V];
#pragma unroll
  for (int j = 0; j < V; ++j) ds[j] = dq[j] = 0.0;
  if (grp < g.groups) {
    RawOf<T, V> xraw[kUnroll], draw[kUnroll];
    float mu[kUnroll], rs[kUnroll];
    bnk::sum_rows<V, kUnroll>(
        g, lo, hi, ds, dq,
        [&](std::int64_t rr, int u) {
          xraw[u] = bnk::load_raw<T, V>(x + rr * g.c + grp * V);
          draw[u] = bnk::load_raw<T, V>(dy + rr * g.c + grp * V);
          mu[u] = smean[rr];
          rs[u] = srstd[rr];
        },
        [&](std::int64_t, bool valid, int u, float (&fs)[V], float (&fq)[V]) {
          float xv[V], dv[V];
          bnk::widen<T, V>(xraw[u], xv);
          bnk::widen<T, V>(draw[u], dv);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float xhat = (xv[j] - mu[u]) * rs[u];
            fs[j] += valid ? dv[j] : 0.0f;
            fq[j] += valid ? dv[j] * xhat : 0.0f;
          }
        });
  }
  bnk::tile_sums<V>(ds, dq, g, part);  // every thread: it synchronises the block
}

// Pass 2: each channel's chunks added in a fixed order.
__global__ void ln_param_finish_kernel(const double* __restrict__ part, Geo g, float* dgamma, float* dbeta) {
  int ch;
  double s1, s2;
  if (!bnk::chunk_sums(part, g, ch, s1, s2)) return;
  dbeta[ch] = static_cast<float>(s1);
  dgamma[ch] = static_cast<float>(s2);
}

struct Sizes {
  std::int64_t rows;
  int c;
};

// A tensor field and its name, for the dtype checks' messages.
struct Named {
  const char* name;
  Dev t;
};

// rows and c, checked, and the dtypes: x a float type, the given features x's, the given fp32 tensors FP32.
template <class A>
Sizes sizes(const A& args, std::initializer_list<Named> features, std::initializer_list<Named> fp32) {
  const std::int64_t rows = args.rows, c = args.c;
  if (rows < 1 || c < 1) {
    bad(args, "sizes rows=" + std::to_string(rows) + " c=" + std::to_string(c) + " must be positive");
  }
  if (c > INT32_MAX / 2) bad(args, "c=" + std::to_string(c) + " must fit in 31 bits");
  const DT xdt = args.x.dt;
  kern::dispatch_float(xdt, args, "x", [](auto) {});
  for (const Named& f : features) {
    if (f.t && f.t.dt != xdt) {
      bad(args, std::string(f.name) + " is " + dtype_name(f.t.dt) + " but x is " + dtype_name(xdt));
    }
  }
  for (const Named& f : fp32) {
    if (f.t && f.t.dt != DT::F32) bad(args, std::string(f.name) + " must be FP32, got " + dtype_name(f.t.dt));
  }
  return {rows, static_cast<int>(c)};
}

unsigned row_blocks(std::int64_t rows, int c) {
  const std::int64_t per_block = c <= kWarpMaxC ? kBlock / 32 : 1;
  return static_cast<unsigned>(std::min<std::int64_t>((rows + per_block - 1) / per_block, kMaxRowBlocks));
}

std::string row_info(int v, int c) {
  return std::string(c <= kWarpMaxC ? "warp" : "block") + " per row, vec" + std::to_string(v);
}

}  // namespace

std::unique_ptr<Op> ln_fwd(Context&, const LnFwdArgs& args) {
  const Sizes sz = sizes(args, {{"y", args.y}, {"z", args.z}, {"sum", args.sum}},
                         {{"gamma", args.gamma}, {"beta", args.beta}, {"saved_mean", args.saved_mean},
                          {"saved_rstd", args.saved_rstd}});
  const bool train = static_cast<bool>(args.saved_mean);
  if (train != static_cast<bool>(args.saved_rstd)) {
    bad(args, "saved_mean and saved_rstd go together (training) or not at all");
  }
  const bool join = static_cast<bool>(args.z);
  if (args.sum && !join) bad(args, "sum is given without z");
  const double eps = args.eps;
  const int v = bnk::vector_width(args.x.dt, sz.c, {args.x, args.y, args.z, args.sum});
  const void* x = args.x.ptr;
  const void* z = args.z.ptr;  // null: no join
  void* xs = args.sum.ptr;     // null: the join's row is not kept
  void* y = args.y.ptr;
  const float* gamma = bnk::fp32(args.gamma);
  const float* beta = bnk::fp32(args.beta);
  float* smean = bnk::fp32(args.saved_mean);  // null in inference
  float* srstd = bnk::fp32(args.saved_rstd);
  const std::int64_t rows = sz.rows;
  const int c = sz.c;
  const unsigned blocks = row_blocks(rows, c);
  return fn_op(
      [=](cudaStream_t s) {
        bnk::dispatch(args, v, [&](auto tag, auto vc) {
          using T = typename decltype(tag)::type;
          constexpr int V = decltype(vc)::value;
          auto launch = [&](auto in) {
            constexpr bool J = decltype(in)::kJoin;
            T* yp = static_cast<T*>(y);
            if (c <= kWarpMaxC) {
              ln_fwd_kernel<T, V, 32, J><<<blocks, kBlock, 0, s>>>(in, gamma, beta, yp, smean, srstd, rows, c, eps);
            } else {
              ln_fwd_kernel<T, V, kBlock, J><<<blocks, kBlock, 0, s>>>(in, gamma, beta, yp, smean, srstd, rows, c, eps);
            }
          };
          const T* xp = static_cast<const T*>(x);
          if (join) {
            launch(RowIn<T, V, true>{xp, static_cast<const T*>(z), static_cast<T*>(xs)});
          } else {
            launch(RowIn<T, V, false>{xp, nullptr, nullptr});
          }
        });
        check_launch("ln_fwd");
      },
      row_info(v, c) + (join ? (xs != nullptr ? ", x + z kept in sum" : ", x + z recomputed") : "") +
          (train ? ", saves statistics" : ""));
}

std::unique_ptr<Op> ln_bwd(Context&, const LnBwdArgs& args) {
  const Sizes sz = sizes(args, {{"dy", args.dy}, {"dx", args.dx}, {"dx2", args.dx2}},
                         {{"gamma", args.gamma}, {"saved_mean", args.saved_mean}, {"saved_rstd", args.saved_rstd},
                          {"dgamma", args.dgamma}, {"dbeta", args.dbeta}});
  if (args.dx2 && !args.dx) bad(args, "dx2 is given without dx");
  const int v = bnk::vector_width(args.x.dt, sz.c, {args.x, args.dy, args.dx, args.dx2});
  const void* x = args.x.ptr;
  const void* dy = args.dy.ptr;
  void* dx = args.dx.ptr;  // null: a first layer, no dx
  const void* dx2 = args.dx2.ptr;  // null: nothing to add
  const float *gamma = bnk::fp32(args.gamma), *smean = bnk::fp32(args.saved_mean), *srstd = bnk::fp32(args.saved_rstd);
  float *dgamma = bnk::fp32(args.dgamma), *dbeta = bnk::fp32(args.dbeta);
  const std::int64_t rows = sz.rows;
  const int c = sz.c;
  const Geo g = bnk::geometry(rows, c, v);
  if (g.tiles > 65535) bad(args, "c=" + std::to_string(c) + " needs more than 65535 channel tiles");
  // the chunk partials (sums of dy, then of dy * xhat) live as long as the op (its graph)
  auto part = std::make_shared<DeviceBuffer>(2 * static_cast<std::size_t>(g.chunks) * c * sizeof(double));
  const dim3 grid(static_cast<unsigned>(g.chunks), static_cast<unsigned>(g.tiles));
  const dim3 block(static_cast<unsigned>(g.gx), static_cast<unsigned>(g.lanes));
  const unsigned blocks = row_blocks(rows, c);
  std::string info = (dx != nullptr ? row_info(v, c) + (dx2 != nullptr ? " for dx + dx2, " : " for dx, ")
                                     : std::string("no dx, ")) +
                     std::to_string(g.chunks) + "x" + std::to_string(g.tiles) + " blocks of " + std::to_string(g.gx) +
                     "x" + std::to_string(g.lanes) + " for dgamma, dbeta";
  return fn_op(
      [=](cudaStream_t s) {
        double* partials = part->as<double>();
        bnk::dispatch(args, v, [&](auto tag, auto vc) {
          using T = typename decltype(tag)::type;
          constexpr int V = decltype(vc)::value;
          const T* xp = static_cast<const T*>(x);
          const T* dyp = static_cast<const T*>(dy);
          ln_param_grad_kernel<T, V><<<grid, block, 0, s>>>(xp, dyp, smean, srstd, g, partials);
          if (dx == nullptr) return;
          T* dxp = static_cast<T*>(dx);
          const T* d2 = static_cast<const T*>(dx2);
          auto launch = [&](auto add) {
            constexpr bool A = decltype(add)::value;
            if (c <= kWarpMaxC) {
              ln_dx_kernel<T, V, 32, A><<<blocks, kBlock, 0, s>>>(xp, dyp, gamma, smean, srstd, d2, dxp, rows, c);
            } else {
              ln_dx_kernel<T, V, kBlock, A><<<blocks, kBlock, 0, s>>>(xp, dyp, gamma, smean, srstd, d2, dxp, rows, c);
            }
          };
          if (d2 != nullptr) {
            launch(std::true_type{});
          } else {
            launch(std::false_type{});
          }
        });
        ln_param_finish_kernel<<<bnk::finish_blocks(c), bnk::finish_block(), 0, s>>>(partials, g, dgamma, dbeta);
        check_launch("ln_bwd");
      },
      std::move(info));
}

}  // namespace tr::native
