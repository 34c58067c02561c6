// Batch normalisation over N*H*W per channel (tr/backend/cpu/ops/bn.py) with the relu and the residual add
// that follow it fused in: training forward y = act(bn(x) + z), backward (the relu mask read from y or
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
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

constexpr int kBlock = 256;
constexpr int kTargetBlocks = 1024;  // chunks x tiles: ~8 resident blocks per SM on a 132-SM H100/H200
constexpr int kUnroll = 4;           // rows a thread sums in float before adding them to its float64 sums

enum Mask : int { NO_MASK = 0, MASK_FROM_X = 1, MASK_FROM_Y = 2 };

struct Geo {
  std::int64_t m;     // rows
  std::int64_t rows;  // rows per chunk
  int c, v;           // channels, vector width
  int groups;         // c / v
  int gx, lanes;      // block: vector groups across, rows in flight
  int tiles, chunks;  // grid: (chunks, tiles)
};

Geo geometry(std::int64_t m, int c, int v) {
  Geo g{};
  g.m = m;
  g.c = c;
  g.v = v;
  g.groups = c / v;
  g.gx = std::min(g.groups, 32);
  g.lanes = kBlock / g.gx;
  g.tiles = (g.groups + g.gx - 1) / g.gx;
  const std::int64_t want = std::max<std::int64_t>(1, kTargetBlocks / g.tiles);
  std::int64_t rows = std::max<std::int64_t>((m + want - 1) / want, static_cast<std::int64_t>(kUnroll) * g.lanes);
  g.rows = rows;
  g.chunks = static_cast<int>((m + rows - 1) / rows);
  return g;
}

// 16 bytes (or one element) at a time.
template <int BYTES>
struct Raw;
template <>
struct Raw<16> {
  using type = uint4;
};
template <>
struct Raw<4> {
  using type = unsigned;
};
template <>
struct Raw<2> {
  using type = unsigned short;
};

template <class T, int V>
__device__ __forceinline__ void load(const T* p, float (&out)[V]) {
  using R = typename Raw<sizeof(T) * V>::type;
  const R r = *reinterpret_cast<const R*>(p);
  const T* e = reinterpret_cast<const T*>(&r);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = kern::to_f(e[j]);
}

template <class T, int V>
__device__ __forceinline__ void store(T* p, const float (&in)[V]) {
  using R = typename Raw<sizeof(T) * V>::type;
  R r;
  T* e = reinterpret_cast<T*>(&r);
#pragma unroll
  for (int j = 0; j < V; ++j) e[j] = kern::from_f<T>(in[j]);
  *reinterpret_cast<R*>(p) = r;
}

template <int V>
__device__ __forceinline__ void load_params(const float* p, int ch, float (&out)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = p[ch + j];
}

// The forward's pre-activation, in the CPU backend's order of float operations ((x - mean) * a + b; with
// --fmad=false nothing is contracted, so the backward recomputes it to the bit).
__device__ __forceinline__ float affine(float x, float mu, float a, float b) { return (x - mu) * a + b; }

// relu's mask as the forward left it in y: the pre-activation rounded to T, then > 0.
template <class T>
__device__ __forceinline__ float relu_passed(float pre) {
  return kern::to_f(kern::from_f<T>(pre)) > 0.0f ? 1.0f : 0.0f;
}

// The block's per-lane float64 sums of its tile -> part[chunk * c + ch] and part[(chunks + chunk) * c + ch],
// each channel's lanes added in lane order.
template <int V>
__device__ void tile_sums(const double (&s1)[V], const double (&s2)[V], const Geo& g, double* part) {
  __shared__ double sh[2][kBlock * V];
  const int width = g.gx * V;  // channels in the tile
#pragma unroll
  for (int j = 0; j < V; ++j) {
    sh[0][threadIdx.y * width + threadIdx.x * V + j] = s1[j];
    sh[1][threadIdx.y * width + threadIdx.x * V + j] = s2[j];
  }
  __syncthreads();
  const int t = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
  for (int cl = t; cl < width; cl += nt) {
    const int ch = blockIdx.y * width + cl;
    if (ch >= g.c) break;
    double a = 0.0, b = 0.0;
    for (int l = 0; l < g.lanes; ++l) {
      a += sh[0][l * width + cl];
      b += sh[1][l * width + cl];
    }
    part[static_cast<std::int64_t>(blockIdx.x) * g.c + ch] = a;
    part[(static_cast<std::int64_t>(g.chunks) + blockIdx.x) * g.c + ch] = b;
  }
}

