// Multi-head scaled dot-product self-attention over tokens (tr/backend/cpu/ops/attention.py): straightforward,
// deterministic kernels in float32 (a cuDNN flash-attention path is to replace them for speed).
//
// qkv [N, T, 3D] holds per token [q | k | v], head h on channels h*dh .. (h+1)*dh of each third; y and dy are
// [N, T, D]; stats [N, heads, T] FP32. Every dot product over a head's dh channels is one float32 running sum in
// channel order (dot(): the product rounded, then added, --fmad=false), so the score of (i, j) has the same bits
// in every kernel that needs it (a * b == b * a).
//
// attention_fwd: a block per (query i, head, sample). Its scores s_j = (q_i . k_j) * scale, all j, sit in dynamic
// shared memory (T floats; a T whose scores do not fit is refused, naming T); the row's max and sum of
// exp(s_j - max) come from a fixed-shape block tree (kern::block_reduce), p_j = e_j / sum, and y_i[c] = sum_j
// p_j v_j[c] with j in order, rounded once to y's dtype; stats_i = max + log(sum) when given. The CPU backend's
// arithmetic, operation for operation, up to the order of its BLAS and pairwise sums.
//
// attention_bwd, three kernels: D_i = sum_c dy_i[c] * y_i[c] per (token, head) into op scratch (y as stored,
// widened); a block per key j: P_ij = exp((k_j . q_i) * scale - lse_i), dP_ij = v_j . dy_i, dS_ij = (dP_ij - D_i)
// * P_ij for all i into shared memory, then dV_j[c] = sum_i P_ij dy_i[c] and dK_j[c] = (sum_i dS_ij q_i[c]) * scale
// with i in order; a block per query i: dS_ij likewise for all j, then dQ_i[c] = (sum_j dS_ij k_j[c]) * scale.
// dqkv = [dQ | dK | dV], each value rounded once. No atomics and fixed orders: every launch gives the same bytes.
//
// Dropout on the probabilities (attribute dropout = p > 0; the kernels' kDrop instantiations, so p = 0 runs the
// code it ran before dropout existed): a one-thread kernel advances the dropout stream, seed <- splitmix64(seed),
// and stores it into the layer's key; element (n, h, i, j) is kept iff Philox uniform(key, ((n*heads + h)*T + i)*T
// + j) >= p (kept(), the CPU backend's draw bit for bit). The forward uses p'_j = keep ? p_j / (1 - p) : 0 for y
// (stats stay the undropped row's); the backward redraws the bits from the key in both its kernels (no mask is
// saved): dV from P', dP = keep ? (v_j . dy_i) / (1 - p) : 0, and D_i = dy_i . y_i as before (y = P' v).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>

#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "ops/args/attention.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

constexpr int kBlock = 128;
constexpr unsigned kMaxGridYZ = 65535;
constexpr std::size_t kDefaultShared = 48 * 1024;  // dynamic shared memory a launch may take without opting in

// Where one (sample, head) lives: rows of qkv are 3d elements, rows of y/dy d elements.
struct Geo {
  std::int64_t n, t, d;
  int heads, dh;
  float scale;
};

// sum_c a[c] * b[c] over c < dh in order, one float32 running sum.
template <class T>
__device__ __forceinline__ float dot(const float* a, const T* b, int dh) {
  float acc = 0.0f;
  for (int c = 0; c < dh; ++c) acc = acc + a[c] * kern::to_f(b[c]);
  return acc;
}

template <class T>
__device__ __forceinline__ void load_row(float* dst, const T* src, int dh) {
  for (int c = threadIdx.x; c < dh; c += blockDim.x) dst[c] = kern::to_f(src[c]);
}

// ---- dropout on the probabilities -----------------------------------------------------------------------------
struct Drop {
  unsigned long long* key;  // the layer's draw key (null without dropout)
  float p, q;               // drop probability, 1 - p
};

// Whether probability (n, h, i, j) is kept: one Philox draw, keyed like dropout's, at the element's flat index.
__device__ __forceinline__ bool kept(unsigned long long key, const Drop& dr, const Geo& g, std::int64_t n, int h,
                                     int i, int j) {
  const unsigned long long row = (static_cast<unsigned long long>(n) * g.heads + h) * g.t + i;
  return kern::philox_uniform(key, row * static_cast<unsigned long long>(g.t) + j) >= dr.p;
}

