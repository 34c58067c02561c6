// Pooling (tr/backend/cpu/ops/pool.py): max (INT8 argmax mask, first max wins, -inf padding), average
// (padding excluded from the count) and global average. Every kernel gathers: each output element is written
// by one thread that visits its window in kernel-position order, so there are no atomics and the float32
// operations happen in the CPU backend's order.
#include <algorithm>

#include "cuda/context.hpp"
#include "ops/args/pool.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

struct Win {
  int n, h, w, c, kh, kw, sh, sw, ph, pw, p, q;
};

// The window of a pooling record (its fields n, h, w, c, kh, kw, sh, sw, ph, pw, p, q).
template <class A>
Win win_of(const A& a) {
  auto g = [](std::int64_t v) { return static_cast<int>(v); };
  return {g(a.n), g(a.h), g(a.w), g(a.c), g(a.kh), g(a.kw), g(a.sh), g(a.sw), g(a.ph), g(a.pw), g(a.p), g(a.q)};
}

__device__ __forceinline__ float inv_count(const Win& g, int op, int oq) {
  const int h0 = op * g.sh - g.ph, w0 = oq * g.sw - g.pw;
  const int rows = min(h0 + g.kh, g.h) - max(h0, 0);
  const int cols = min(w0 + g.kw, g.w) - max(w0, 0);
  return static_cast<float>(1.0 / static_cast<double>(rows * cols));
}

template <class TX, class TY>
__global__ void maxpool_fwd_kernel(const TX* x, TY* y, signed char* code, Win g, int train) {
  TR_GRID_STRIDE(i, static_cast<std::int64_t>(g.n) * g.p * g.q * g.c) {
    const int ch = static_cast<int>(i % g.c);
    std::int64_t r = i / g.c;
    const int oq = static_cast<int>(r % g.q);
    r /= g.q;
    const int op = static_cast<int>(r % g.p);
    const int n = static_cast<int>(r / g.p);
    float best = -INFINITY;
    int arg = 0;
    for (int t = 0; t < g.kh * g.kw; ++t) {
      const int hh = op * g.sh - g.ph + t / g.kw, ww = oq * g.sw - g.pw + t % g.kw;
      float v = -INFINITY;
      if (hh >= 0 && hh < g.h && ww >= 0 && ww < g.w) {
        v = kern::to_f(x[((static_cast<std::int64_t>(n) * g.h + hh) * g.w + ww) * g.c + ch]);
      }
      if (train) {
        if (t == 0 || v > best) {  // strict '>': the first max wins, NaN never replaces
          best = v;
          arg = t;
        }
      } else {
        best = t == 0 ? v : kern::nan_max(best, v);
      }
    }
    y[i] = kern::from_f<TY>(best);
    if (train) code[i] = static_cast<signed char>(arg);
  }
}

template <class TD, class TX>
__global__ void maxpool_bwd_kernel(const TD* dy, const signed char* code, TX* dx, Win g, int overlap) {
  TR_GRID_STRIDE(i, static_cast<std::int64_t>(g.n) * g.h * g.w * g.c) {
    const int ch = static_cast<int>(i % g.c);
    std::int64_t r = i / g.c;
    const int ww = static_cast<int>(r % g.w);
    r /= g.w;
    const int hh = static_cast<int>(r % g.h);
    const int n = static_cast<int>(r / g.h);
    float acc = 0.0f;
    for (int t = 0; t < g.kh * g.kw; ++t) {
      const int a = hh + g.ph - t / g.kw, b = ww + g.pw - t % g.kw;
      if (a < 0 || b < 0 || a % g.sh != 0 || b % g.sw != 0) continue;
      const int op = a / g.sh, oq = b / g.sw;
      if (op >= g.p || oq >= g.q) continue;
      const std::int64_t o = ((static_cast<std::int64_t>(n) * g.p + op) * g.q + oq) * g.c + ch;
      const bool hit = code[o] == t;
      if (overlap) {
        acc = acc + kern::to_f(dy[o]) * (hit ? 1.0f : 0.0f);  // the CPU's dy * (code == t), NaN included
      } else if (hit) {
        acc = kern::to_f(dy[o]);
      }
    }
    dx[i] = kern::from_f<TX>(acc);
  }
}

