// image_resample (tr/backend/rules/image.py has the rule and the geometry table, cpu/ops/image.py the CPU twin):
// decoded RGB regions cropped, resized with tr.data's antialiased bilinear filter, flipped, erased and
// normalised into the input batch. One block per (output row, sample). The resize weights are computed here in
// double from the crop's size, as tr.data's build_axis computes them (the same IEEE operations in the same order,
// no contraction: the extension builds with --fmad=false), so they are its int16 weights to the bit; the sums
// are integers (from 2^13, shifted right by 14, clamped to u8 after each pass), in tr.data's pass order (vertical
// first when the output has fewer rows than the source rows read): the bytes before the normalisation are
// tr.data's for the same decoded pixels.
#include <climits>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>

#include "cuda/context.hpp"
#include "ops/args/image.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

constexpr int kPrec = 14;
constexpr int kHalf = 1 << (kPrec - 1);
constexpr int kC = 3;            // decoded images are RGB
constexpr int kMaxOut = 8;       // output channels (3, or padded)
constexpr int kMaxTaps = 2 * 64 + 1;      // rules/image.py MAX_SCALE: a crop side at most 64 output sides
constexpr int kSharedBytes = 40 * 1024;  // the block's u8 intermediate (rules/image.py MAX_TMP_BYTES)
constexpr int kThreads = 256;

struct Geom {  // a sample's geometry row (rules/image.py's GEOM; the columns by name: codes.hpp's GeomCol)
  int slot, roi_h, roi_w, top, left, crop_h, crop_w, flip, ey, ex, eh, ew, roi_y, roi_x, out_h, out_w, out_y, out_x;
};

// Row b's column c.
__device__ __forceinline__ int geom_col(const int* gp, GeomCol c) { return gp[static_cast<int>(c)]; }

// Sample b's row of the geometry table.
__device__ __forceinline__ const int* geom_row(const int* geom, int b) {
  return geom + static_cast<long long>(b) * kImageGeomRow;
}

__device__ __forceinline__ Geom geom_of(const int* gp) {
  using G = GeomCol;
  auto c = [gp](G k) { return geom_col(gp, k); };
  return Geom{c(G::SLOT),    c(G::ROI_H),   c(G::ROI_W),   c(G::TOP),     c(G::LEFT),    c(G::CROP_H),
              c(G::CROP_W),  c(G::FLIP),    c(G::ERASE_Y), c(G::ERASE_X), c(G::ERASE_H), c(G::ERASE_W),
              c(G::ROI_Y),   c(G::ROI_X),   c(G::OUT_H),   c(G::OUT_W),   c(G::OUT_Y),   c(G::OUT_X)};
}

// One axis of the resize: crop [in0, in0 + len) of the region to `out` samples (tr.data's build_axis).
struct Axis {
  int in0, len, out;
  double scale, support, inv;
  int ksize;
  bool shift;  // len == out: one tap of weight 1

  __device__ Axis(int in0_, int len_, int out_) : in0(in0_), len(len_), out(out_) {
    shift = len == out;
    scale = double(len) / double(out);
    support = scale > 1.0 ? scale : 1.0;
    inv = 1.0 / support;
    ksize = int(ceil(support)) * 2 + 1;
  }
  // First source sample (region coordinates) and tap count of output k.
  __device__ void taps(int k, int& start, int& n, double& center, int& xmin) const {
    if (shift) {
      start = in0 + k;
      n = 1;
      return;
    }
    center = (k + 0.5) * scale;
    xmin = int(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > len) xmax = len;
    n = min(xmax - xmin, ksize);
    start = in0 + xmin;
  }
  __device__ double tri(int j, int xmin, double center) const {
    const double t = (j + xmin - center + 0.5) * inv;
    const double w = 1.0 - fabs(t);
    return w > 0.0 ? w : 0.0;
  }
  // Output k's taps: its first source sample, count, and what its weights are computed from (weight()).
  struct Taps {
    int start, n, xmin;
    double center, total;
  };
  __device__ Taps plan(int k) const {
    Taps t{0, 0, 0, 0.0, 0.0};
    taps(k, t.start, t.n, t.center, t.xmin);
    if (!shift)
      for (int j = 0; j < t.n; ++j) t.total += tri(j, t.xmin, t.center);
    return t;
  }
  // The int16 weight of tap j (build_axis: normalised in double, then int(w * 2^14 + 0.5)).
  __device__ int weight(const Taps& t, int j) const {
    if (shift) return 1 << kPrec;
    const double v = t.total > 0.0 ? tri(j, t.xmin, t.center) / t.total : 0.0;
    return int(v * double(1 << kPrec) + 0.5);
  }
  __device__ void span(int k, int& start, int& end) const {
    double c;
    int x, n;
    taps(k, start, n, c, x);
    end = start + n;
  }
};