// The forward's draw: the dropout stream advances and its new value is this layer's key.
__global__ void attn_drop_key_kernel(unsigned long long* seed, unsigned long long* key) {
  const unsigned long long k = kern::splitmix64(*seed);
  *seed = k;
  *key = k;
}

// ---- forward: grid (T, heads, min(N, 65535)); dynamic shared: q_i (dh floats), then the scores (T floats) ------
template <class T, bool kDrop>
__global__ void __launch_bounds__(kBlock) attn_fwd_kernel(const T* __restrict__ qkv, T* __restrict__ y,
                                                          float* __restrict__ stats, Geo g, Drop dr) {
  extern __shared__ float sh[];
  __shared__ float red[32];
  float* qs = sh;
  float* s = sh + g.dh;
  const int i = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y);
  const std::int64_t row = 3 * g.d;
  const std::int64_t off = static_cast<std::int64_t>(h) * g.dh;
  unsigned long long key = 0;
  if constexpr (kDrop) key = *dr.key;
  for (std::int64_t n = blockIdx.z; n < g.n; n += gridDim.z) {  // uniform across the block
    const T* base = qkv + n * g.t * row;
    load_row(qs, base + i * row + off, g.dh);
    __syncthreads();
    float m = -INFINITY;
    for (int j = threadIdx.x; j < g.t; j += kBlock) {
      const float v = dot(qs, base + j * row + g.d + off, g.dh) * g.scale;
      s[j] = v;
      m = kern::nan_max(m, v);
    }
    m = kern::block_reduce(m, kern::Max{}, red);
    float l = 0.0f;
    for (int j = threadIdx.x; j < g.t; j += kBlock) {
      const float e = expf(s[j] - m);
      s[j] = e;
      l = l + e;
    }
    l = kern::block_reduce(l, kern::Sum{}, red);  // (its barriers also publish s)
    for (int j = threadIdx.x; j < g.t; j += kBlock) {
      s[j] = s[j] / l;
      if constexpr (kDrop) s[j] = kept(key, dr, g, n, h, i, j) ? s[j] / dr.q : 0.0f;
    }
    __syncthreads();
    const T* v0 = base + 2 * g.d + off;
    T* yi = y + (n * g.t + i) * g.d + off;
    for (int c = threadIdx.x; c < g.dh; c += kBlock) {
      float acc = 0.0f;
      for (int j = 0; j < g.t; ++j) acc = acc + s[j] * kern::to_f(v0[j * row + c]);
      yi[c] = kern::from_f<T>(acc);
    }
    if (stats != nullptr && threadIdx.x == 0) stats[(n * g.heads + h) * g.t + i] = m + logf(l);
    __syncthreads();  // the next sample reuses the shared memory
  }
}

// ---- backward ------------------------------------------------------------------------------------------------
// delta[(n*T + i)*heads + h] = sum_c dy_i[c] * y_i[c] (one thread a token and head).
template <class T>
__global__ void attn_delta_kernel(const T* __restrict__ y, const T* __restrict__ dy, float* __restrict__ delta,
                                  std::int64_t rows, int dh) {
  TR_GRID_STRIDE(e, rows) {
    const T* yr = y + e * dh;
    const T* gr = dy + e * dh;
    float acc = 0.0f;
    for (int c = 0; c < dh; ++c) acc = acc + kern::to_f(gr[c]) * kern::to_f(yr[c]);
    delta[e] = acc;
  }
}