// Windows that tile the input exactly (kernel == stride, no padding, h = p * kh, w = q * kw, e.g. VGG's 2x2/2):
// every input element is in one window, so one thread per output element reads (forward) or writes
// (backward) its whole window. Blocks take one output row (n, op) each, threads (oq, channel): 32-bit index
// math, and a warp's accesses are contiguous over channels. Same results as the general kernels.
bool tiles_exactly(const Win& g) {
  return g.kh == g.sh && g.kw == g.sw && g.ph == 0 && g.pw == 0 && g.h == g.p * g.kh && g.w == g.q * g.kw &&
         static_cast<std::int64_t>(g.n) * g.p <= 65535 && static_cast<std::int64_t>(g.q) * g.c < (1LL << 31);
}

dim3 tiled_grid(const Win& g) {
  const std::int64_t len = static_cast<std::int64_t>(g.q) * g.c;
  const unsigned bx = static_cast<unsigned>(std::min<std::int64_t>((len + kern::kThreads - 1) / kern::kThreads, 1024));
  return dim3(bx, static_cast<unsigned>(g.n * g.p));
}

template <class TX, class TY>
__global__ void maxpool_fwd_tiled_kernel(const TX* x, TY* y, signed char* code, Win g, int train) {
  const int row = blockIdx.y;  // n * p + op
  const int n = row / g.p, op = row - n * g.p;
  const int len = g.q * g.c, win = g.kh * g.kw;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < len; j += gridDim.x * blockDim.x) {
    const int oq = j / g.c, ch = j - oq * g.c;
    const TX* src = x + ((static_cast<std::int64_t>(n) * g.h + op * g.kh) * g.w + oq * g.kw) * g.c + ch;
    float best = -INFINITY;
    int arg = 0;
#pragma unroll 4
    for (int t = 0; t < win; ++t) {
      const int r = t / g.kw, q = t - r * g.kw;
      const float v = kern::to_f(src[(static_cast<std::int64_t>(r) * g.w + q) * g.c]);
      if (train) {
        if (t == 0 || v > best) {  // strict '>': the first max wins, NaN never replaces
          best = v;
          arg = t;
        }
      } else {
        best = t == 0 ? v : kern::nan_max(best, v);
      }
    }
    const std::int64_t o = static_cast<std::int64_t>(row) * len + j;
    y[o] = kern::from_f<TY>(best);
    if (train) code[o] = static_cast<signed char>(arg);
  }
}

template <class TD, class TX>
__global__ void maxpool_bwd_tiled_kernel(const TD* dy, const signed char* code, TX* dx, Win g) {
  const int row = blockIdx.y;
  const int n = row / g.p, op = row - n * g.p;
  const int len = g.q * g.c, win = g.kh * g.kw;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < len; j += gridDim.x * blockDim.x) {
    const int oq = j / g.c, ch = j - oq * g.c;
    const std::int64_t o = static_cast<std::int64_t>(row) * len + j;
    const float d = kern::to_f(dy[o]);
    const int hit = code[o];
    TX* dst = dx + ((static_cast<std::int64_t>(n) * g.h + op * g.kh) * g.w + oq * g.kw) * g.c + ch;
#pragma unroll 4
    for (int t = 0; t < win; ++t) {
      const int r = t / g.kw, q = t - r * g.kw;
      dst[(static_cast<std::int64_t>(r) * g.w + q) * g.c] = kern::from_f<TX>(t == hit ? d : 0.0f);
    }
  }
}