// Forward pass 1: per chunk, the sums of d = x - K and d^2.
template <class T, int V>
__global__ void __launch_bounds__(kBlock) stats_kernel(const T* __restrict__ x, Geo g, double* __restrict__ part) {
  const int grp = blockIdx.y * g.gx + threadIdx.x;
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * g.rows, hi = min(g.m, lo + g.rows);
  double ds[V], dq[V];
#pragma unroll
  for (int j = 0; j < V; ++j) ds[j] = dq[j] = 0.0;
  if (grp < g.groups) {
    float k[V];
    load<T, V>(x + grp * V, k);
    for (std::int64_t r = lo + threadIdx.y; r < hi; r += kUnroll * g.lanes) {
      float fs[V], fq[V];
#pragma unroll
      for (int j = 0; j < V; ++j) fs[j] = fq[j] = 0.0f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int64_t rr = r + static_cast<std::int64_t>(u) * g.lanes;
        if (rr < hi) {
          float v[V];
          load<T, V>(x + rr * g.c + grp * V, v);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float d = v[j] - k[j];
            fs[j] += d;
            fq[j] += d * d;
          }
        }
      }
#pragma unroll
      for (int j = 0; j < V; ++j) {
        ds[j] += static_cast<double>(fs[j]);
        dq[j] += static_cast<double>(fq[j]);
      }
    }
  }
  tile_sums<V>(ds, dq, g, part);
}

// Sums the chunks of channel `ch` (one warp per channel, a fixed shuffle tree): valid in lane 0.
__device__ __forceinline__ void chunk_sums(const double* part, const Geo& g, int ch, double& a, double& b) {
  const int lane = threadIdx.x & 31;
  a = 0.0;
  b = 0.0;
  for (int k = lane; k < g.chunks; k += 32) {
    a += part[static_cast<std::int64_t>(k) * g.c + ch];
    b += part[(static_cast<std::int64_t>(g.chunks) + k) * g.c + ch];
  }
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
}

// Forward pass 2: mean and variance, running and saved statistics, and coef = (mean, gamma * inv, beta).
template <class T>
__global__ void stats_finish_kernel(const T* __restrict__ x, const double* __restrict__ part, Geo g,
                                    const float* gamma, const float* beta, const float* mean_in, const float* var_in,
                                    float* mean_out, float* var_out, float* saved_mean, float* saved_inv, float* coef,
                                    double mom, double eps) {
  const int ch = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  if (ch >= g.c) return;  // the whole warp
  double s1, s2;
  chunk_sums(part, g, ch, s1, s2);
  if ((threadIdx.x & 31) != 0) return;
  const double inv_m = 1.0 / static_cast<double>(g.m);
  const double d1 = s1 * inv_m;
  const double mean = static_cast<double>(kern::to_f(x[ch])) + d1;
  const double var = fmax(0.0, s2 * inv_m - d1 * d1);
  const double unbias = g.m > 1 ? static_cast<double>(g.m) / static_cast<double>(g.m - 1) : 1.0;
  const float inv = static_cast<float>(1.0 / sqrt(var + eps));
  // numpy (NEP 50): (1 - m) * var_in is float32 arithmetic, the float64 batch term is added in float64
  const float keep = static_cast<float>(1.0 - mom);
  var_out[ch] = static_cast<float>(static_cast<double>(keep * var_in[ch]) + (mom * unbias) * var);
  mean_out[ch] = static_cast<float>(static_cast<double>(keep * mean_in[ch]) + mom * mean);
  const float mu = static_cast<float>(mean);
  saved_mean[ch] = mu;
  saved_inv[ch] = inv;
  coef[ch] = mu;
  coef[g.c + ch] = gamma[ch] * inv;
  coef[2 * g.c + ch] = beta[ch];
}

// y = act(affine(x) + z): the training forward (centered: (x - mean) * a + b) and inference (x * scale + bias).
template <class T, int V>
__global__ void __launch_bounds__(kBlock) apply_kernel(const T* __restrict__ x, const T* z, T* y, const float* mean,
                                                       const float* a, const float* b, Geo g, int relu) {
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
      if (relu) {
        p = kern::nan_max(p, 0.0f);
        q = kern::nan_max(q, 0.0f);
      }
      v0[j] = p;
      v1[j] = q;
    }
    store<T, V>(y + o0, v0);
    if (two) store<T, V>(y + o1, v1);
  }
}

// Per-thread constants of the backward: saved mean and inverse std, and for a mask recomputed from x the
// forward's a = gamma * inv and b = beta.
template <int V>
struct BwdParams {
  float mu[V], iv[V], a[V], b[V];
  __device__ void load_all(const float* gamma, const float* beta, const float* mean, const float* inv, int ch,
                           int mask) {
    load_params<V>(mean, ch, mu);
    load_params<V>(inv, ch, iv);
    if (mask == MASK_FROM_X) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        a[j] = gamma[ch + j] * iv[j];
        b[j] = beta[ch + j];
      }
    }
  }
};