// dK and dV of key j: grid (T, heads, min(N, 65535)); dynamic shared: k_j, v_j (dh floats each), P and dS (T each).
template <class T, bool kDrop>
__global__ void __launch_bounds__(kBlock) attn_dkv_kernel(const T* __restrict__ qkv, const T* __restrict__ dy,
                                                          const float* __restrict__ lse,
                                                          const float* __restrict__ delta, T* __restrict__ dqkv,
                                                          Geo g, Drop dr) {
  extern __shared__ float sh[];
  float* ks = sh;
  float* vs = ks + g.dh;
  float* p = vs + g.dh;
  float* ds = p + g.t;
  const int j = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y);
  const std::int64_t row = 3 * g.d;
  const std::int64_t off = static_cast<std::int64_t>(h) * g.dh;
  unsigned long long key = 0;
  if constexpr (kDrop) key = *dr.key;
  for (std::int64_t n = blockIdx.z; n < g.n; n += gridDim.z) {
    const T* base = qkv + n * g.t * row;
    const T* q0 = base + off;
    const T* dy0 = dy + n * g.t * g.d + off;
    const float* lr = lse + (n * g.heads + h) * g.t;
    const float* dl = delta + n * g.t * g.heads + h;
    load_row(ks, base + j * row + g.d + off, g.dh);
    load_row(vs, base + j * row + 2 * g.d + off, g.dh);
    __syncthreads();
    for (int i = threadIdx.x; i < g.t; i += kBlock) {
      const float pij = expf(dot(ks, q0 + i * row, g.dh) * g.scale - lr[i]);
      float dp = dot(vs, dy0 + i * g.d, g.dh);
      p[i] = pij;
      if constexpr (kDrop) {  // dV from P', dP through the same bits
        const bool keep = kept(key, dr, g, n, h, i, j);
        p[i] = keep ? pij / dr.q : 0.0f;
        dp = keep ? dp / dr.q : 0.0f;
      }
      ds[i] = (dp - dl[static_cast<std::int64_t>(i) * g.heads]) * pij;
    }
    __syncthreads();
    T* out = dqkv + (n * g.t + j) * row + off;
    for (int c = threadIdx.x; c < g.dh; c += kBlock) {
      float av = 0.0f, ak = 0.0f;
      for (int i = 0; i < g.t; ++i) {
        av = av + p[i] * kern::to_f(dy0[i * g.d + c]);
        ak = ak + ds[i] * kern::to_f(q0[i * row + c]);
      }
      out[g.d + c] = kern::from_f<T>(ak * g.scale);
      out[2 * g.d + c] = kern::from_f<T>(av);
    }
    __syncthreads();
  }
}

// dQ of query i: grid (T, heads, min(N, 65535)); dynamic shared: q_i, dy_i (dh floats each), dS (T floats).
template <class T, bool kDrop>
__global__ void __launch_bounds__(kBlock) attn_dq_kernel(const T* __restrict__ qkv, const T* __restrict__ dy,
                                                         const float* __restrict__ lse,
                                                         const float* __restrict__ delta, T* __restrict__ dqkv,
                                                         Geo g, Drop dr) {
  extern __shared__ float sh[];
  float* qs = sh;
  float* gs = qs + g.dh;
  float* ds = gs + g.dh;
  const int i = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y);
  const std::int64_t row = 3 * g.d;
  const std::int64_t off = static_cast<std::int64_t>(h) * g.dh;
  unsigned long long key = 0;
  if constexpr (kDrop) key = *dr.key;
  for (std::int64_t n = blockIdx.z; n < g.n; n += gridDim.z) {
    const T* base = qkv + n * g.t * row;
    const T* k0 = base + g.d + off;
    const T* v0 = base + 2 * g.d + off;
    const float li = lse[(n * g.heads + h) * g.t + i];
    const float di = delta[(n * g.t + i) * g.heads + h];
    load_row(qs, base + i * row + off, g.dh);
    load_row(gs, dy + (n * g.t + i) * g.d + off, g.dh);
    __syncthreads();
    for (int j = threadIdx.x; j < g.t; j += kBlock) {
      const float pij = expf(dot(qs, k0 + j * row, g.dh) * g.scale - li);
      float dp = dot(gs, v0 + j * row, g.dh);
      if constexpr (kDrop) dp = kept(key, dr, g, n, h, i, j) ? dp / dr.q : 0.0f;
      ds[j] = (dp - di) * pij;
    }
    __syncthreads();
    T* out = dqkv + (n * g.t + i) * row + off;
    for (int c = threadIdx.x; c < g.dh; c += kBlock) {
      float acc = 0.0f;
      for (int j = 0; j < g.t; ++j) acc = acc + ds[j] * kern::to_f(k0[j * row + c]);
      out[c] = kern::from_f<T>(acc * g.scale);
    }
    __syncthreads();
  }
}

// ---- the factories' checks ------------------------------------------------------------------------------------
struct Named {
  const char* name;
  Dev t;
};