__device__ __forceinline__ unsigned char fix_u8(int acc) {
  const int v = acc >> kPrec;
  return static_cast<unsigned char>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// min of the starts and max of the ends of outputs k0 .. k1 - 1 of an axis, over the block.
__device__ void axis_extent(const Axis& a, int k0, int k1, int& lo, int& hi, int* red) {
  int l = INT_MAX, h = INT_MIN;
  for (int k = k0 + int(threadIdx.x); k < k1; k += blockDim.x) {
    int s, e;
    a.span(k, s, e);
    l = min(l, s);
    h = max(h, e);
  }
  for (int o = 16; o > 0; o >>= 1) {
    l = min(l, __shfl_xor_sync(0xffffffffu, l, o));
    h = max(h, __shfl_xor_sync(0xffffffffu, h, o));
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) {
    red[warp] = l;
    red[32 + warp] = h;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < nw; ++k) {
      red[0] = min(red[0], red[k]);
      red[32] = max(red[32], red[32 + k]);
    }
  }
  __syncthreads();
  lo = red[0];
  hi = red[32];
  __syncthreads();
}

struct Norm {
  float a[kC], b[kC], ev[kC];
  int c_out;
};

template <class TY>
__device__ void write_norm(TY* row, int x, int ow, const Geom& g, int y, const int* acc_or_px, const Norm& nm) {
  const int xo = g.flip ? ow - 1 - x : x;
  const bool erased = g.eh > 0 && y >= g.ey && y < g.ey + g.eh && xo >= g.ex && xo < g.ex + g.ew;
  TY* o = row + static_cast<long long>(xo) * nm.c_out;
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    const float v = erased ? nm.ev[c] : __fadd_rn(__fmul_rn(float(acc_or_px[c]), nm.a[c]), nm.b[c]);
    o[c] = kern::from_f<TY>(v);
  }
  for (int c = kC; c < nm.c_out; ++c) o[c] = kern::from_f<TY>(0.0f);
}

template <class TY>
__device__ void write_px(TY* row, int x, int ow, const Geom& g, int y, const int* acc_or_px, const Norm& nm) {
  if constexpr (std::is_same_v<TY, unsigned char>) {  // image_jitter's input: the resized pixels alone
    for (int c = 0; c < kC; ++c) row[static_cast<long long>(x) * kC + c] = static_cast<unsigned char>(acc_or_px[c]);
    return;
  } else {
    write_norm(row, x, ow, g, y, acc_or_px, nm);
  }
}