template <class TX, class TY>
__global__ void avgpool_fwd_kernel(const TX* x, TY* y, Win g) {
  TR_GRID_STRIDE(i, static_cast<std::int64_t>(g.n) * g.p * g.q * g.c) {
    const int ch = static_cast<int>(i % g.c);
    std::int64_t r = i / g.c;
    const int oq = static_cast<int>(r % g.q);
    r /= g.q;
    const int op = static_cast<int>(r % g.p);
    const int n = static_cast<int>(r / g.p);
    float acc = 0.0f;
    for (int t = 0; t < g.kh * g.kw; ++t) {
      const int hh = op * g.sh - g.ph + t / g.kw, ww = oq * g.sw - g.pw + t % g.kw;
      float v = 0.0f;
      if (hh >= 0 && hh < g.h && ww >= 0 && ww < g.w) {
        v = kern::to_f(x[((static_cast<std::int64_t>(n) * g.h + hh) * g.w + ww) * g.c + ch]);
      }
      acc = t == 0 ? v : acc + v;
    }
    y[i] = kern::from_f<TY>(acc * inv_count(g, op, oq));
  }
}

template <class TD, class TX>
__global__ void avgpool_bwd_kernel(const TD* dy, TX* dx, Win g) {
  TR_GRID_STRIDE(i, static_cast<std::int64_t>(g.n) * g.h * g.w * g.c) {
    const int ch = static_cast<int>(i % g.c);
    std::int64_t r = i / g.c;
    const int ww = static_cast<int>(r % g.w);
    r /= g.w;
    const int hh = static_cast<int>(r % g.h);
    const int n = static_cast<int>(r / g.h);
    float acc = 0.0f;
    for (int t = 0; t < g.kh * g.kw; ++t) {
      const int a = hh + g.ph - t / g.kw, b = ww + g.pw - t % g.kw;
      if (a < 0 || b < 0 || a % g.sh != 0 || b % g.sw != 0) continue;
      const int op = a / g.sh, oq = b / g.sw;
      if (op >= g.p || oq >= g.q) continue;
      const std::int64_t o = ((static_cast<std::int64_t>(n) * g.p + op) * g.q + oq) * g.c + ch;
      acc = acc + kern::to_f(dy[o]) * inv_count(g, op, oq);
    }
    dx[i] = kern::from_f<TX>(acc);
  }
}

template <class TX, class TY>
__global__ void gap_fwd_kernel(const TX* x, TY* y, int n, int hw, int c) {
  TR_GRID_STRIDE(i, static_cast<std::int64_t>(n) * c) {
    const std::int64_t b = i / c, ch = i % c;
    float acc = 0.0f;
    for (int k = 0; k < hw; ++k) acc = acc + kern::to_f(x[(b * hw + k) * c + ch]);
    y[i] = kern::from_f<TY>(acc / static_cast<float>(hw));
  }
}

constexpr int kGapCols = 32, kGapLanes = 16;  // a GAP block: 32 channels of one sample x 16 row lanes

// The same mean with the rows of a sample spread over a block: lane j sums rows j, j + 16, ... of channels
// 32x .. 32x + 31, then lane 0 adds the 16 lane sums in order (deterministic). One thread per (sample, channel)
// above summed up to H*W = 12,544 rows alone (EfficientNet's first squeeze: far from the bandwidth, RESULTS.md).
template <class TX, class TY>
__global__ void gap_fwd_lanes_kernel(const TX* __restrict__ x, TY* y, int hw, int c) {
  __shared__ float part[kGapLanes][kGapCols + 1];
  const int ch = blockIdx.x * kGapCols + threadIdx.x;
  const std::int64_t b = blockIdx.y;
  float acc = 0.0f;
  if (ch < c) {
    const TX* p = x + b * hw * c + ch;
#pragma unroll 4
    for (int k = threadIdx.y; k < hw; k += kGapLanes) acc += kern::to_f(p[static_cast<std::int64_t>(k) * c]);
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && ch < c) {
    float t = 0.0f;
    for (int j = 0; j < kGapLanes; ++j) t += part[j][threadIdx.x];
    y[b * c + ch] = kern::from_f<TY>(t / static_cast<float>(hw));
  }
}

