// Device code shared by the batch-norm op families (bn.cu, bn_pool.cu): launch geometry of the chunked
// reductions, 16-byte vector access, the forward statistics and the backward's per-channel finish. See bn.cu's
// header for the scheme (tiles of channels, chunks of rows, fixed-order float64 sums, no atomics).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>

#include "ops/codes.hpp"
#include "ops/dev.hpp"
#include "ops/kernels.cuh"

namespace tr::native::bnk {
namespace {  // internal linkage: every op file that includes this has its own copy of the kernels

constexpr int kBlock = 256;
constexpr int kTargetBlocks = 1024;  // chunks x tiles: ~8 resident blocks per SM on a 132-SM H100/H200
constexpr int kUnroll = 4;           // rows a thread sums in float before adding them to its float64 sums

// The backward's activation mask (BnMask, codes.hpp): none, relu's (read from y or recomputed from x), relu6's
// likewise, silu's derivative recomputed from x (silu is not invertible: y cannot give it).
__host__ __device__ constexpr bool mask_from_x(BnMask mask) {
  return mask == BnMask::RELU_FROM_X || mask == BnMask::RELU6_FROM_X || mask == BnMask::SILU_FROM_X;
}
__host__ __device__ constexpr bool mask_from_y(BnMask mask) {
  return mask == BnMask::RELU_FROM_Y || mask == BnMask::RELU6_FROM_Y;
}

struct Geo {
  std::int64_t m;     // rows
  std::int64_t rows;  // rows per chunk
  int c, v;           // channels, vector width
  int groups;         // c / v
  int gx, lanes;      // block: vector groups across, rows in flight
  int tiles, chunks;  // grid: (chunks, tiles)
};

inline Geo geometry(std::int64_t m, int c, int v) {
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
using kern::Raw;

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

// A vector's raw bytes, loaded now and widened later: a loop that loads every row it needs into these first
// and computes after has all its loads in flight at once (a widening load per row, branched on the row bound,
// was issued one at a time and waited on).
template <class T, int V>
using RawOf = typename Raw<sizeof(T) * V>::type;

template <class T, int V>
__device__ __forceinline__ RawOf<T, V> load_raw(const T* p) {
  return *reinterpret_cast<const RawOf<T, V>*>(p);
}

template <class T, int V>
__device__ __forceinline__ void widen(const RawOf<T, V>& r, float (&out)[V]) {
  const T* e = reinterpret_cast<const T*>(&r);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = kern::to_f(e[j]);
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

// relu6's: the rounded pre-activation strictly inside (0, 6), as torch's hardtanh backward.
template <class T>
__device__ __forceinline__ float relu6_passed(float pre) {
  const float r = kern::to_f(kern::from_f<T>(pre));
  return r > 0.0f && r < 6.0f ? 1.0f : 0.0f;
}

__device__ __forceinline__ float bn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// silu's derivative at the forward's own (unrounded) pre-activation, in act_bwd's formula (activation.cu):
// the forward computed silu(pre) in float and rounded once.
__device__ __forceinline__ float silu_slope(float pre) {
  const float s = bn_sigmoid(pre);
  return s * ((1.0f - s) * pre + 1.0f);
}

// The forward's activation (relu and relu6 keep NaN, as numpy's maximum and clip).
__device__ __forceinline__ float activate(float v, BnAct act) {
  if (act == BnAct::SILU) return v * bn_sigmoid(v);
  if (act != BnAct::NONE) v = kern::nan_max(v, 0.0f);
  if (act == BnAct::RELU6) v = kern::nan_min(v, 6.0f);
  return v;
}

// The block's per-lane float64 sums of its tile -> part[chunk * c + ch] and part[(chunks + chunk) * c + ch],
// each channel's lanes added in lane order.
template <int V>
__device__ inline void tile_sums(const double (&s1)[V], const double (&s2)[V], const Geo& g, double* part) {
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

// The chunk loop of every reduction, in two phases per step of U rows: ``load(rr, u)`` issues row rr's loads
// into the caller's slot u (raw registers), then ``use(rr, valid, u, fs, fq)`` adds the row's terms to the float
// sums fs/fq (and may store: after every load of the step). Rows past hi are clamped to hi - 1 (a load of a
// real row, no branch) and used with valid = false. Each thread's U-row float sums go into its float64 sums.
template <int V, int U, class Load, class Use>
__device__ __forceinline__ void sum_rows(const Geo& g, std::int64_t lo, std::int64_t hi, double (&ds)[V],
                                         double (&dq)[V], Load&& load, Use&& use) {
  for (std::int64_t r = lo + threadIdx.y; r < hi; r += U * g.lanes) {
#pragma unroll
    for (int u = 0; u < U; ++u) load(min(r + static_cast<std::int64_t>(u) * g.lanes, hi - 1), u);
    float fs[V], fq[V];
#pragma unroll
    for (int j = 0; j < V; ++j) fs[j] = fq[j] = 0.0f;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::int64_t rr = r + static_cast<std::int64_t>(u) * g.lanes;
      use(min(rr, hi - 1), rr < hi, u, fs, fq);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      ds[j] += static_cast<double>(fs[j]);
      dq[j] += static_cast<double>(fq[j]);
    }
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
    RawOf<T, V> raw[kUnroll];
    sum_rows<V, kUnroll>(
        g, lo, hi, ds, dq, [&](std::int64_t rr, int u) { raw[u] = load_raw<T, V>(x + rr * g.c + grp * V); },
        [&](std::int64_t, bool valid, int u, float (&fs)[V], float (&fq)[V]) {
          float v[V];
          widen<T, V>(raw[u], v);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float d = valid ? v[j] - k[j] : 0.0f;
            fs[j] += d;
            fq[j] += d * d;
          }
        });
  }
  tile_sums<V>(ds, dq, g, part);
}

// The finish kernels run as blocks of kFinishLanes x kFinishLanes threads, one block per 32 channels: thread
// (x, y) adds the chunks y, y + 32, ... of channel 32 * block + x (reads of 32 adjacent channels: coalesced),
// then thread (x, 0) adds the 32 lane sums in lane order. Fixed order: the same sums on every run.
constexpr int kFinishLanes = 32;

inline unsigned finish_blocks(int c) { return static_cast<unsigned>((c + kFinishLanes - 1) / kFinishLanes); }
inline dim3 finish_block() { return dim3(kFinishLanes, kFinishLanes); }

// The chunk sums of this thread's channel: true (with a and b) in the threads of row 0 that have a channel.
__device__ __forceinline__ bool chunk_sums(const double* part, const Geo& g, int& ch, double& a, double& b) {
  __shared__ double sa[kFinishLanes][kFinishLanes + 1], sb[kFinishLanes][kFinishLanes + 1];
  ch = blockIdx.x * kFinishLanes + threadIdx.x;
  double x = 0.0, y = 0.0;
  if (ch < g.c) {
#pragma unroll 8
    for (int k = threadIdx.y; k < g.chunks; k += kFinishLanes) {
      x += part[static_cast<std::int64_t>(k) * g.c + ch];
      y += part[(static_cast<std::int64_t>(g.chunks) + k) * g.c + ch];
    }
  }
  sa[threadIdx.y][threadIdx.x] = x;
  sb[threadIdx.y][threadIdx.x] = y;
  __syncthreads();
  if (threadIdx.y != 0 || ch >= g.c) return false;
  a = 0.0;
  b = 0.0;
  for (int l = 0; l < kFinishLanes; ++l) {
    a += sa[l][threadIdx.x];
    b += sb[l][threadIdx.x];
  }
  return true;
}

// Forward pass 2: mean and variance, running and saved statistics, and coef = (mean, gamma * inv, beta).
template <class T>
__global__ void stats_finish_kernel(const T* __restrict__ x, const double* __restrict__ part, Geo g,
                                    const float* gamma, const float* beta, const float* mean_in, const float* var_in,
                                    float* mean_out, float* var_out, float* saved_mean, float* saved_inv, float* coef,
                                    double mom, double eps) {
  int ch;
  double s1, s2;
  if (!chunk_sums(part, g, ch, s1, s2)) return;
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

// Per-thread constants of the backward: saved mean and inverse std, and for a mask recomputed from x the
// forward's a = gamma * inv and b = beta.
template <int V>
struct BwdParams {
  float mu[V], iv[V], a[V], b[V];
  __device__ void load_all(const float* gamma, const float* beta, const float* mean, const float* inv, int ch,
                           BnMask mask) {
    load_params<V>(mean, ch, mu);
    load_params<V>(inv, ch, iv);
    if (mask_from_x(mask)) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        a[j] = gamma[ch + j] * iv[j];
        b[j] = beta[ch + j];
      }
    }
  }
};

// Backward pass 2: dbeta, dgamma, and coef = (t1, t2, k) of dx = ((g - xhat * t2) - t1) * k.
__global__ void bwd_finish_kernel(const double* __restrict__ part, Geo g, const float* gamma, const float* inv,
                                  float* dgamma, float* dbeta, float* coef) {
  int ch;
  double s1, s2;
  if (!chunk_sums(part, g, ch, s1, s2)) return;
  dbeta[ch] = static_cast<float>(s1);
  dgamma[ch] = static_cast<float>(s2);
  const double inv_m = 1.0 / static_cast<double>(g.m);
  coef[ch] = static_cast<float>(s1 * inv_m);
  coef[g.c + ch] = static_cast<float>(s2 * inv_m);
  coef[2 * g.c + ch] = gamma[ch] * inv[ch];
}

// dx = ((g - xhat * t2) - t1) * k for one vector, with coef = (t1, t2, k) as bwd_finish_kernel wrote it.
template <int V>
struct BwdApply {
  float t1[V], t2[V], k[V];
  __device__ void load(const float* coef, int c, int ch) {
    load_params<V>(coef, ch, t1);
    load_params<V>(coef + c, ch, t2);
    load_params<V>(coef + 2 * c, ch, k);
  }
  __device__ __forceinline__ void operator()(const BwdParams<V>& p, const float (&xv)[V], float (&gv)[V]) const {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float xhat = (xv[j] - p.mu[j]) * p.iv[j];
      gv[j] = ((gv[j] - xhat * t2[j]) - t1[j]) * k[j];
    }
  }
};

// One row's terms of the backward's sums, g and g * xhat, added to the float sums (nothing for a row past the
// chunk: valid false).
template <int V>
__device__ __forceinline__ void add_terms(const BwdParams<V>& p, const float (&xv)[V], const float (&gv)[V],
                                          bool valid, float (&fs)[V], float (&fq)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const float xhat = (xv[j] - p.mu[j]) * p.iv[j];
    fs[j] += valid ? gv[j] : 0.0f;
    fq[j] += valid ? gv[j] * xhat : 0.0f;
  }
}