// g = dy * relu'(.) for one vector (the multiply, not a select: a NaN gradient stays NaN, as on the CPU).
template <class T, int V>
__device__ __forceinline__ void masked_grad(const T* y, std::int64_t o, int mask, const float (&xv)[V],
                                            const BwdParams<V>& p, float (&gv)[V]) {
  if (mask == MASK_FROM_Y) {
    float yv[V];
    load<T, V>(y + o, yv);
#pragma unroll
    for (int j = 0; j < V; ++j) gv[j] = gv[j] * (yv[j] > 0.0f ? 1.0f : 0.0f);
  } else if (mask == MASK_FROM_X) {
#pragma unroll
    for (int j = 0; j < V; ++j) gv[j] = gv[j] * relu_passed<T>(affine(xv[j], p.mu[j], p.a[j], p.b[j]));
  }
}

// Backward pass 1: g (written to dz when asked), and per chunk the sums of g and g * xhat.
template <class T, int V>
__global__ void __launch_bounds__(kBlock) bwd_reduce_kernel(const T* __restrict__ x, const T* dy, const T* y, T* dz,
                                                            const float* gamma, const float* beta, const float* mean,
                                                            const float* inv, Geo g, int mask,
                                                            double* __restrict__ part) {
  const int grp = blockIdx.y * g.gx + threadIdx.x;
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * g.rows, hi = min(g.m, lo + g.rows);
  double ds[V], dq[V];
#pragma unroll
  for (int j = 0; j < V; ++j) ds[j] = dq[j] = 0.0;
  if (grp < g.groups) {
    BwdParams<V> p;
    p.load_all(gamma, beta, mean, inv, grp * V, mask);
    for (std::int64_t r = lo + threadIdx.y; r < hi; r += kUnroll * g.lanes) {
      float fs[V], fq[V];
#pragma unroll
      for (int j = 0; j < V; ++j) fs[j] = fq[j] = 0.0f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int64_t rr = r + static_cast<std::int64_t>(u) * g.lanes;
        if (rr < hi) {
          const std::int64_t o = rr * g.c + grp * V;
          float xv[V], gv[V];
          load<T, V>(x + o, xv);
          load<T, V>(dy + o, gv);
          masked_grad<T, V>(y, o, mask, xv, p, gv);
          if (dz != nullptr) store<T, V>(dz + o, gv);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float xhat = (xv[j] - p.mu[j]) * p.iv[j];
            fs[j] += gv[j];
            fq[j] += gv[j] * xhat;
          }
        }
      }
#pragma unroll
      for (int j = 0; j < V; ++j) {
        ds[j] += static_cast<double>(fs[j]);
        dq[j] += static_cast<double>(fq[j]);
      }
    }
  }
  tile_sums<V>(ds, dq, g, part);
}

// Backward pass 2: dbeta, dgamma, and coef = (t1, t2, k) of dx = ((g - xhat * t2) - t1) * k.
__global__ void bwd_finish_kernel(const double* __restrict__ part, Geo g, const float* gamma, const float* inv,
                                  float* dgamma, float* dbeta, float* coef) {
  const int ch = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  if (ch >= g.c) return;
  double s1, s2;
  chunk_sums(part, g, ch, s1, s2);
  if ((threadIdx.x & 31) != 0) return;
  dbeta[ch] = static_cast<float>(s1);
  dgamma[ch] = static_cast<float>(s2);
  const double inv_m = 1.0 / static_cast<double>(g.m);
  coef[ch] = static_cast<float>(s1 * inv_m);
  coef[g.c + ch] = static_cast<float>(s2 * inv_m);
  coef[2 * g.c + ch] = gamma[ch] * inv[ch];
}