template <class TD, class TX>
__global__ void gap_bwd_kernel(const TD* dy, TX* dx, int n, int hw, int c, float inv) {
  TR_GRID_STRIDE(i, static_cast<std::int64_t>(n) * hw * c) {
    const std::int64_t ch = i % c, b = i / (static_cast<std::int64_t>(hw) * c);
    dx[i] = kern::from_f<TX>(kern::to_f(dy[b * c + ch]) * inv);
  }
}

// Dispatches a two-dtype kernel launch: body(Tag<TA>, Tag<TB>).
template <class A, class Body>
void dispatch2(DT a, DT b, const A& args, Body&& body) {
  kern::dispatch_float(a, args, "input", [&](auto ta) {
    kern::dispatch_float(b, args, "output", [&](auto tb) { body(ta, tb); });
  });
}

// maxpool_fwd (code: its mask, written) and maxpool_inf (code null: no mask, NaN-propagating max).
template <class A>
std::unique_ptr<Op> maxpool_forward(const A& args, signed char* code) {
  const bool train = code != nullptr;
  const Win g = win_of(args);
  const DT xdt = args.x.dt, ydt = args.y.dt;
  const void* x = args.x.ptr;
  void* y = args.y.ptr;
  dispatch2(xdt, ydt, args, [](auto, auto) {});
  return fn_op([=](cudaStream_t s) {
    dispatch2(xdt, ydt, args, [&](auto ta, auto tb) {
      using TX = typename decltype(ta)::type;
      using TY = typename decltype(tb)::type;
      if (tiles_exactly(g)) {
        maxpool_fwd_tiled_kernel<TX, TY><<<tiled_grid(g), kern::kThreads, 0, s>>>(
            static_cast<const TX*>(x), static_cast<TY*>(y), code, g, train ? 1 : 0);
      } else {
        maxpool_fwd_kernel<TX, TY><<<kern::blocks_for(std::int64_t(g.n) * g.p * g.q * g.c), kern::kThreads, 0, s>>>(
            static_cast<const TX*>(x), static_cast<TY*>(y), code, g, train ? 1 : 0);
      }
    });
    check_launch("maxpool forward");
  });
}

}  // namespace

std::unique_ptr<Op> maxpool_fwd(Context&, const MaxpoolFwdArgs& args) {
  return maxpool_forward(args, static_cast<signed char*>(args.mask.ptr));
}

std::unique_ptr<Op> maxpool_inf(Context&, const MaxpoolInfArgs& args) { return maxpool_forward(args, nullptr); }

std::unique_ptr<Op> maxpool_bwd(Context&, const MaxpoolBwdArgs& args) {
  const Win g = win_of(args);
  const DT ddt = args.dy.dt, xdt = args.dx.dt;
  const void* dy = args.dy.ptr;
  const auto* code = static_cast<const signed char*>(args.mask.ptr);
  void* dx = args.dx.ptr;
  const int overlap = g.sh < g.kh || g.sw < g.kw ? 1 : 0;
  dispatch2(ddt, xdt, args, [](auto, auto) {});
  return fn_op([=](cudaStream_t s) {
    dispatch2(ddt, xdt, args, [&](auto ta, auto tb) {
      using TD = typename decltype(ta)::type;
      using TX = typename decltype(tb)::type;
      if (tiles_exactly(g)) {
        maxpool_bwd_tiled_kernel<TD, TX><<<tiled_grid(g), kern::kThreads, 0, s>>>(static_cast<const TD*>(dy), code,
                                                                                  static_cast<TX*>(dx), g);
      } else {
        maxpool_bwd_kernel<TD, TX><<<kern::blocks_for(std::int64_t(g.n) * g.h * g.w * g.c), kern::kThreads, 0, s>>>(
            static_cast<const TD*>(dy), code, static_cast<TX*>(dx), g, overlap);
      }
    });
    check_launch("maxpool_bwd");
  });
}

