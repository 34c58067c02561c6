// Device helpers shared by the op families: element conversion, dtype dispatch, launch geometry,
// deterministic block reductions and Philox4x32-10.
//
// The op files are compiled with --fmad=false: a*b+c rounds twice, as numpy does, so element-wise ops agree
// with the CPU backend to the last bit wherever both use only +, -, *, / and sqrt.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ops/op.hpp"

namespace tr::native::kern {

inline constexpr int kThreads = 256;

// Grid for a grid-stride loop over n elements.
inline unsigned blocks_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>(b, 1 << 16)));
}

#define TR_GRID_STRIDE(i, n)                                                                         \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

// ---- element conversion: every float type computes in float -------------------------------------------
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}
// Round to nearest even by bit arithmetic, NaN -> 0x7FC0: the CPU backend's f32_to_bf16, bit for bit.
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  unsigned bits = __float_as_uint(v);
  unsigned short out;
  if (v != v) {
    out = 0x7FC0;
  } else {
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    out = static_cast<unsigned short>(bits >> 16);
  }
  return __ushort_as_bfloat16(out);
}

template <class T>
struct Tag {
  using type = T;
};

// Calls body(Tag<T>{}) with T the C++ type of a float dtype; bodies are generic lambdas
// `[&](auto tag) { using T = typename decltype(tag)::type; ... }`.
template <class A, class Body>
void dispatch_float(DT dt, const A& args, const char* what, Body&& body) {
  switch (dt) {
    case DT::F32:
      body(Tag<float>{});
      return;
    case DT::F16:
      body(Tag<__half>{});
      return;
    case DT::BF16:
      body(Tag<__nv_bfloat16>{});
      return;
    default:
      bad(args, std::string(what) + " must be FP32, FP16 or BF16, got " + dtype_name(dt));
  }
}

// ---- NaN-propagating max (numpy's maximum) ----------------------------------------------------------------
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ float nan_min(float a, float b) { return (a < b || a != a) ? a : b; }

// ---- deterministic block reductions (fixed tree: the same order on every run) ------------------------------
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T* shared /* >= 32 */) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  if (warp == 0) {
    v = lane < warps ? shared[lane] : shared[0];
    // lanes past `warps` carry a copy of shared[0]; they are never combined into lane 0's result below
    for (int o = 16; o > 0; o >>= 1) {
      const T other = __shfl_down_sync(0xffffffffu, v, o);
      if (lane + o < warps) v = op(v, other);
    }
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const T out = shared[0];
  __syncthreads();
  return out;
}

struct Sum {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  __device__ float operator()(float a, float b) const { return nan_max(a, b); }
};
struct Min {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a < b ? a : b;
  }
};

// ---- Philox4x32-10 (tr.core.philox): the four outputs of the counter (offset lo, offset hi, 0, 0) under key = seed
__device__ __forceinline__ uint4 philox4(unsigned long long seed, unsigned long long offset) {
  unsigned c0 = static_cast<unsigned>(offset), c1 = static_cast<unsigned>(offset >> 32), c2 = 0, c3 = 0;
  unsigned k0 = static_cast<unsigned>(seed), k1 = static_cast<unsigned>(seed >> 32);
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const unsigned long long p0 = 0xD2511F53ull * c0;
    const unsigned long long p1 = 0xCD9E8D57ull * c2;
    const unsigned hi0 = static_cast<unsigned>(p0 >> 32), lo0 = static_cast<unsigned>(p0);
    const unsigned hi1 = static_cast<unsigned>(p1 >> 32), lo1 = static_cast<unsigned>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return make_uint4(c0, c1, c2, c3);
}

__device__ __forceinline__ unsigned philox_r0(unsigned long long seed, unsigned long long offset) {
  return philox4(seed, offset).x;
}

__device__ __forceinline__ float philox_uniform(unsigned long long seed, unsigned long long offset) {
  return static_cast<float>(philox_r0(seed, offset) >> 8) * (1.0f / 16777216.0f);
}

__host__ __device__ __forceinline__ unsigned long long splitmix64(unsigned long long x) {
  x += 0x9E3779B97F4A7C15ull;
  unsigned long long z = x;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// An unsigned word of BYTES bytes: the type a vector of elements is loaded and stored as (16 bytes at most).
template <int BYTES>
struct Raw;
template <>
struct Raw<16> {
  using type = uint4;
};
template <>
struct Raw<8> {
  using type = uint2;
};
template <>
struct Raw<4> {
  using type = unsigned;
};
template <>
struct Raw<2> {
  using type = unsigned short;
};
template <>
struct Raw<1> {
  using type = unsigned char;
};

}  // namespace tr::native::kern