// Backward pass 3: dx from g (read from dz, or dy masked again). dx may be x, dz may be dy.
template <class T, int V>
__global__ void __launch_bounds__(kBlock) bwd_apply_kernel(const T* x, const T* gsrc, const T* y, T* dx,
                                                           const float* gamma, const float* beta, const float* mean,
                                                           const float* inv, const float* coef, Geo g, int mask) {
  const int grp = blockIdx.y * g.gx + threadIdx.x;
  if (grp >= g.groups) return;
  BwdParams<V> p;
  p.load_all(gamma, beta, mean, inv, grp * V, mask);
  float t1[V], t2[V], kk[V];
  load_params<V>(coef, grp * V, t1);
  load_params<V>(coef + g.c, grp * V, t2);
  load_params<V>(coef + 2 * g.c, grp * V, kk);
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * g.rows, hi = min(g.m, lo + g.rows);
  for (std::int64_t r = lo + threadIdx.y; r < hi; r += g.lanes) {
    const std::int64_t o = r * g.c + grp * V;
    float xv[V], gv[V];
    load<T, V>(x + o, xv);
    load<T, V>(gsrc + o, gv);
    masked_grad<T, V>(y, o, mask, xv, p, gv);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float xhat = (xv[j] - p.mu[j]) * p.iv[j];
      gv[j] = ((gv[j] - xhat * t2[j]) - t1[j]) * kk[j];
    }
    store<T, V>(dx + o, gv);
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

// 16-byte vectors when every feature pointer is 16-byte aligned and the channels fill whole vectors.
int vector_width(const OpArgs& args, int c, std::initializer_list<const char*> names) {
  const int elem = dtype_size(args.dt("x"));
  const int v = 16 / elem;
  if (c % v != 0) return 1;
  for (const char* n : names) {
    if (args.has(n) && reinterpret_cast<std::uintptr_t>(args.ptr(n)) % 16 != 0) return 1;
  }
  return v;
}

// Calls fn(Tag<T>, integral_constant<V>) for x's float type and the chosen width.
template <class Fn>
void dispatch(const OpArgs& args, int v, Fn&& fn) {
  kern::dispatch_float(args.dt("x"), args, "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int W = 16 / static_cast<int>(sizeof(T));
    if (v == 1) {
      fn(tag, std::integral_constant<int, 1>{});
    } else {
      fn(tag, std::integral_constant<int, W>{});
    }
  });
}

const void* opt(const OpArgs& args, const char* name) { return args.has(name) ? args.ptr(name) : nullptr; }

unsigned warp_blocks(int c) { return static_cast<unsigned>((c + 7) / 8); }  // 8 warps of 256 threads

std::string describe(const char* op, const Geo& g, bool relu, bool res) {
  return std::string(op) + (relu ? " +relu" : "") + (res ? " +residual" : "") + ", vec" + std::to_string(g.v) + ", " +
         std::to_string(g.chunks) + "x" + std::to_string(g.tiles) + " blocks of " + std::to_string(g.gx) + "x" +
         std::to_string(g.lanes);
}

std::unique_ptr<Op> bn_fwd(Context&, const OpArgs& args) {
  const std::int64_t m = args.i("m");
  const int c = static_cast<int>(args.i("c"));
  const bool relu = args.i("relu") != 0, res = args.i("residual") != 0;
  const double mom = args.f("momentum"), eps = args.f("eps");
  const Geo g = geometry(m, c, vector_width(args, c, {"x", "y", "z"}));
  const void* x = args.ptr("x");
  const void* z = res ? args.ptr("z") : nullptr;
  void* y = args.ptr("y");
  auto P = [&](const char* n) { return static_cast<float*>(args.ptr(n)); };
  float *gamma = P("gamma"), *beta = P("beta"), *mean_in = P("mean_in"), *var_in = P("var_in");
  float *mean_out = P("mean_out"), *var_out = P("var_out"), *smean = P("saved_mean"), *sinv = P("saved_inv_std");
  auto scratch = std::make_shared<DeviceBuffer>(2 * static_cast<std::size_t>(g.chunks) * c * sizeof(double) +
                                                3 * static_cast<std::size_t>(c) * sizeof(float));
  double* part = scratch->as<double>();
  float* coef = reinterpret_cast<float*>(part + 2 * static_cast<std::int64_t>(g.chunks) * c);
  const dim3 grid(g.chunks, g.tiles), block(g.gx, g.lanes);
  return fn_op([=](cudaStream_t s) {
    (void)scratch;  // owned by the op
    dispatch(args, g.v, [&](auto tag, auto vc) {
      using T = typename decltype(tag)::type;
      constexpr int V = decltype(vc)::value;
      const T* xp = static_cast<const T*>(x);
      stats_kernel<T, V><<<grid, block, 0, s>>>(xp, g, part);
      stats_finish_kernel<T><<<warp_blocks(c), kBlock, 0, s>>>(xp, part, g, gamma, beta, mean_in, var_in, mean_out,
                                                               var_out, smean, sinv, coef, mom, eps);
      apply_kernel<T, V><<<grid, block, 0, s>>>(xp, static_cast<const T*>(z), static_cast<T*>(y), coef, coef + c,
                                                coef + 2 * c, g, relu);
    });
    check_launch("bn_fwd");
  }, describe("bn_fwd", g, relu, res));
}