std::unique_ptr<Op> avgpool_fwd(Context&, const AvgpoolFwdArgs& args) {
  const Win g = win_of(args);
  const DT xdt = args.x.dt, ydt = args.y.dt;
  const void* x = args.x.ptr;
  void* y = args.y.ptr;
  dispatch2(xdt, ydt, args, [](auto, auto) {});
  return fn_op([=](cudaStream_t s) {
    dispatch2(xdt, ydt, args, [&](auto ta, auto tb) {
      using TX = typename decltype(ta)::type;
      using TY = typename decltype(tb)::type;
      avgpool_fwd_kernel<TX, TY><<<kern::blocks_for(std::int64_t(g.n) * g.p * g.q * g.c), kern::kThreads, 0, s>>>(
          static_cast<const TX*>(x), static_cast<TY*>(y), g);
    });
    check_launch("avgpool_fwd");
  });
}

std::unique_ptr<Op> avgpool_bwd(Context&, const AvgpoolBwdArgs& args) {
  const Win g = win_of(args);
  const DT ddt = args.dy.dt, xdt = args.dx.dt;
  const void* dy = args.dy.ptr;
  void* dx = args.dx.ptr;
  dispatch2(ddt, xdt, args, [](auto, auto) {});
  return fn_op([=](cudaStream_t s) {
    dispatch2(ddt, xdt, args, [&](auto ta, auto tb) {
      using TD = typename decltype(ta)::type;
      using TX = typename decltype(tb)::type;
      avgpool_bwd_kernel<TD, TX><<<kern::blocks_for(std::int64_t(g.n) * g.h * g.w * g.c), kern::kThreads, 0, s>>>(
          static_cast<const TD*>(dy), static_cast<TX*>(dx), g);
    });
    check_launch("avgpool_bwd");
  });
}

std::unique_ptr<Op> gap_fwd(Context&, const GapFwdArgs& args) {
  const int n = static_cast<int>(args.n), hw = static_cast<int>(args.hw), c = static_cast<int>(args.c);
  const DT xdt = args.x.dt, ydt = args.y.dt;
  const void* x = args.x.ptr;
  void* y = args.y.ptr;
  dispatch2(xdt, ydt, args, [](auto, auto) {});
  return fn_op([=](cudaStream_t s) {
    dispatch2(xdt, ydt, args, [&](auto ta, auto tb) {
      using TX = typename decltype(ta)::type;
      using TY = typename decltype(tb)::type;
      if (n <= 65535 && hw >= kGapLanes) {  // (grid.y holds the sample)
        const dim3 grid(static_cast<unsigned>((c + kGapCols - 1) / kGapCols), static_cast<unsigned>(n));
        gap_fwd_lanes_kernel<TX, TY><<<grid, dim3(kGapCols, kGapLanes), 0, s>>>(static_cast<const TX*>(x),
                                                                               static_cast<TY*>(y), hw, c);
      } else {
        gap_fwd_kernel<TX, TY><<<kern::blocks_for(std::int64_t(n) * c), kern::kThreads, 0, s>>>(
            static_cast<const TX*>(x), static_cast<TY*>(y), n, hw, c);
      }
    });
    check_launch("gap_fwd");
  });
}

std::unique_ptr<Op> gap_bwd(Context&, const GapBwdArgs& args) {
  const int n = static_cast<int>(args.n), hw = static_cast<int>(args.hw), c = static_cast<int>(args.c);
  const float inv = static_cast<float>(1.0 / hw);
  const DT ddt = args.dy.dt, xdt = args.dx.dt;
  const void* dy = args.dy.ptr;
  void* dx = args.dx.ptr;
  dispatch2(ddt, xdt, args, [](auto, auto) {});
  return fn_op([=](cudaStream_t s) {
    dispatch2(ddt, xdt, args, [&](auto ta, auto tb) {
      using TD = typename decltype(ta)::type;
      using TX = typename decltype(tb)::type;
      gap_bwd_kernel<TD, TX><<<kern::blocks_for(std::int64_t(n) * hw * c), kern::kThreads, 0, s>>>(
          static_cast<const TD*>(dy), static_cast<TX*>(dx), n, hw, c, inv);
    });
    check_launch("gap_bwd");
  });
}

}  // namespace tr::native
