// Channel scaling, squeeze-excitation's join (tr/backend/cpu/ops/scale.py): scale_fwd y = x * s with s [N,1,1,C]
// broadcast over H and W; scale_bwd ds = sum over H*W of dy * x per sample and channel, and dx = dy * s.
//
// y and dx are one float multiply rounded to the output's dtype, as on the CPU (bit for bit). NHWC rows are
// read as 16-byte vectors (V channels) when the channel count and the pointers allow it.
//
// ds is deterministic, no atomics: a block holds a tile of channels of one sample (gx vector groups across,
// `lanes` rows in flight) and one chunk of the sample's H*W rows; each thread adds its rows' float products in
// float64 in row order, then a fixed-shape tree adds the lanes. With more than one chunk the blocks write
// float64 partials to op scratch and a second kernel adds each channel's chunks in chunk order. The chunking
// depends only on (N, H*W, C, V), so every launch gives the same bytes. dx is written in the same pass (it
// reads the same dy).
//
// The kernels are templated on the dtypes of the feature reads (x; x and dy); s (N*C values, cached) and the
// outputs go through a switch on a uniform dtype code: 3 or 3x3 instantiations per width, not 3^3 or 3^5.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "cuda/context.hpp"
#include "ops/args/scale.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

constexpr int kBlock = kern::kThreads;
constexpr int kMaxV = 8;             // 16 bytes of FP16/BF16
constexpr int kTargetBlocks = 1024;  // reduction blocks to aim for: ~8 resident per SM on a 132-SM H200
constexpr int kUnroll = 4;           // rows a thread loads before it adds them: their loads are in flight at once
constexpr int kMaxGridZ = 65535;

// ---- V elements as 16-byte (or narrower) words; 8 FP32 outputs of 16-bit inputs take two words ------------
using kern::Raw;

template <class T, int V>
struct Words {
  static constexpr int kBytes = static_cast<int>(sizeof(T)) * V;
  static constexpr int kWord = kBytes < 16 ? kBytes : 16;
  static constexpr int kCount = kBytes / kWord;
  using W = typename Raw<kWord>::type;
  W w[kCount];
};

template <class T, int V>
__device__ __forceinline__ Words<T, V> load_words(const T* p) {
  Words<T, V> r;
  const auto* src = reinterpret_cast<const typename Words<T, V>::W*>(p);
#pragma unroll
  for (int k = 0; k < Words<T, V>::kCount; ++k) r.w[k] = src[k];
  return r;
}

template <class T, int V>
__device__ __forceinline__ void widen(const Words<T, V>& r, float (&out)[V]) {
  const T* e = reinterpret_cast<const T*>(r.w);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = kern::to_f(e[j]);
}

template <class T, int V>
__device__ __forceinline__ void store(T* p, const float (&in)[V]) {
  Words<T, V> r;
  T* e = reinterpret_cast<T*>(r.w);
#pragma unroll
  for (int j = 0; j < V; ++j) e[j] = kern::from_f<T>(in[j]);
  auto* dst = reinterpret_cast<typename Words<T, V>::W*>(p);
#pragma unroll
  for (int k = 0; k < Words<T, V>::kCount; ++k) dst[k] = r.w[k];
}

