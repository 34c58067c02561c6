// augment_affine (tr/backend/augment.py has the rule, cpu/ops/augment.py the CPU twin): one block per sample.
// Lane 0 of warps 0-3 draws the sample's parameters from the Philox streams tr.data's workers use (key =
// splitmix64(prefix ^ index), each transform's stream at its chain slot << 32, the flip at 0, the erasing from
// 16), with the workers' formulas in double; then every thread samples the source image once per output
// pixel through the composed inverse map (RandomScale's resize and centre crop, the rotation about the centre,
// the crop shift), bilinearly with zeros outside, normalises, erases, flips and writes FP32 or FP16 NHWC.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/context.hpp"
#include "ops/args/augment.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

constexpr int kMaxC = 4;

// The draw parameters stay in double, as the CPU twin computes with them (0.8 as a float would draw other scales).
struct Spec {
  int n, h, w, c, c_out, pad, crop_slot, rotation_slot, scale_slot;
  double degrees, scale_lo, scale_hi, erase_p, erase_scale_lo, erase_scale_hi, erase_ratio_lo, erase_ratio_hi;
  double flip_p;
  float erase_value;
  float mean[kMaxC], std[kMaxC];
};

struct Params {
  int dy, dx, nh, nw, oy, ox, ei, ej, eh, ew, flip;
  float ca, sa;
};

// tr.data's Stream: the k-th draw of a stream is Philox(key, base + k).
struct Stream {
  unsigned long long key, base, k;
  __device__ uint4 next() { return kern::philox4(key, base + k++); }
  __device__ double uniform() { return double(float(next().x >> 8) * (1.0f / 16777216.0f)); }
  __device__ double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  __device__ long long randint(long long lo, long long hi) {  // closed [lo, hi]
    const uint4 r = next();
    const unsigned long long v = (static_cast<unsigned long long>(r.x) << 32) | r.y;
    return lo + static_cast<long long>(v % static_cast<unsigned long long>(hi - lo + 1));
  }
};

__device__ long long center_offset(long long n, long long crop) {  // tr.data's, for n >= crop
  return static_cast<long long>(rint(double(n - crop) / 2.0));
}

// The draws of one sample, each transform's stream by lane 0 of its own warp (`part`): the streams are
// independent, so the block waits for the slowest one (the erasing's attempts) instead of their sum.
__device__ void draw(const Spec& s, unsigned long long key, int part, Params& p) {
  if (part == 0) {
    p.dy = p.dx = 0;
    if (s.pad > 0) {
      Stream st{key, static_cast<unsigned long long>(s.crop_slot) << 32, 0};
      p.dy = int(st.randint(0, 2 * s.pad)) - s.pad;
      p.dx = int(st.randint(0, 2 * s.pad)) - s.pad;
    }
    p.flip = 0;
    if (s.flip_p > 0.0) {
      Stream st{key, 0, 0};
      p.flip = st.uniform() < s.flip_p ? 1 : 0;
    }
  } else if (part == 1) {
    p.ca = 1.0f;
    p.sa = 0.0f;
    if (s.degrees > 0.0) {
      Stream st{key, static_cast<unsigned long long>(s.rotation_slot) << 32, 0};
      const double th = st.uniform(-s.degrees, s.degrees) * (M_PI / 180.0);
      p.ca = float(cos(th));
      p.sa = float(sin(th));
    }
  } else if (part == 2) {
    p.nh = s.h;
    p.nw = s.w;
    p.oy = p.ox = 0;
    if (s.scale_lo != 1.0 || s.scale_hi != 1.0) {
      Stream st{key, static_cast<unsigned long long>(s.scale_slot) << 32, 0};
      const double sc = st.uniform(s.scale_lo, s.scale_hi);
      const long long nh = max(1LL, static_cast<long long>(rint(s.h * sc)));
      const long long nw = max(1LL, static_cast<long long>(rint(s.w * sc)));
      p.nh = int(nh);
      p.nw = int(nw);
      p.oy = int(nh > s.h ? center_offset(nh, s.h) : -((s.h - nh) / 2));
      p.ox = int(nw > s.w ? center_offset(nw, s.w) : -((s.w - nw) / 2));
    }
  } else if (part == 3) {
    p.ei = p.ej = p.eh = p.ew = 0;
    if (s.erase_p > 0.0) {  // torchvision.transforms.RandomErasing.get_params, with Philox draws
      Stream st{key, 16, 0};
      if (st.uniform() < s.erase_p) {
        const double area = double(s.h) * double(s.w);
        const double lr0 = log(s.erase_ratio_lo), lr1 = log(s.erase_ratio_hi);
        for (int attempt = 0; attempt < 10; ++attempt) {
          const double ea = area * st.uniform(s.erase_scale_lo, s.erase_scale_hi);
          const double ar = exp(st.uniform(lr0, lr1));
          const long long hh = static_cast<long long>(rint(sqrt(ea * ar)));
          const long long ww = static_cast<long long>(rint(sqrt(ea / ar)));
          if (!(hh < s.h && ww < s.w)) continue;
          p.ei = int(st.randint(0, s.h - hh));
          p.ej = int(st.randint(0, s.w - ww));
          p.eh = int(hh);
          p.ew = int(ww);
          break;
        }
      }
    }
  }
}

constexpr int kDrawParts = 4;  // the block needs at least kDrawParts warps

