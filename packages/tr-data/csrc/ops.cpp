#include "ops.hpp"

#include <algorithm>
#include <cstring>

#include "blur.hpp"
#include "color.hpp"
#include "pipeline.hpp"
#include "rotate.hpp"

namespace trd {

namespace {

std::string dims(long long h, long long w) { return std::to_string(h) + "x" + std::to_string(w); }

// Fill values as uint8 for `c` channels (one value broadcast, or one per channel).
void fill_u8(const OpSpec& op, const std::vector<double>& fill, int c, uint8_t* out) {
  if (fill.size() != 1 && fill.size() != size_t(c))
    throw DataErr(op.name + ": fill has " + std::to_string(fill.size()) + " values but the image has " +
                  std::to_string(c) + " channels");
  for (int k = 0; k < c; ++k) {
    const double v = fill.size() == 1 ? fill[0] : fill[size_t(k)];
    out[k] = clip_u8(int(std::lround(v)));
  }
}

void fill_f32(const OpSpec& op, const std::vector<double>& fill, int c, float* out) {
  if (fill.size() != 1 && fill.size() != size_t(c))
    throw DataErr(op.name + ": fill has " + std::to_string(fill.size()) + " values but the image has " +
                  std::to_string(c) + " channels");
  for (int k = 0; k < c; ++k) out[k] = float(fill.size() == 1 ? fill[0] : fill[size_t(k)]);
}

// torchvision center_crop offset along one axis: negative when the crop is larger (padding).
long long center_offset(int n, long long crop) {
  if (crop > n) return -((crop - n) / 2);
  return round_half_even(double(n - crop) / 2.0);
}

const char* pad_mode_name(long long m) {
  switch (m) {
    case 0: return "constant";
    case 1: return "edge";
    case 2: return "reflect";
    case 3: return "symmetric";
  }
  return "?";
}

// build_axis(in0, in_len, out_full, o0, count), remembered per thread: a random scale of a fixed-size
// image takes few distinct sizes, so the weights are computed once each (build_axis is a pure
// function of its arguments: same weights, same bytes).
const Axis& cached_axis(int in0, int in_len, int out_full, int o0, int count) {
  struct Entry {
    std::array<int, 5> key;
    Axis axis;
  };
  constexpr size_t kEntries = 64;
  thread_local std::vector<Entry> cache;
  thread_local size_t next = 0;
  const std::array<int, 5> key{in0, in_len, out_full, o0, count};
  thread_local const Axis* last = nullptr;
  for (const Entry& e : cache)
    if (e.key == key) return *(last = &e.axis);
  // no reallocation ever: the caller holds a reference from the previous call while making this one
  if (cache.capacity() < kEntries) cache.reserve(kEntries);
  if (cache.size() < kEntries) {
    cache.push_back(Entry{key, Axis{}});
    build_axis(cache.back().axis, in0, in_len, out_full, o0, count);
    return *(last = &cache.back().axis);
  }
  // full: replace round robin, skipping the entry just returned (the caller may still hold it)
  if (&cache[next].axis == last) next = (next + 1) % kEntries;
  Entry& e = cache[next];
  next = (next + 1) % kEntries;
  e.key = key;
  build_axis(e.axis, in0, in_len, out_full, o0, count);
  return *(last = &e.axis);
}

// Integer parameter `what` = v must lie in [lo, hi] (the Python layer checks the same first).
void int_in(const OpSpec& op, const char* what, long long v, long long lo, long long hi) {
  if (v < lo || v > hi)
    throw ConfigErr(op.name + ": " + what + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "], got " + std::to_string(v));
}

// Float parameter: finite and |v| <= limit.
void float_in(const OpSpec& op, const char* what, double v, double lo, double hi) {
  if (!std::isfinite(v) || v < lo || v > hi)
    throw ConfigErr(op.name + ": " + what + " must be a finite number in [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "], got " + std::to_string(v));
}

void fill_in(const OpSpec& op, const std::vector<double>& fill) {
  if (fill.empty() || fill.size() > kMaxFill)
    throw ConfigErr(op.name + ": fill needs 1 to " + std::to_string(kMaxFill) + " values");
  for (double v : fill) float_in(op, "fill", v, 0.0, 255.0);
}

// ColorJitter's fields by JitterOp.
struct JitterRanges {
  bool on[4];
  double lo[4], hi[4];
};
JitterRanges jitter_ranges(const ColorJitterParams& s) {
  return {{s.brightness_on, s.contrast_on, s.saturation_on, s.hue_on},
          {s.brightness_lo, s.contrast_lo, s.saturation_lo, s.hue_lo},
          {s.brightness_hi, s.contrast_hi, s.saturation_hi, s.hue_hi}};
}

}  // namespace

void op_check(const OpSpec& op) {
  const double M = kMaxMagnitude;
  switch (op.kind) {
    case OpKind::Pad: {
      const auto& s = op.as<PadParams>();
      for (long long v : {s.left, s.top, s.right, s.bottom}) int_in(op, "padding", v, 0, kMaxSide);
      int_in(op, "padding mode", s.padding_mode, 0, 3);
      fill_in(op, s.fill);
      break;
    }
    case OpKind::RandomCrop: {
      const auto& s = op.as<RandomCropParams>();
      int_in(op, "height", s.height, 1, kMaxSide);
      int_in(op, "width", s.width, 1, kMaxSide);
      for (long long v : {s.pad_left, s.pad_top, s.pad_right, s.pad_bottom}) int_in(op, "padding", v, 0, kMaxSide);
      int_in(op, "padding mode", s.padding_mode, 0, 3);
      fill_in(op, s.fill);
      break;
    }
    case OpKind::CenterCrop: {
      const auto& s = op.as<CenterCropParams>();
      int_in(op, "height", s.height, 1, kMaxSide);
      int_in(op, "width", s.width, 1, kMaxSide);
      break;
    }
    case OpKind::Resize: {
      const auto& s = op.as<ResizeParams>();
      int_in(op, "mode", s.mode, 0, 2);
      if (s.mode == 0) {
        int_in(op, "height", s.height, 1, kMaxSide);
        int_in(op, "width", s.width, 1, kMaxSide);
      } else {
        int_in(op, "size", s.size, 1, kMaxSide);
      }
      int_in(op, "max_size", s.max_size, 0, kMaxSide);
      break;
    }
    case OpKind::RandomResizedCrop: {
      const auto& s = op.as<RandomResizedCropParams>();
      int_in(op, "height", s.height, 1, kMaxSide);
      int_in(op, "width", s.width, 1, kMaxSide);
      for (double v : {s.scale_lo, s.scale_hi}) float_in(op, "scale", v, 0.0, kMaxScale);
      for (double v : {s.ratio_lo, s.ratio_hi}) float_in(op, "ratio", v, 1.0 / kMaxScale, kMaxScale);
      break;
    }
    case OpKind::RandomRotation: {
      const auto& s = op.as<RandomRotationParams>();
      for (double v : {s.degrees_lo, s.degrees_hi}) float_in(op, "degrees", v, -M, M);
      fill_in(op, s.fill);
      break;
    }
    case OpKind::RandomScale: {
      const auto& s = op.as<RandomScaleParams>();
      for (double v : {s.scale_lo, s.scale_hi}) float_in(op, "scale", v, 1e-300, kMaxScale);
      fill_in(op, s.fill);
      break;
    }
    case OpKind::GaussianBlur: {
      const auto& s = op.as<GaussianBlurParams>();
      const long long kernel[2] = {s.kernel_x, s.kernel_y};
      const double sigma[2] = {s.sigma_lo, s.sigma_hi};
      for (int k = 0; k < 2; ++k) {
        int_in(op, "kernel_size", kernel[k], 1, kMaxKernel);
        if (kernel[k] % 2 == 0) throw ConfigErr(op.name + ": kernel_size must be odd, got " + std::to_string(kernel[k]));
        float_in(op, "sigma", sigma[k], 1e-300, M);
      }
      break;
    }
    case OpKind::ColorJitter: {
      const JitterRanges j = jitter_ranges(op.as<ColorJitterParams>());
      for (int k = 0; k < 4; ++k) {
        float_in(op, "jitter range", j.lo[k], -M, M);
        float_in(op, "jitter range", j.hi[k], -M, M);
      }
      break;
    }
    case OpKind::GaussianNoise: {
      const auto& s = op.as<GaussianNoiseParams>();
      float_in(op, "mean", s.mean, -M, M);
      float_in(op, "sigma", s.sigma, 0.0, M);
      break;
    }
    case OpKind::RandomGrayscale:
      float_in(op, "p", op.as<RandomGrayscaleParams>().p, 0.0, 1.0);
      break;
    case OpKind::RandomAutocontrast:
      float_in(op, "p", op.as<RandomAutocontrastParams>().p, 0.0, 1.0);
      break;
    case OpKind::RandAugment: {
      const auto& s = op.as<RandAugmentParams>();
      aug_check(op.name, s.num_ops, s.magnitude, s.num_magnitude_bins);
      fill_in(op, s.fill);
      break;
    }
    case OpKind::TrivialAugmentWide: {
      const auto& s = op.as<TrivialAugmentWideParams>();
      aug_check(op.name, -1, 0, s.num_magnitude_bins);
      fill_in(op, s.fill);
      break;
    }
  }
}

void op_draw(const OpSpec& op, Stream& rng, const Shape3& in, Params& p) {
  p = Params{};
  switch (op.kind) {
    case OpKind::Pad:
      return;
    case OpKind::RandomCrop: {
      const auto& s = op.as<RandomCropParams>();
      const long long th = s.height, tw = s.width;
      long long pl = s.pad_left, pt = s.pad_top, pr = s.pad_right, pb = s.pad_bottom;
      long long ph = in.h + pt + pb, pw = in.w + pl + pr;
      if (s.pad_if_needed) {  // torchvision pads both sides by the shortfall
        if (pw < tw) {
          const long long d = tw - pw;
          pl += d;
          pr += d;
          pw += 2 * d;
        }
        if (ph < th) {
          const long long d = th - ph;
          pt += d;
          pb += d;
          ph += 2 * d;
        }
      }
      if (ph < th || pw < tw)
        throw DataErr(op.name + ": the image is " + dims(in.h, in.w) +
                      (ph != in.h || pw != in.w ? " (" + dims(ph, pw) + " after padding)" : std::string()) +
                      ", smaller than the crop " + dims(th, tw));
      long long top = 0, left = 0;
      if (!(ph == th && pw == tw)) {
        top = rng.randint(0, ph - th);
        left = rng.randint(0, pw - tw);
      }
      p.y0 = top - pt;
      p.x0 = left - pl;
      p.top = top;
      p.left = left;
      p.pad_top = pt;
      p.pad_left = pl;
      return;
    }
    case OpKind::CenterCrop: {
      const auto& s = op.as<CenterCropParams>();
      p.y0 = center_offset(in.h, s.height);
      p.x0 = center_offset(in.w, s.width);
      return;
    }
    case OpKind::Resize: {
      const auto& s = op.as<ResizeParams>();
      long long oh, ow;
      Box box{0, 0, in.h, in.w};
      if (s.mode == 0) {
        oh = s.height;
        ow = s.width;
      } else if (s.mode == 1) {  // torchvision: the short side becomes `size`
        const bool wshort = in.w <= in.h;
        const long long sh = wshort ? in.w : in.h, lg = wshort ? in.h : in.w;
        const double nld = double(s.size) * double(lg) / double(sh);  // size, lg < 2^31: no overflow
        if (nld > double(kMaxSide))
          throw DataErr(op.name + ": a " + dims(in.h, in.w) + " image would get a long side of " +
                        std::to_string(nld) + ", over the limit " + std::to_string(kMaxSide));
        long long ns = s.size, nl = (long long)nld;
        if (s.max_size > 0 && nl > s.max_size) {
          ns = (long long)(double(s.max_size * ns) / double(nl));
          nl = s.max_size;
        }
        ow = wshort ? ns : nl;
        oh = wshort ? nl : ns;
      } else {  // the seed's Resize: centred square of the short side, then size x size
        const long long side = std::min(in.h, in.w);
        box = Box{center_offset(in.h, side), center_offset(in.w, side), side, side};
        oh = ow = s.size;
      }
      if (oh < 1 || ow < 1)
        throw DataErr(op.name + ": output size " + dims(oh, ow) + " of a " + dims(in.h, in.w) + " image is empty");
      p.out_h = oh;
      p.out_w = ow;
      p.box = box;
      return;
    }
    case OpKind::RandomResizedCrop: {
      // torchvision.transforms.RandomResizedCrop.get_params, with Philox draws.
      const auto& s = op.as<RandomResizedCropParams>();
      const int H = in.h, W = in.w;
      const double area = double(H) * double(W);
      const double lr0 = std::log(s.ratio_lo), lr1 = std::log(s.ratio_hi);
      for (int attempt = 0; attempt < 10; ++attempt) {
        const double ta = area * rng.uniform(s.scale_lo, s.scale_hi);
        const double ar = std::exp(rng.uniform(lr0, lr1));
        const double wd = std::nearbyint(std::sqrt(ta * ar)), hd = std::nearbyint(std::sqrt(ta / ar));
        if (0 < wd && wd <= W && 0 < hd && hd <= H) {  // compared as doubles: no out-of-range conversion
          const long long w = (long long)wd, h = (long long)hd;
          const long long i = rng.randint(0, H - h);
          const long long j = rng.randint(0, W - w);
          p.box = Box{i, j, h, w};
          p.attempts = attempt;
          return;
        }
      }
      const double in_ratio = double(W) / double(H);
      const double rmin = std::min(s.ratio_lo, s.ratio_hi), rmax = std::max(s.ratio_lo, s.ratio_hi);
      long long w, h;
      if (in_ratio < rmin) {  // then h = W / rmin < H: in range
        w = W;
        h = round_half_even(double(w) / rmin);
      } else if (in_ratio > rmax) {  // then w = H * rmax < W
        h = H;
        w = round_half_even(double(h) * rmax);
      } else {
        w = W;
        h = H;
      }
      p.box = Box{(H - h) / 2, (W - w) / 2, h, w};
      p.attempts = 10;
      return;
    }
    case OpKind::RandomRotation: {
      const auto& s = op.as<RandomRotationParams>();
      p.angle = rng.uniform(s.degrees_lo, s.degrees_hi);
      return;
    }
    case OpKind::RandomScale: {
      const auto& s = op.as<RandomScaleParams>();
      const double f = rng.uniform(s.scale_lo, s.scale_hi);
      const double nhd = std::nearbyint(in.h * f), nwd = std::nearbyint(in.w * f);
      if (nhd > double(kMaxSide) || nwd > double(kMaxSide))
        throw DataErr(op.name + ": scale " + std::to_string(f) + " makes a " + dims(in.h, in.w) + " image " +
                      dims((long long)nhd, (long long)nwd) + ", over the side limit " + std::to_string(kMaxSide));
      const long long nh = std::max(1LL, (long long)nhd);
      const long long nw = std::max(1LL, (long long)nwd);
      p.scale = f;
      p.out_h = nh;
      p.out_w = nw;
      p.y0 = nh > in.h ? center_offset(int(nh), in.h) : -((in.h - nh) / 2);
      p.x0 = nw > in.w ? center_offset(int(nw), in.w) : -((in.w - nw) / 2);
      return;
    }
    case OpKind::ColorJitter: {
      const JitterRanges j = jitter_ranges(op.as<ColorJitterParams>());
      p.order = {kBrightness, kContrast, kSaturation, kHue};
      for (int k = 3; k > 0; --k) std::swap(p.order[size_t(k)], p.order[size_t(rng.u64() % uint64_t(k + 1))]);
      for (int k = 0; k < 4; ++k) p.factor[size_t(k)] = j.on[k] ? rng.uniform(j.lo[k], j.hi[k]) : (k == kHue ? 0.0 : 1.0);
      return;
    }
    case OpKind::GaussianBlur: {
      const auto& s = op.as<GaussianBlurParams>();
      p.sigma = rng.uniform(s.sigma_lo, s.sigma_hi);
      return;
    }
    case OpKind::GaussianNoise:
      p.noise_key = rng.u64();
      return;
    case OpKind::RandomGrayscale:
      p.apply = rng.uniform() < op.as<RandomGrayscaleParams>().p && in.c == 3;
      return;
    case OpKind::RandomAutocontrast:
      p.apply = rng.uniform() < op.as<RandomAutocontrastParams>().p;
      return;
    case OpKind::RandAugment: {
      const auto& s = op.as<RandAugmentParams>();
      aug_draw(false, int(s.num_ops), int(s.magnitude), int(s.num_magnitude_bins), rng, in, p.aug);
      p.apply = aug_changes(p.aug);
      return;
    }
    case OpKind::TrivialAugmentWide:
      aug_draw(true, 1, 0, int(op.as<TrivialAugmentWideParams>().num_magnitude_bins), rng, in, p.aug);
      p.apply = aug_changes(p.aug);
      return;
  }
}

Shape3 op_out_shape(const OpSpec& op, const Params& p, const Shape3& in) {
  if (!p.apply) return in;
  // In 64 bits, then held to the limits: an int sum could wrap (Pad(2**31) once gave a 1x1 image).
  switch (op.kind) {
    case OpKind::Pad: {
      const auto& s = op.as<PadParams>();
      return checked_shape(op.name, (long long)in.h + s.top + s.bottom, (long long)in.w + s.left + s.right, in.c);
    }
    case OpKind::RandomCrop: {
      const auto& s = op.as<RandomCropParams>();
      return checked_shape(op.name, s.height, s.width, in.c);
    }
    case OpKind::CenterCrop: {
      const auto& s = op.as<CenterCropParams>();
      return checked_shape(op.name, s.height, s.width, in.c);
    }
    case OpKind::RandomResizedCrop: {
      const auto& s = op.as<RandomResizedCropParams>();
      return checked_shape(op.name, s.height, s.width, in.c);
    }
    case OpKind::Resize:
      return checked_shape(op.name, p.out_h, p.out_w, in.c);
    default:
      return in;
  }
}

void op_apply(const OpSpec& op, const Params& p, const ImgC& in, const Img& out, Workspace& ws) {
  const int C = in.c;
  uint8_t fill[kMaxFill > 64 ? kMaxFill : 64] = {0};
  switch (op.kind) {
    case OpKind::Pad: {
      const auto& s = op.as<PadParams>();
      fill_u8(op, s.fill, C, fill);
      remap_window(in, out, -s.top, -s.left, PadMode(s.padding_mode), fill);
      return;
    }
    case OpKind::RandomCrop: {
      const auto& s = op.as<RandomCropParams>();
      fill_u8(op, s.fill, C, fill);
      remap_window(in, out, p.y0, p.x0, PadMode(s.padding_mode), fill);
      return;
    }
    case OpKind::CenterCrop:
      remap_window(in, out, p.y0, p.x0, PadMode::Constant, fill);
      return;
    case OpKind::Resize:
      build_axis(ws.ay, int(p.box.top), int(p.box.height), int(p.out_h), 0, int(p.out_h));
      build_axis(ws.ax, int(p.box.left), int(p.box.width), int(p.out_w), 0, int(p.out_w));
      resample(in, out, ws.ay, ws.ax, fill, ws.rs);
      return;
    case OpKind::RandomResizedCrop: {
      const auto& s = op.as<RandomResizedCropParams>();
      build_axis(ws.ay, int(p.box.top), int(p.box.height), int(s.height), 0, int(s.height));
      build_axis(ws.ax, int(p.box.left), int(p.box.width), int(s.width), 0, int(s.width));
      resample(in, out, ws.ay, ws.ax, fill, ws.rs);
      return;
    }
    case OpKind::RandomRotation: {
      float ff[64];
      fill_f32(op, op.as<RandomRotationParams>().fill, C, ff);
      rotate_bilinear(in, out, p.angle, ff);
      return;
    }
    case OpKind::RandomScale:
      fill_u8(op, op.as<RandomScaleParams>().fill, C, fill);
      resample(in, out, cached_axis(0, in.h, int(p.out_h), int(p.y0), in.h),
               cached_axis(0, in.w, int(p.out_w), int(p.x0), in.w), fill, ws.rs);
      return;
    case OpKind::ColorJitter: {
      const JitterRanges j = jitter_ranges(op.as<ColorJitterParams>());
      const int order[4] = {p.order[0], p.order[1], p.order[2], p.order[3]};
      const double factor[4] = {p.factor[0], p.factor[1], p.factor[2], p.factor[3]};
      color_jitter(in, out, order, factor, j.on);
      return;
    }
    case OpKind::GaussianBlur: {
      const auto& s = op.as<GaussianBlurParams>();
      gaussian_blur(in, out, int(s.kernel_x), int(s.kernel_y), p.sigma, ws);
      return;
    }
    case OpKind::GaussianNoise: {
      const auto& s = op.as<GaussianNoiseParams>();
      const double mean = s.mean, sigma = s.sigma;
      const size_t n = in.shape().bytes();
      for (size_t k = 0; k < n; ++k) {
        const float nz = philox_normal(philox4x32_10(p.noise_key, k), mean, sigma);
        out.p[k] = uint8_t(std::clamp(rint_f(float(in.p[k]) + nz), 0.f, 255.f));
      }
      return;
    }
    case OpKind::RandomGrayscale:
      rgb_to_gray3(in, out);
      return;
    case OpKind::RandomAutocontrast: {
      const size_t npx = size_t(in.h) * size_t(in.w);
      for (int c = 0; c < C; ++c) {
        uint8_t mn = 255, mx = 0;
        for (size_t k = 0; k < npx; ++k) {
          const uint8_t v = in.p[k * size_t(C) + size_t(c)];
          mn = std::min(mn, v);
          mx = std::max(mx, v);
        }
        float lo = float(mn), scale;
        if (mx == mn) {
          lo = 0.f;
          scale = 1.f;
        } else {
          scale = (1.f / (float(mx) - float(mn))) * 255.f;  // torch: 255.0 / t == t.reciprocal() * 255
        }
        for (size_t k = 0; k < npx; ++k) {
          const size_t idx = k * size_t(C) + size_t(c);
          out.p[idx] = trunc_u8((float(in.p[idx]) - lo) * scale);
        }
      }
      return;
    }
    case OpKind::RandAugment:
    case OpKind::TrivialAugmentWide: {
      const auto& f = op.kind == OpKind::RandAugment ? op.as<RandAugmentParams>().fill
                                                      : op.as<TrivialAugmentWideParams>().fill;
      fill_u8(op, f, C, fill);
      aug_run(p.aug, in, out, fill, ws.aug);
      return;
    }
  }
}

std::vector<std::pair<std::string, double>> op_describe(const OpSpec& op, const Params& p) {
  std::vector<std::pair<std::string, double>> v;
  switch (op.kind) {
    case OpKind::Pad: {
      const auto& s = op.as<PadParams>();
      v = {{"left", double(s.left)}, {"top", double(s.top)}, {"right", double(s.right)}, {"bottom", double(s.bottom)}};
      break;
    }
    case OpKind::RandomCrop:
      v = {{"top", double(p.top)}, {"left", double(p.left)}, {"pad_top", double(p.pad_top)},
           {"pad_left", double(p.pad_left)}};
      break;
    case OpKind::CenterCrop:
      v = {{"y0", double(p.y0)}, {"x0", double(p.x0)}};
      break;
    case OpKind::Resize:
      v = {{"height", double(p.out_h)},     {"width", double(p.out_w)},       {"crop_top", double(p.box.top)},
           {"crop_left", double(p.box.left)}, {"crop_height", double(p.box.height)}, {"crop_width", double(p.box.width)}};
      break;
    case OpKind::RandomResizedCrop:
      v = {{"top", double(p.box.top)},       {"left", double(p.box.left)}, {"height", double(p.box.height)},
           {"width", double(p.box.width)}, {"attempts", double(p.attempts)}};
      break;
    case OpKind::RandomRotation:
      v = {{"angle", p.angle}};
      break;
    case OpKind::RandomScale:
      v = {{"scale", p.scale}, {"height", double(p.out_h)}, {"width", double(p.out_w)}, {"y0", double(p.y0)},
           {"x0", double(p.x0)}};
      break;
    case OpKind::ColorJitter:
      v = {{"brightness", p.factor[kBrightness]}, {"contrast", p.factor[kContrast]},
           {"saturation", p.factor[kSaturation]}, {"hue", p.factor[kHue]}};
      for (int k = 0; k < 4; ++k) v.push_back({"order" + std::to_string(k), double(p.order[size_t(k)])});
      break;
    case OpKind::GaussianBlur:
      v = {{"sigma", p.sigma}};
      break;
    case OpKind::GaussianNoise:
      // the key as two exact 32-bit halves (a double cannot hold 64 bits)
      v = {{"key_lo", double(p.noise_key & 0xFFFFFFFFull)}, {"key_hi", double(p.noise_key >> 32)}};
      break;
    case OpKind::RandAugment:
    case OpKind::TrivialAugmentWide:
      for (int k = 0; k < p.aug.n; ++k) {  // what torchvision's op takes: the op, its bin, the signed magnitude
        const AugStep& s = p.aug.steps[size_t(k)];
        const std::string i = std::to_string(k);
        v.push_back({"op" + i, double(s.op)});
        v.push_back({"bin" + i, double(s.bin)});
        v.push_back({"magnitude" + i, s.magnitude});
      }
      break;
    default:
      break;
  }
  (void)pad_mode_name;
  return v;
}

}  // namespace trd