std::unique_ptr<Op> bn_bwd(Context&, const OpArgs& args) {
  const std::int64_t m = args.i("m");
  const int c = static_cast<int>(args.i("c"));
  const int mask = static_cast<int>(args.i("mask"));
  if (mask < NO_MASK || mask > MASK_FROM_Y) args.bad("mask code " + std::to_string(mask) + " is out of range");
  const Geo g = geometry(m, c, vector_width(args, c, {"x", "dy", "dx", "y", "dz"}));
  const void* x = args.ptr("x");
  const void* dy = args.ptr("dy");
  const void* y = opt(args, "y");
  void* dz = const_cast<void*>(opt(args, "dz"));
  void* dx = args.ptr("dx");
  auto P = [&](const char* n) { return static_cast<float*>(const_cast<void*>(opt(args, n))); };
  float *gamma = P("gamma"), *beta = P("beta"), *smean = P("saved_mean"), *sinv = P("saved_inv_std");
  float *dgamma = P("dgamma"), *dbeta = P("dbeta");
  auto scratch = std::make_shared<DeviceBuffer>(2 * static_cast<std::size_t>(g.chunks) * c * sizeof(double) +
                                                3 * static_cast<std::size_t>(c) * sizeof(float));
  double* part = scratch->as<double>();
  float* coef = reinterpret_cast<float*>(part + 2 * static_cast<std::int64_t>(g.chunks) * c);
  const dim3 grid(g.chunks, g.tiles), block(g.gx, g.lanes);
  return fn_op([=](cudaStream_t s) {
    (void)scratch;
    dispatch(args, g.v, [&](auto tag, auto vc) {
      using T = typename decltype(tag)::type;
      constexpr int V = decltype(vc)::value;
      const T* xp = static_cast<const T*>(x);
      const T* yp = static_cast<const T*>(y);
      T* dzp = static_cast<T*>(dz);
      bwd_reduce_kernel<T, V><<<grid, block, 0, s>>>(xp, static_cast<const T*>(dy), yp, dzp, gamma, beta, smean,
                                                     sinv, g, mask, part);
      bwd_finish_kernel<<<warp_blocks(c), kBlock, 0, s>>>(part, g, gamma, sinv, dgamma, dbeta, coef);
      // with dz written, g is read back from it: already masked
      const T* gsrc = dzp != nullptr ? dzp : static_cast<const T*>(dy);
      bwd_apply_kernel<T, V><<<grid, block, 0, s>>>(xp, gsrc, yp, static_cast<T*>(dx), gamma, beta, smean, sinv,
                                                    coef, g, dzp != nullptr ? NO_MASK : mask);
    });
    check_launch("bn_bwd");
  }, describe("bn_bwd", g, mask != NO_MASK, dz != nullptr));
}

std::unique_ptr<Op> bn_inf(Context&, const OpArgs& args) {
  const std::int64_t m = args.i("m");
  const int c = static_cast<int>(args.i("c"));
  const bool relu = args.i("relu") != 0, res = args.i("residual") != 0;
  const Geo g = geometry(m, c, vector_width(args, c, {"x", "y", "z"}));
  const void* x = args.ptr("x");
  const void* z = res ? args.ptr("z") : nullptr;
  void* y = args.ptr("y");
  const float* scale = static_cast<const float*>(args.ptr("scale"));
  const float* bias = static_cast<const float*>(args.ptr("bias"));
  const dim3 grid(g.chunks, g.tiles), block(g.gx, g.lanes);
  return fn_op([=](cudaStream_t s) {
    dispatch(args, g.v, [&](auto tag, auto vc) {
      using T = typename decltype(tag)::type;
      constexpr int V = decltype(vc)::value;
      apply_kernel<T, V><<<grid, block, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(z),
                                                static_cast<T*>(y), nullptr, scale, bias, g, relu);
    });
    check_launch("bn_inf");
  }, describe("bn_inf", g, relu, res));
}

std::unique_ptr<Op> bn_update_eq(Context&, const OpArgs& args) {
  const int c = static_cast<int>(args.i("c"));
  const float eps = static_cast<float>(args.f("eps"));
  auto P = [&](const char* n) { return static_cast<float*>(args.ptr(n)); };
  float *gamma = P("gamma"), *beta = P("beta"), *mean = P("mean"), *var = P("var"), *scale = P("scale"),
        *bias = P("bias");
  return fn_op([=](cudaStream_t s) {
    bn_update_eq_kernel<<<kern::blocks_for(c), kern::kThreads, 0, s>>>(gamma, beta, mean, var, scale, bias, c, eps);
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