template <class TY>
__global__ void __launch_bounds__(kThreads) image_resample_kernel(const unsigned char* __restrict__ src,
                                                                  const int* __restrict__ geom, TY* __restrict__ y,
                                                                  int oh, int ow, Norm nm) {
  __shared__ unsigned char tmp[kSharedBytes];
  __shared__ int wy[kMaxTaps];
  __shared__ int red[64];
  const int row = blockIdx.x, b = blockIdx.y;
  const Geom g = geom_of(geom_row(geom, b));
  // the crop is resized to fh x fw, of which this sample is the oh x ow window at (out_y, out_x)
  const int fh = g.out_h > 0 ? g.out_h : oh, fw = g.out_w > 0 ? g.out_w : ow;
  const unsigned char* img = src + static_cast<long long>(g.slot);
  const long long pitch = static_cast<long long>(g.roi_w) * kC;
  TY* out = y + (static_cast<long long>(b) * oh + row) * static_cast<long long>(ow) * nm.c_out;
  const Axis ay(g.top, g.crop_h, fh), ax(g.left, g.crop_w, fw);
  int rlo, rhi, clo, chi;
  axis_extent(ay, 0, fh, rlo, rhi, red);  // the pass order is decided on the whole resize, as tr.data's
  axis_extent(ax, g.out_x, g.out_x + ow, clo, chi, red);
  const Axis::Taps ty = ay.plan(g.out_y + row);  // (every thread: the same values)
  const int ys = ty.start, yn = ty.n;
  for (int j = threadIdx.x; j < yn && j < kMaxTaps; j += blockDim.x) wy[j] = ay.weight(ty, j);
  __syncthreads();
  // What the planner guarantees (rules/image.py): the crop in the region, at most kMaxTaps taps, the block's
  // intermediate in its buffer. A row that breaks it is left as zeros rather than read out of bounds.
  const bool vfirst = fh < rhi - rlo;
  const bool fits = yn <= kMaxTaps && (vfirst ? (chi - clo) * kC <= kSharedBytes : yn * ow * kC <= kSharedBytes) &&
                    g.top >= 0 && g.left >= 0 && g.top + g.crop_h <= g.roi_h && g.left + g.crop_w <= g.roi_w &&
                    g.out_y >= 0 && g.out_x >= 0 && g.out_y + oh <= fh && g.out_x + ow <= fw;
  if (!fits) {
    for (int i = threadIdx.x; i < ow * nm.c_out; i += blockDim.x) {
      if constexpr (std::is_same_v<TY, unsigned char>)
        out[i] = 0;
      else
        out[i] = kern::from_f<TY>(0.0f);
    }
    return;
  }
  if (vfirst) {
    // vertical first: this row's vertical pass over the columns the horizontal one reads, then the horizontal
    const int ncols = chi - clo;
    for (int i = threadIdx.x; i < ncols * kC; i += blockDim.x) {
      const unsigned char* p = img + static_cast<long long>(ys) * pitch + static_cast<long long>(clo) * kC + i;
      int acc = kHalf;
      for (int t = 0; t < yn; ++t) acc += wy[t] * int(p[t * pitch]);
      tmp[i] = fix_u8(acc);
    }
    __syncthreads();
    for (int x = threadIdx.x; x < ow; x += blockDim.x) {
      const Axis::Taps tx = ax.plan(g.out_x + x);
      int acc[kC] = {kHalf, kHalf, kHalf};
      const unsigned char* p = tmp + (tx.start - clo) * kC;
      for (int t = 0; t < tx.n; ++t) {
        const int w = ax.weight(tx, t);
#pragma unroll
        for (int c = 0; c < kC; ++c) acc[c] += w * int(p[t * kC + c]);
      }
      int px[kC];
#pragma unroll
      for (int c = 0; c < kC; ++c) px[c] = fix_u8(acc[c]);
      write_px(out, x, ow, g, row, px, nm);
    }
  } else {
    // horizontal first: the source rows this output row reads, each resized horizontally, then the vertical pass
    for (int x = threadIdx.x; x < ow; x += blockDim.x) {
      const Axis::Taps tx = ax.plan(g.out_x + x);
      for (int r = 0; r < yn; ++r) {
        const unsigned char* p = img + static_cast<long long>(ys + r) * pitch + static_cast<long long>(tx.start) * kC;
        int acc[kC] = {kHalf, kHalf, kHalf};
        for (int t = 0; t < tx.n; ++t) {
          const int w = ax.weight(tx, t);
#pragma unroll
          for (int c = 0; c < kC; ++c) acc[c] += w * int(p[t * kC + c]);
        }
#pragma unroll
        for (int c = 0; c < kC; ++c) tmp[(r * ow + x) * kC + c] = fix_u8(acc[c]);
      }
    }
    __syncthreads();
    for (int x = threadIdx.x; x < ow; x += blockDim.x) {
      int acc[kC] = {kHalf, kHalf, kHalf};
      for (int r = 0; r < yn; ++r)
#pragma unroll
        for (int c = 0; c < kC; ++c) acc[c] += wy[r] * int(tmp[(r * ow + x) * kC + c]);
      int px[kC];
#pragma unroll
      for (int c = 0; c < kC; ++c) px[c] = fix_u8(acc[c]);
      write_px(out, x, ow, g, row, px, nm);
    }
  }
}

// What both ops end with: y's channel count (3..8, the ones past 3 zeros) and each channel's normalisation
// coefficients and erased value.
template <class A>
Norm norm_of(const A& args) {
  Norm nm{};
  nm.c_out = int(args.c_out);
  if (nm.c_out < kC || nm.c_out > kMaxOut)
    bad(args, "output channels must be 3.." + std::to_string(kMaxOut) + ", got " + std::to_string(nm.c_out));
  for (const auto* v : {&args.norm_a, &args.norm_b, &args.erase}) {
    if (v->size() != std::size_t(kC)) {
      bad(args, "norm_a, norm_b and erase need 3 values each (one a channel), got " +
                std::to_string(args.norm_a.size()) + ", " + std::to_string(args.norm_b.size()) + " and " +
                std::to_string(args.erase.size()));
    }
  }
  for (int c = 0; c < kC; ++c) {
    nm.a[c] = float(args.norm_a[c]);
    nm.b[c] = float(args.norm_b[c]);
    nm.ev[c] = float(args.erase[c]);
  }
  return nm;
}