template <class A>
Geo geometry(const A& args, std::initializer_list<Named> same) {
  const std::int64_t n = args.n, t = args.t, d = args.d, heads = args.heads;
  if (n < 1 || t < 1 || d < 1 || heads < 1 || d % heads != 0) {
    bad(args, "sizes n=" + std::to_string(n) + " t=" + std::to_string(t) + " d=" + std::to_string(d) +
                  " heads=" + std::to_string(heads) + " must be positive, heads dividing d");
  }
  if (3 * d > INT32_MAX || t > INT32_MAX) bad(args, "d=" + std::to_string(d) + " and t must fit in 31 bits (3d too)");
  if (heads > static_cast<std::int64_t>(kMaxGridYZ)) bad(args, "heads=" + std::to_string(heads) + " exceeds 65535");
  const double scale = args.scale;
  if (!(std::isfinite(scale) && scale > 0.0)) bad(args, "scale=" + std::to_string(scale) + " must be finite and > 0");
  const DT dt = args.qkv.dt;
  kern::dispatch_float(dt, args, "qkv", [](auto) {});
  for (const Named& f : same) {
    if (f.t.dt != dt) bad(args, std::string(f.name) + " is " + dtype_name(f.t.dt) + " but qkv is " + dtype_name(dt));
  }
  if (args.stats && args.stats.dt != DT::F32) bad(args, std::string("stats must be FP32, got ") + dtype_name(args.stats.dt));
  return {n, t, d, static_cast<int>(heads), static_cast<int>(d / heads), static_cast<float>(scale)};
}

// Lets `kernel` take `bytes` of dynamic shared memory on the context's device, or refuses T (which sets its size).
template <class A, class K>
void allow_shared(const A& args, Context& ctx, K* kernel, std::size_t bytes, const Geo& g, const char* layout,
                  std::int64_t per_token) {
  cuda::DeviceGuard guard(ctx.device());
  int optin = 0;
  cuda::check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx.device()),
              "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
  cudaFuncAttributes fa{};
  cuda::check(cudaFuncGetAttributes(&fa, kernel), "cudaFuncGetAttributes(attention kernel)");
  const std::size_t allowed = static_cast<std::size_t>(optin) - fa.sharedSizeBytes;
  if (bytes > allowed) {
    const std::int64_t fixed = static_cast<std::int64_t>(bytes) - per_token * g.t;
    const std::int64_t most = (static_cast<std::int64_t>(allowed) - fixed) / per_token;
    bad(args, "T=" + std::to_string(g.t) + " tokens do not fit these kernels: a block holds " + layout + " in " +
                  std::to_string(bytes) + " bytes of shared memory, more than the device's " +
                  std::to_string(allowed) + " (at most T=" + std::to_string(most) + " with dh=" +
                  std::to_string(g.dh) + ")");
  }
  if (bytes + fa.sharedSizeBytes > kDefaultShared) {  // (the static part counts against the 48 KiB default too)
    cuda::check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(allowed)),
                "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  }
}

dim3 grid_of(const Geo& g) {
  return dim3(static_cast<unsigned>(g.t), static_cast<unsigned>(g.heads),
              static_cast<unsigned>(std::min<std::int64_t>(g.n, kMaxGridYZ)));
}

// The dropout of a call: p in [0, 1); with p > 0 the tensors it needs (names: the record's) must be INT32 [2]s given.
template <class A>
Drop drop_of(const A& args, std::initializer_list<Named> needs) {
  const double p = args.dropout;
  if (!(p >= 0.0 && p < 1.0)) bad(args, "dropout=" + std::to_string(p) + " must be in [0, 1)");
  if (p == 0.0) return {nullptr, 0.0f, 1.0f};
  for (const Named& f : needs) {
    if (!f.t) bad(args, std::string("dropout > 0 needs ") + f.name);
    if (f.t.dt != DT::I32) bad(args, std::string(f.name) + " must be INT32 (one uint64), got " + dtype_name(f.t.dt));
  }
  return {static_cast<unsigned long long*>(args.key.ptr), static_cast<float>(p), static_cast<float>(1.0 - p)};
}

// Calls body(std::integral_constant<bool, drop>{}): the kernels' kDrop, from the call's dropout.
template <class Body>
void dispatch_drop(bool drop, Body&& body) {
  if (drop) {
    body(std::true_type{});
  } else {
    body(std::false_type{});
  }
}

}  // namespace