template <class TY>
__global__ void augment_kernel(const unsigned char* __restrict__ src, const int* __restrict__ index,
                               const unsigned long long* __restrict__ key, TY* __restrict__ y, Spec s) {
  __shared__ Params sp;
  __shared__ int sidx;
  const int b = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0 && warp < kDrawParts) {
    int i = index[b];
    if (i < 0 || i >= s.n) i = -1;  // a corrupt order reads nothing: the sample is all zeros before normalising
    if (warp == 0) sidx = i;
    draw(s, kern::splitmix64(*key ^ static_cast<unsigned long long>(i < 0 ? 0 : i)), warp, sp);
  }
  __syncthreads();
  const Params p = sp;
  const int idx = sidx;
  const unsigned char* img = src + static_cast<std::int64_t>(idx < 0 ? 0 : idx) * s.h * s.w * s.c;
  const float syf = float(s.h) / float(p.nh), sxf = float(s.w) / float(p.nw);
  const float cy = 0.5f * float(s.h - 1), cx = 0.5f * float(s.w - 1);
  const int hw = s.h * s.w;
  for (int o = threadIdx.x; o < hw; o += blockDim.x) {
    const int oy_ = o / s.w, ox_ = o % s.w;
    const int xs = p.flip ? s.w - 1 - ox_ : ox_;  // the flip mirrors the finished image
    // the same float operations as cpu/ops/augment.py source_coords
    const float y1 = (float(oy_) + float(p.oy) + 0.5f) * syf - 0.5f;
    const float x1 = (float(xs) + float(p.ox) + 0.5f) * sxf - 0.5f;
    const float xc = x1 - cx, yc = y1 - cy;
    const float x2 = p.ca * xc - p.sa * yc + cx;  // --fmad=false: each operation rounded, as numpy's
    const float y2 = p.sa * xc + p.ca * yc + cy;
    const float yf = y2 + float(p.dy), xf = x2 + float(p.dx);
    const float y0f = floorf(yf), x0f = floorf(xf);
    const float fy = yf - y0f, fx = xf - x0f;
    const int y0 = int(y0f), x0 = int(x0f);
    // the erasing rectangle lies in the output's coordinates (after the flip), as tr.data's fused pass has it
    const bool erased = oy_ >= p.ei && oy_ < p.ei + p.eh && ox_ >= p.ej && ox_ < p.ej + p.ew;
    TY* out = y + (static_cast<std::int64_t>(b) * hw + o) * s.c_out;
    for (int ch = 0; ch < s.c_out; ++ch) {
      float v = 0.0f;
      if (ch < s.c) {
        if (erased) {
          v = s.erase_value;
        } else {
          float acc = 0.0f;
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            const int yi = y0 + (t >> 1), xi = x0 + (t & 1);
            const float wgt = ((t >> 1) ? fy : 1.0f - fy) * ((t & 1) ? fx : 1.0f - fx);
            if (idx >= 0 && yi >= 0 && yi < s.h && xi >= 0 && xi < s.w)
              acc += wgt * float(img[(static_cast<std::int64_t>(yi) * s.w + xi) * s.c + ch]);
          }
          v = (acc * (1.0f / 255.0f) - s.mean[ch]) / s.std[ch];
        }
      }
      out[ch] = kern::from_f<TY>(v);
    }
  }
}

}  // namespace

std::unique_ptr<Op> augment_affine(Context&, const AugmentAffineArgs& args) {
  Spec s{};
  s.n = int(args.n);
  s.h = int(args.h);
  s.w = int(args.w);
  s.c = int(args.c);
  s.c_out = int(args.c_out);
  s.pad = int(args.pad);
  s.crop_slot = int(args.crop_slot);
  s.rotation_slot = int(args.rotation_slot);
  s.scale_slot = int(args.scale_slot);
  s.degrees = args.degrees;
  s.scale_lo = args.scale_lo;
  s.scale_hi = args.scale_hi;
  s.erase_p = args.erase_p;
  s.erase_scale_lo = args.erase_scale_lo;
  s.erase_scale_hi = args.erase_scale_hi;
  s.erase_ratio_lo = args.erase_ratio_lo;
  s.erase_ratio_hi = args.erase_ratio_hi;
  s.erase_value = float(args.erase_value);
  s.flip_p = args.flip_p;
  if (s.c < 1 || s.c > kMaxC || s.c_out < s.c || s.c_out > kMaxC)
    bad(args, "1 to 4 channels, got " + std::to_string(s.c) + " -> " + std::to_string(s.c_out));
  if (args.mean.size() != std::size_t(s.c) || args.std.size() != std::size_t(s.c)) {
    bad(args, "mean and std need " + std::to_string(s.c) + " values (one a channel), got " +
              std::to_string(args.mean.size()) + " and " + std::to_string(args.std.size()));
  }
  for (int k = 0; k < kMaxC; ++k) {  // the channels past c are never read
    s.mean[k] = k < s.c ? float(args.mean[k]) : 0.0f;
    s.std[k] = k < s.c ? float(args.std[k]) : 1.0f;
  }
  const std::int64_t batch = args.batch;
  const auto* src = static_cast<const unsigned char*>(args.src.ptr);
  const auto* index = static_cast<const int*>(args.index.ptr);
  const auto* key = static_cast<const unsigned long long*>(args.key.ptr);
  void* y = args.y.ptr;
  const DT ydt = args.y.dt;
  kern::dispatch_float(ydt, args, "y", [](auto) {});
  return fn_op([=](cudaStream_t st) {
    if (batch == 0) return;
    kern::dispatch_float(ydt, args, "y", [&](auto ty) {
      using TY = typename decltype(ty)::type;
      static_assert(256 >= 32 * kDrawParts, "a warp per draw");
      augment_kernel<TY><<<static_cast<unsigned>(batch), 256, 0, st>>>(src, index, key, static_cast<TY*>(y), s);
    });
    check_launch("augment_affine");
  });
}

}  // namespace tr::native