// --- ColorJitter (tr.data's color.cpp: torchvision's float32 formulas, each result truncated to u8) -------------
// One block per sample. With contrast, a first pass sums the grey of the pixels after the ops before it (integer
// sums: exact in any order); the second pass recomputes those ops from the pixels and runs the rest, then flips,
// normalises and erases as image_resample does. --fmad=false and IEEE division: color.cpp's float32 results.
struct Jit {
  float f[4], c1, s1;  // the factors' floats; float(1 - factor) of contrast and saturation
  int ops[4], n, pc;   // the enabled ops in order (0 brightness, 1 contrast, 2 saturation, 3 hue); contrast's place
};

__device__ __forceinline__ float clamp_trunc(float v) { return float(int(fminf(fmaxf(v, 0.f), 255.f))); }
__device__ __forceinline__ float gray3(float r, float g, float b) { return (0.2989f * r + 0.587f * g) + 0.114f * b; }

__device__ void hue(float& r, float& g, float& b, float hf) {
  const float R = r / 255.f, G = g / 255.f, B = b / 255.f;
  const float maxc = fmaxf(fmaxf(R, G), B), minc = fminf(fminf(R, G), B);
  const bool eqc = maxc == minc;
  const float cr = maxc - minc;
  const float s = cr / (eqc ? 1.f : maxc);
  const float crd = eqc ? 1.f : cr;
  const float rc = (maxc - R) / crd, gc = (maxc - G) / crd, bc = (maxc - B) / crd;
  const float hr = maxc == R ? bc - gc : 0.f;
  const float hg = (maxc == G && maxc != R) ? (2.f + rc) - bc : 0.f;
  const float hb = (maxc != G && maxc != R) ? (4.f + gc) - rc : 0.f;
  const float a = ((hr + hg) + hb) / 6.f + 1.f;
  const float h = a >= 1.f ? a - 1.f : a;
  const float x = h + hf;
  const float hh = x < 0.f ? x + 1.f : (x >= 1.f ? x - 1.f : x);
  const float hs = hh * 6.f;
  const float i6 = floorf(hs);
  const float f = hs - i6;
  const int ii = int(i6) == 6 ? 0 : int(i6);
  const float v = maxc;
  const float p = fminf(fmaxf(v * (1.f - s), 0.f), 1.f);
  const float q = fminf(fmaxf(v * (1.f - s * f), 0.f), 1.f);
  const float t = fminf(fmaxf(v * (1.f - s * (1.f - f)), 0.f), 1.f);
  const float ro = (ii == 0 || ii == 5) ? v : (ii == 1 ? q : (ii == 4 ? t : p));
  const float go = (ii == 1 || ii == 2) ? v : (ii == 0 ? t : (ii == 3 ? q : p));
  const float bo = (ii == 3 || ii == 4) ? v : (ii == 2 ? t : (ii == 5 ? q : p));
  r = float(int(ro * 255.999f));
  g = float(int(go * 255.999f));
  b = float(int(bo * 255.999f));
}

__device__ void jit_op(int op, const Jit& j, float mean, float& r, float& g, float& b) {
  switch (op) {
    case 0:
      r = clamp_trunc(j.f[0] * r + 0.f);
      g = clamp_trunc(j.f[0] * g + 0.f);
      b = clamp_trunc(j.f[0] * b + 0.f);
      return;
    case 1: {
      const float add = j.c1 * mean;
      r = clamp_trunc(j.f[1] * r + add);
      g = clamp_trunc(j.f[1] * g + add);
      b = clamp_trunc(j.f[1] * b + add);
      return;
    }
    case 2: {
      const float m = j.s1 * float(int(gray3(r, g, b)));
      r = clamp_trunc(j.f[2] * r + m);
      g = clamp_trunc(j.f[2] * g + m);
      b = clamp_trunc(j.f[2] * b + m);
      return;
    }
    default:
      hue(r, g, b, j.f[3]);
  }
}