// ---- tensors whose dtype is a runtime code (the branch is uniform across the grid) -------------------------
__device__ __forceinline__ float load_as(const void* p, DT dt, std::int64_t i) {
  switch (dt) {
    case DT::F16:
      return kern::to_f(static_cast<const __half*>(p)[i]);
    case DT::BF16:
      return kern::to_f(static_cast<const __nv_bfloat16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

template <int V>
__device__ __forceinline__ void store_as(void* p, DT dt, std::int64_t i, const float (&v)[V]) {
  switch (dt) {
    case DT::F16:
      store<__half, V>(static_cast<__half*>(p) + i, v);
      return;
    case DT::BF16:
      store<__nv_bfloat16, V>(static_cast<__nv_bfloat16*>(p) + i, v);
      return;
    default:
      store<float, V>(static_cast<float*>(p) + i, v);
      return;
  }
}

__device__ __forceinline__ void store_as(void* p, DT dt, std::int64_t i, float v) {
  const float one[1] = {v};
  store_as<1>(p, dt, i, one);
}

// ---- forward ---------------------------------------------------------------------------------------------
// One thread per V channels of one pixel; `groups` = N*H*W*C / V, `per_sample` = H*W*C / V, cg = C / V.
template <class TX, int V>
__global__ void __launch_bounds__(kBlock) scale_fwd_kernel(const TX* x, const void* s, DT sdt, void* y, DT ydt,
                                                           std::int64_t groups, std::int64_t per_sample, int cg,
                                                           int c) {
  TR_GRID_STRIDE(g, groups) {
    const std::int64_t n = g / per_sample;
    const std::int64_t so = n * c + (g % cg) * V;
    float v[V];
    widen<TX, V>(load_words<TX, V>(x + g * V), v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = v[j] * load_as(s, sdt, so + j);
    store_as<V>(y, ydt, g * V, v);
  }
}

// ---- backward ----------------------------------------------------------------------------------------------
struct Geo {
  std::int64_t hw;    // rows of a sample
  std::int64_t rows;  // rows per chunk
  int n, c, v;        // samples, channels, vector width
  int groups;         // c / v
  int gx, lanes;      // block: vector groups across, rows in flight
  int top;            // the tree's width: lanes rounded up to a power of two
  int tiles, chunks;  // grid: (chunks, tiles, samples)
};

Geo geometry(int n, std::int64_t hw, int c, int v) {
  Geo g{};
  g.n = n;
  g.hw = hw;
  g.c = c;
  g.v = v;
  g.groups = c / v;
  g.gx = std::min(g.groups, 32);  // a warp spans 32 groups of one row, or whole rows when C/V < 32 (contiguous)
  g.lanes = kBlock / g.gx;
  g.top = 1;
  while (g.top < g.lanes) g.top <<= 1;
  g.tiles = (g.groups + g.gx - 1) / g.gx;
  const std::int64_t want = std::max<std::int64_t>(1, kTargetBlocks / (static_cast<std::int64_t>(g.tiles) * n));
  g.rows = std::max<std::int64_t>((hw + want - 1) / want, static_cast<std::int64_t>(kUnroll) * g.lanes);
  g.chunks = static_cast<int>((hw + g.rows - 1) / g.rows);
  return g;
}

// Block (gx, lanes), grid (chunks, tiles, samples). Writes chunk partials to `part`, or ds itself when there is
// one chunk (part == nullptr). dx == nullptr: ds only.
template <class TX, class TD, int V>
__global__ void __launch_bounds__(kBlock) scale_bwd_kernel(const TX* x, const void* s, DT sdt, const TD* dy, void* dx,
                                                           DT dxdt, double* part, void* ds, DT dsdt, Geo g) {
  static_assert(V <= kMaxV, "the shared tree holds kMaxV doubles a thread");
  __shared__ double sh[kBlock * kMaxV];
  const int grp = blockIdx.y * g.gx + threadIdx.x;
  const bool active = grp < g.groups;
  const int ch = grp * V;
  const int lane = threadIdx.y;
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * g.rows, hi = min(g.hw, lo + g.rows);
  double* mine = sh + (threadIdx.y * blockDim.x + threadIdx.x) * V;
  for (int b = blockIdx.z; b < g.n; b += gridDim.z) {
    double acc[V];
    float sv[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      acc[j] = 0.0;
      sv[j] = active && dx != nullptr ? load_as(s, sdt, static_cast<std::int64_t>(b) * g.c + ch + j) : 0.0f;
    }
    if (active) {
      const std::int64_t base = static_cast<std::int64_t>(b) * g.hw * g.c + ch;
      for (std::int64_t r = lo + lane; r < hi; r += static_cast<std::int64_t>(kUnroll) * g.lanes) {
        Words<TX, V> xr[kUnroll];
        Words<TD, V> dr[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const std::int64_t row = r + static_cast<std::int64_t>(u) * g.lanes;
          if (row < hi) {
            xr[u] = load_words<TX, V>(x + base + row * g.c);
            dr[u] = load_words<TD, V>(dy + base + row * g.c);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const std::int64_t row = r + static_cast<std::int64_t>(u) * g.lanes;
          if (row < hi) {  // rows r, r + lanes, ... : each thread adds its rows in increasing order
            float xv[V], dv[V];
            widen<TX, V>(xr[u], xv);
            widen<TD, V>(dr[u], dv);
#pragma unroll
            for (int j = 0; j < V; ++j) acc[j] += static_cast<double>(dv[j] * xv[j]);
            if (dx != nullptr) {
#pragma unroll
              for (int j = 0; j < V; ++j) dv[j] = dv[j] * sv[j];
              store_as<V>(dx, dxdt, base + row * g.c, dv);
            }
          }
        }
      }
    }
    // Fixed tree over the lanes (inactive groups add zeros in their own columns): lane l takes l + stride.
#pragma unroll
    for (int j = 0; j < V; ++j) mine[j] = acc[j];
    __syncthreads();
    for (int stride = g.top >> 1; stride > 0; stride >>= 1) {
      if (lane < stride && lane + stride < g.lanes) {
        const double* other = mine + static_cast<std::int64_t>(stride) * blockDim.x * V;
#pragma unroll
        for (int j = 0; j < V; ++j) mine[j] += other[j];
      }
      __syncthreads();
    }
    if (lane == 0 && active) {
      if (part != nullptr) {
        double* out = part + (static_cast<std::int64_t>(b) * g.chunks + blockIdx.x) * g.c + ch;
#pragma unroll
        for (int j = 0; j < V; ++j) out[j] = mine[j];
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) store_as(ds, dsdt, static_cast<std::int64_t>(b) * g.c + ch + j,
                                             static_cast<float>(mine[j]));
      }
    }
    __syncthreads();  // sh is reused by the block's next sample
  }
}

// ds[n, c] = the sum of the sample's chunk partials, in chunk order.
__global__ void scale_ds_finish_kernel(const double* part, void* ds, DT dsdt, int n, int c, int chunks) {
  TR_GRID_STRIDE(i, static_cast<std::int64_t>(n) * c) {
    const std::int64_t b = i / c, ch = i - b * c;
    const double* p = part + b * chunks * c + ch;
    double sum = 0.0;
    for (int k = 0; k < chunks; ++k) sum += p[static_cast<std::int64_t>(k) * c];
    store_as(ds, dsdt, i, static_cast<float>(sum));
  }
}

// 16-byte vectors of the widest per-element read (elem bytes) when C fills whole vectors and every NHWC
// pointer is 16-byte aligned (so narrower or two-word accesses are aligned too), else 1.
int vector_width(int c, int elem, std::initializer_list<Dev> tensors) {
  const int v = 16 / elem;
  if (c % v != 0) return 1;
  for (const Dev& t : tensors) {
    if (t && reinterpret_cast<std::uintptr_t>(t.ptr) % 16 != 0) return 1;
  }
  return v;
}

template <class A>
void check_sizes(const A& args, std::int64_t n, std::int64_t hw, std::int64_t c) {
  if (n < 1 || hw < 1 || c < 1) {
    bad(args, "sizes n=" + std::to_string(n) + " hw=" + std::to_string(hw) + " c=" + std::to_string(c) +
             " must be positive");
  }
  if (n > INT32_MAX || c > INT32_MAX) bad(args, "n and c must fit in 32 bits");
}

}  // namespace

std::unique_ptr<Op> scale_fwd(Context&, const ScaleFwdArgs& args) {
  const std::int64_t n = args.n, hw = args.hw, c64 = args.c;
  check_sizes(args, n, hw, c64);
  const int c = static_cast<int>(c64);
  const DT xdt = args.x.dt, sdt = args.s.dt, ydt = args.y.dt;
  const void* x = args.x.ptr;
  const void* s = args.s.ptr;
  void* y = args.y.ptr;
  for (DT dt : {xdt, sdt, ydt}) kern::dispatch_float(dt, args, "x, s and y", [](auto) {});
  const int v = vector_width(c, dtype_size(xdt), {args.x, args.y});
  const std::int64_t groups = n * hw * c / v, per_sample = hw * c / v;
  const int cg = c / v;
  return fn_op(
      [=](cudaStream_t st) {
        kern::dispatch_float(xdt, args, "x", [&](auto tx) {
          using TX = typename decltype(tx)::type;
          constexpr int W = 16 / static_cast<int>(sizeof(TX));
          const unsigned blocks = kern::blocks_for(groups);
          if (v == 1) {
            scale_fwd_kernel<TX, 1><<<blocks, kBlock, 0, st>>>(static_cast<const TX*>(x), s, sdt, y, ydt, groups,
                                                               per_sample, cg, c);
          } else {
            scale_fwd_kernel<TX, W><<<blocks, kBlock, 0, st>>>(static_cast<const TX*>(x), s, sdt, y, ydt, groups,
                                                               per_sample, cg, c);
          }
        });
        check_launch("scale_fwd");
      },
      "vec" + std::to_string(v));
}

std::unique_ptr<Op> scale_bwd(Context&, const ScaleBwdArgs& args) {
  const std::int64_t n = args.n, hw = args.hw, c64 = args.c;
  check_sizes(args, n, hw, c64);
  const int c = static_cast<int>(c64);
  const bool with_dx = static_cast<bool>(args.dx);
  const DT xdt = args.x.dt, sdt = args.s.dt, ddt = args.dy.dt, dsdt = args.ds.dt;
  const DT dxdt = with_dx ? args.dx.dt : DT::F32;
  const void* x = args.x.ptr;
  const void* s = args.s.ptr;
  const void* dy = args.dy.ptr;
  void* ds = args.ds.ptr;
  void* dx = args.dx.ptr;
  for (DT dt : {xdt, sdt, ddt, dsdt, dxdt}) kern::dispatch_float(dt, args, "x, s, dy, ds and dx", [](auto) {});
  const int v = vector_width(c, std::max(dtype_size(xdt), dtype_size(ddt)), {args.x, args.dy, args.dx});
  const Geo g = geometry(static_cast<int>(n), hw, c, v);
  if (g.tiles > 65535) bad(args, "c=" + std::to_string(c) + " needs more than 65535 channel tiles");
  // Chunk partials live as long as the op (its graph); one chunk writes ds directly.
  std::shared_ptr<DeviceBuffer> part;
  if (g.chunks > 1) part = std::make_shared<DeviceBuffer>(static_cast<std::size_t>(n) * g.chunks * c * sizeof(double));
  const dim3 grid(static_cast<unsigned>(g.chunks), static_cast<unsigned>(g.tiles),
                  static_cast<unsigned>(std::min(g.n, kMaxGridZ)));
  const dim3 block(static_cast<unsigned>(g.gx), static_cast<unsigned>(g.lanes));
  std::string info = "vec" + std::to_string(v) + ", chunks=" + std::to_string(g.chunks) + ", " +
                     std::to_string(g.tiles) + " tiles of " + std::to_string(g.gx) + "x" + std::to_string(g.lanes) +
                     (with_dx ? ", dx" : "");
  return fn_op(
      [=](cudaStream_t st) {
        double* partials = part ? part->as<double>() : nullptr;
        kern::dispatch_float(xdt, args, "x", [&](auto tx) {
          using TX = typename decltype(tx)::type;
          kern::dispatch_float(ddt, args, "dy", [&](auto td) {
            using TD = typename decltype(td)::type;
            constexpr int W = 16 / static_cast<int>(sizeof(TX) > sizeof(TD) ? sizeof(TX) : sizeof(TD));
            if (v == 1) {
              scale_bwd_kernel<TX, TD, 1><<<grid, block, 0, st>>>(static_cast<const TX*>(x), s, sdt,
                                                                  static_cast<const TD*>(dy), dx, dxdt, partials, ds,
                                                                  dsdt, g);
            } else {
              scale_bwd_kernel<TX, TD, W><<<grid, block, 0, st>>>(static_cast<const TX*>(x), s, sdt,
                                                                  static_cast<const TD*>(dy), dx, dxdt, partials, ds,
                                                                  dsdt, g);
            }
          });
        });
        check_launch("scale_bwd");
        if (partials != nullptr) {
          scale_ds_finish_kernel<<<kern::blocks_for(g.n * static_cast<std::int64_t>(c)), kBlock, 0, st>>>(
              partials, ds, dsdt, g.n, c, g.chunks);
          check_launch("scale_bwd (ds chunks)");
        }
      },
      std::move(info));
}

}  // namespace tr::native