// 16-byte vectors (of x's dtype) when every given feature tensor is 16-byte aligned and the channels fill whole
// vectors.
inline int vector_width(DT xdt, int c, std::initializer_list<Dev> features) {
  const int elem = dtype_size(xdt);
  const int v = 16 / elem;
  if (c % v != 0) return 1;
  for (const Dev& t : features) {
    if (t && reinterpret_cast<std::uintptr_t>(t.ptr) % 16 != 0) return 1;
  }
  return v;
}

// A per-channel (FP32) tensor's values; null for an absent optional one.
inline float* fp32(const Dev& t) { return static_cast<float*>(t.ptr); }

// Calls fn(Tag<T>, integral_constant<V>) for the float type of the record's x and the chosen width.
template <class A, class Fn>
void dispatch(const A& args, int v, Fn&& fn) {
  kern::dispatch_float(args.x.dt, args, "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int W = 16 / static_cast<int>(sizeof(T));
    if (v == 1) {
      fn(tag, std::integral_constant<int, 1>{});
    } else {
      fn(tag, std::integral_constant<int, W>{});
    }
  });
}

// The op-private scratch of a chunked reduction: the chunk partials (two float64 arrays of chunks x c) and
// three float coefficient arrays of c.
struct Partials {
  std::shared_ptr<DeviceBuffer> buf;
  double* part;
  float* coef;
};

inline Partials partials(const Geo& g) {
  Partials p;
  p.buf = std::make_shared<DeviceBuffer>(2 * static_cast<std::size_t>(g.chunks) * g.c * sizeof(double) +
                                         3 * static_cast<std::size_t>(g.c) * sizeof(float));
  p.part = p.buf->as<double>();
  p.coef = reinterpret_cast<float*>(p.part + 2 * static_cast<std::int64_t>(g.chunks) * g.c);
  return p;
}

}  // namespace
}  // namespace tr::native::bnk