template <class TY>
__global__ void __launch_bounds__(kThreads) image_jitter_kernel(const unsigned char* __restrict__ x,
                                                                const int* __restrict__ geom, TY* __restrict__ y,
                                                                int h, int w, Norm nm) {
  __shared__ long long part[kThreads / 32];
  const int b = blockIdx.x;
  const int* gp = geom_row(geom, b);
  const Geom g = geom_of(gp);
  using G = GeomCol;
  Jit j{};
  const GeomCol factors[4] = {G::JIT_B, G::JIT_C, G::JIT_S, G::JIT_H};  // the factors' bits, in op-code order
  for (int k = 0; k < 4; ++k) j.f[k] = __int_as_float(geom_col(gp, factors[k]));
  j.c1 = __int_as_float(geom_col(gp, G::JIT_C1));
  j.s1 = __int_as_float(geom_col(gp, G::JIT_S1));
  const int code = geom_col(gp, G::JIT_ORDER);
  j.pc = -1;
  for (int k = 0; k < 4; ++k) {
    const int op = (code >> (2 * k)) & 3;
    if (!((code >> (8 + op)) & 1)) continue;
    if (op == 1) j.pc = j.n;
    j.ops[j.n++] = op;
  }
  const long long npx = static_cast<long long>(h) * w;
  const unsigned char* img = x + static_cast<long long>(b) * npx * kC;
  float mean = 0.f;
  if (j.pc >= 0) {  // pass 1: the grey after the ops before contrast, summed
    long long sum = 0;
    for (long long i = threadIdx.x; i < npx; i += blockDim.x) {
      float r = img[3 * i], gg = img[3 * i + 1], bb = img[3 * i + 2];
      for (int k = 0; k < j.pc; ++k) jit_op(j.ops[k], j, 0.f, r, gg, bb);
      sum += int(gray3(r, gg, bb));
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = sum;
    __syncthreads();
    long long total = 0;
    for (int k = 0; k < int(blockDim.x >> 5); ++k) total += part[k];
    mean = __fdiv_rn(__ll2float_rn(total), __ll2float_rn(npx));  // float(sum) / float(pixels), as color.cpp
  }
  TY* out = y + static_cast<long long>(b) * npx * nm.c_out;
  for (long long i = threadIdx.x; i < npx; i += blockDim.x) {
    float r = img[3 * i], gg = img[3 * i + 1], bb = img[3 * i + 2];
    for (int k = 0; k < j.n; ++k) jit_op(j.ops[k], j, k >= j.pc && j.pc >= 0 ? mean : 0.f, r, gg, bb);
    const int px[kC] = {int(r), int(gg), int(bb)};
    const int row = int(i / w), col = int(i % w);
    write_norm(out + static_cast<long long>(row) * w * nm.c_out, col, w, g, row, px, nm);
  }
}

}  // namespace

std::unique_ptr<Op> image_resample(Context&, const ImageResampleArgs& args) {
  const int batch = int(args.batch), oh = int(args.h), ow = int(args.w);
  const Norm nm = norm_of(args);
  if (oh < 1 || ow < 1 || 3 * ow * kC > kSharedBytes)  // horizontal first: up to 3 resized source rows
    bad(args, "output " + std::to_string(oh) + "x" + std::to_string(ow) + " is too wide for the block's buffer");
  const auto* src = static_cast<const unsigned char*>(args.src.ptr);
  const auto* geom = static_cast<const int*>(args.geom.ptr);
  void* y = args.y.ptr;
  const DT ydt = args.y.dt;
  if (ydt == DT::U8) {  // the resized pixels alone (image_jitter's input)
    if (nm.c_out != kC) bad(args, "a UINT8 y has 3 channels, got " + std::to_string(nm.c_out));
    return fn_op([=](cudaStream_t st) {
      if (batch == 0) return;
      image_resample_kernel<unsigned char><<<dim3(unsigned(oh), unsigned(batch)), kThreads, 0, st>>>(
          src, geom, static_cast<unsigned char*>(y), oh, ow, nm);
      check_launch("image_resample");
    });
  }
  kern::dispatch_float(ydt, args, "y", [](auto) {});
  return fn_op([=](cudaStream_t st) {
    if (batch == 0) return;
    kern::dispatch_float(ydt, args, "y", [&](auto ty) {
      using TY = typename decltype(ty)::type;
      image_resample_kernel<TY><<<dim3(unsigned(oh), unsigned(batch)), kThreads, 0, st>>>(
          src, geom, static_cast<TY*>(y), oh, ow, nm);
    });
    check_launch("image_resample");
  });
}

std::unique_ptr<Op> image_jitter(Context&, const ImageJitterArgs& args) {
  const int batch = int(args.batch), h = int(args.h), w = int(args.w);
  const Norm nm = norm_of(args);
  const auto* x = static_cast<const unsigned char*>(args.x.ptr);
  const auto* geom = static_cast<const int*>(args.geom.ptr);
  void* y = args.y.ptr;
  const DT ydt = args.y.dt;
  kern::dispatch_float(ydt, args, "y", [](auto) {});
  return fn_op([=](cudaStream_t st) {
    if (batch == 0) return;
    kern::dispatch_float(ydt, args, "y", [&](auto ty) {
      using TY = typename decltype(ty)::type;
      image_jitter_kernel<TY><<<unsigned(batch), kThreads, 0, st>>>(x, geom, static_cast<TY*>(y), h, w, nm);
    });
    check_launch("image_jitter");
  });
}

}  // namespace tr::native