std::unique_ptr<Op> attention_fwd(Context& ctx, const AttentionFwdArgs& args) {
  const Geo g = geometry(args, {{"y", args.y}});
  const Drop dr = drop_of(args, {{"seed", args.seed}, {"key", args.key}});
  const bool drop = dr.key != nullptr;
  if (drop && !args.stats) bad(args, "dropout > 0 is a training forward's, which saves stats");
  const std::size_t bytes = (static_cast<std::size_t>(g.dh) + static_cast<std::size_t>(g.t)) * sizeof(float);
  const DT dt = args.qkv.dt;
  kern::dispatch_float(dt, args, "qkv", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_drop(drop, [&](auto kd) {
      allow_shared(args, ctx, attn_fwd_kernel<T, decltype(kd)::value>, bytes, g, "q_i and the row's T scores",
                   sizeof(float));
    });
  });
  const void* qkv = args.qkv.ptr;
  void* y = args.y.ptr;
  float* stats = args.stats ? static_cast<float*>(args.stats.ptr) : nullptr;  // null: inference
  auto* seed = static_cast<unsigned long long*>(args.seed.ptr);  // (with dropout only)
  const dim3 grid = grid_of(g);
  std::string info = "block per query, " + std::to_string(bytes) + " B shared" + (stats ? ", saves stats" : "") +
                     (drop ? ", dropout " + std::to_string(args.dropout) : "");
  return fn_op(
      [=](cudaStream_t s) {
        if (drop) {
          attn_drop_key_kernel<<<1, 1, 0, s>>>(seed, dr.key);
          check_launch("attention dropout key");
        }
        kern::dispatch_float(dt, args, "qkv", [&](auto tag) {
          using T = typename decltype(tag)::type;
          dispatch_drop(drop, [&](auto kd) {
            attn_fwd_kernel<T, decltype(kd)::value><<<grid, kBlock, bytes, s>>>(static_cast<const T*>(qkv),
                                                                               static_cast<T*>(y), stats, g, dr);
          });
        });
        check_launch("attention_fwd");
      },
      std::move(info));
}

std::unique_ptr<Op> attention_bwd(Context& ctx, const AttentionBwdArgs& args) {
  const Geo g = geometry(args, {{"y", args.y}, {"dy", args.dy}, {"dqkv", args.dqkv}});
  const Drop dr = drop_of(args, {{"key", args.key}});
  const bool drop = dr.key != nullptr;
  const std::size_t dh = static_cast<std::size_t>(g.dh), t = static_cast<std::size_t>(g.t);
  const std::size_t dkv_bytes = (2 * dh + 2 * t) * sizeof(float), dq_bytes = (2 * dh + t) * sizeof(float);
  const DT dt = args.qkv.dt;
  kern::dispatch_float(dt, args, "qkv", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_drop(drop, [&](auto kd) {
      constexpr bool kDrop = decltype(kd)::value;
      allow_shared(args, ctx, attn_dkv_kernel<T, kDrop>, dkv_bytes, g, "k_j, v_j and a column's T probabilities "
                   "and score gradients", 2 * sizeof(float));
      allow_shared(args, ctx, attn_dq_kernel<T, kDrop>, dq_bytes, g, "q_i, dy_i and the row's T score gradients",
                   sizeof(float));
    });
  });
  const std::int64_t rows = g.n * g.t * g.heads;
  // D_i per token and head lives as long as the op (its graph)
  auto delta = std::make_shared<DeviceBuffer>(static_cast<std::size_t>(rows) * sizeof(float));
  const void* qkv = args.qkv.ptr;
  const void* y = args.y.ptr;
  const void* dy = args.dy.ptr;
  const float* lse = static_cast<const float*>(args.stats.ptr);
  void* dqkv = args.dqkv.ptr;
  const dim3 grid = grid_of(g);
  std::string info = "block per key (dK, dV) and per query (dQ), " + std::to_string(dkv_bytes) + " B shared" +
                     (drop ? ", dropout " + std::to_string(args.dropout) : "");
  return fn_op(
      [=](cudaStream_t s) {
        float* dl = delta->as<float>();
        kern::dispatch_float(dt, args, "qkv", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T* q = static_cast<const T*>(qkv);
          const T* g_dy = static_cast<const T*>(dy);
          T* out = static_cast<T*>(dqkv);
          attn_delta_kernel<T><<<kern::blocks_for(rows), kern::kThreads, 0, s>>>(static_cast<const T*>(y), g_dy,
                                                                                  dl, rows, g.dh);
          dispatch_drop(drop, [&](auto kd) {
            constexpr bool kDrop = decltype(kd)::value;
            attn_dkv_kernel<T, kDrop><<<grid, kBlock, dkv_bytes, s>>>(q, g_dy, lse, dl, out, g, dr);
            attn_dq_kernel<T, kDrop><<<grid, kBlock, dq_bytes, s>>>(q, g_dy, lse, dl, out, g, dr);
          });
        });
        check_launch("attention_bwd");
      },
      std::move(info));
}

}  // namespace tr::native
