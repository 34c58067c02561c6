#include "ops.hpp"

#include <algorithm>
#include <cstring>

#include "color.hpp"
#include "pipeline.hpp"
#include "rotate.hpp"

namespace trd {

namespace {

// Round half to even without a libm call (|v| < 2^22 here); torch.round's rule.
inline float rint_f(float v) {
  const float big = 8388608.f;  // 2^23
  return v >= 0.f ? (v + big) - big : -((-v + big) - big);
}

std::string dims(long long h, long long w) { return std::to_string(h) + "x" + std::to_string(w); }

// Fill values as uint8 for `c` channels (one value broadcast, or one per channel).
void fill_u8(const OpSpec& op, int c, uint8_t* out) {
  if (op.fill.size() != 1 && op.fill.size() != size_t(c))
    throw DataErr(op.name + ": fill has " + std::to_string(op.fill.size()) + " values but the image has " +
                  std::to_string(c) + " channels");
  for (int k = 0; k < c; ++k) {
    const double v = op.fill.size() == 1 ? op.fill[0] : op.fill[size_t(k)];
    out[k] = clip_u8(int(std::lround(v)));
  }
}

void fill_f32(const OpSpec& op, int c, float* out) {
  if (op.fill.size() != 1 && op.fill.size() != size_t(c))
    throw DataErr(op.name + ": fill has " + std::to_string(op.fill.size()) + " values but the image has " +
                  std::to_string(c) + " channels");
  for (int k = 0; k < c; ++k) out[k] = float(op.fill.size() == 1 ? op.fill[0] : op.fill[size_t(k)]);
}

// torchvision center_crop offset along one axis: negative when the crop is larger (padding).
long long center_offset(int n, long long crop) {
  if (crop > n) return -((crop - n) / 2);
  return round_half_even(double(n - crop) / 2.0);
}

// ---- Gaussian blur: separable, float32, reflect borders ----------------------------------------
void gaussian_kernel(int k, double sigma, std::vector<float>& out) {
  out.resize(size_t(k));
  const float half = float(k - 1) * 0.5f, sg = float(sigma);
  float sum = 0.f;
  for (int j = 0; j < k; ++j) {
    const float x = -half + float(j);
    const float t = x / sg;
    out[size_t(j)] = std::exp(-0.5f * (t * t));
    sum += out[size_t(j)];
  }
  for (auto& v : out) v /= sum;
}

// acc[k] (+)= w * src[k] for a row: the accumulation order (tap by tap) is that of a plain loop.
TRD_CLONES void axpy_row(float* acc, const float* src, float w, size_t n, bool first) {
  if (first) {
    for (size_t k = 0; k < n; ++k) acc[k] = 0.f + w * src[k];
  } else {
    for (size_t k = 0; k < n; ++k) acc[k] += w * src[k];
  }
}

TRD_CLONES void round_row(const float* acc, uint8_t* d, size_t n) {
  for (size_t k = 0; k < n; ++k) d[k] = uint8_t(std::min(std::max(rint_f(acc[k]), 0.f), 255.f));
}

void gaussian_blur(const ImgC& in, const Img& out, int kx, int ky, double sigma, Workspace& ws) {
  const int H = in.h, W = in.w, C = in.c;
  thread_local std::vector<float> wx, wy, ext, acc;
  gaussian_kernel(kx, sigma, wx);
  gaussian_kernel(ky, sigma, wy);
  const int rx = kx / 2, ry = ky / 2;
  thread_local std::vector<int> ym;
  ym.resize(size_t(H) + 2 * size_t(ry));  // kernel <= kMaxKernel, H <= kMaxSide: no overflow
  for (int y = -ry; y < H + ry; ++y) ym[size_t(y + ry)] = extend_index(y, H, PadMode::Reflect);
  // Horizontal pass: each row extended by reflection into floats, then out[k] = sum_t w[t] ext[k + t C],
  // contiguous in k (vectorises for any channel count).
  const size_t rowlen = size_t(W) * size_t(C);
  ws.ftmp.resize(size_t(H) * rowlen);
  ext.resize(size_t(W + 2 * rx) * size_t(C));
  for (int y = 0; y < H; ++y) {
    const uint8_t* s = in.row(y);
    for (int x = -rx; x < W + rx; ++x) {
      const uint8_t* p = s + size_t(extend_index(x, W, PadMode::Reflect)) * size_t(C);
      float* e = ext.data() + size_t(x + rx) * size_t(C);
      for (int c = 0; c < C; ++c) e[c] = float(p[c]);
    }
    float* d = ws.ftmp.data() + size_t(y) * rowlen;
    for (int t = 0; t < kx; ++t) axpy_row(d, ext.data() + size_t(t) * size_t(C), wx[size_t(t)], rowlen, t == 0);
  }
  // Vertical pass -> uint8, rounded half to even.
  acc.resize(rowlen);
  for (int y = 0; y < H; ++y) {
    for (int t = 0; t < ky; ++t)
      axpy_row(acc.data(), ws.ftmp.data() + size_t(ym[size_t(y + t)]) * rowlen, wy[size_t(t)], rowlen, t == 0);
    round_row(acc.data(), out.row(y), rowlen);
  }
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

void need(const OpSpec& op, size_t nf, size_t ni) {
  if (op.f.size() < nf || op.i.size() < ni)
    throw ConfigErr(op.name + ": malformed native spec (" + std::to_string(op.f.size()) + " floats, " +
                    std::to_string(op.i.size()) + " ints)");
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

}  // namespace

void op_check(const OpSpec& op) {
  const double M = kMaxMagnitude;
  switch (op.kind) {
    case OpKind::Pad:
      need(op, 0, 5);
      for (int k = 0; k < 4; ++k) int_in(op, "padding", op.i[size_t(k)], 0, kMaxSide);
      int_in(op, "padding mode", op.i[4], 0, 3);
      break;
    case OpKind::RandomCrop:
      need(op, 0, 8);
      int_in(op, "height", op.i[0], 1, kMaxSide);
      int_in(op, "width", op.i[1], 1, kMaxSide);
      for (int k = 2; k < 6; ++k) int_in(op, "padding", op.i[size_t(k)], 0, kMaxSide);
      int_in(op, "padding mode", op.i[6], 0, 3);
      int_in(op, "pad_if_needed", op.i[7], 0, 1);
      break;
    case OpKind::CenterCrop:
      need(op, 0, 2);
      int_in(op, "height", op.i[0], 1, kMaxSide);
      int_in(op, "width", op.i[1], 1, kMaxSide);
      break;
    case OpKind::Resize:
      need(op, 0, 4);
      int_in(op, "mode", op.i[0], 0, 2);
      int_in(op, op.i[0] == 0 ? "height" : "size", op.i[1], 1, kMaxSide);
      if (op.i[0] == 0) int_in(op, "width", op.i[2], 1, kMaxSide);
      int_in(op, "max_size", op.i[3], 0, kMaxSide);
      break;
    case OpKind::RandomResizedCrop:
      need(op, 4, 2);
      int_in(op, "height", op.i[0], 1, kMaxSide);
      int_in(op, "width", op.i[1], 1, kMaxSide);
      for (int k = 0; k < 2; ++k) float_in(op, "scale", op.f[size_t(k)], 0.0, kMaxScale);
      for (int k = 2; k < 4; ++k) float_in(op, "ratio", op.f[size_t(k)], 1.0 / kMaxScale, kMaxScale);
      break;
    case OpKind::RandomRotation:
      need(op, 2, 0);
      for (int k = 0; k < 2; ++k) float_in(op, "degrees", op.f[size_t(k)], -M, M);
      break;
    case OpKind::RandomScale:
      need(op, 2, 0);
      for (int k = 0; k < 2; ++k) float_in(op, "scale", op.f[size_t(k)], 1e-300, kMaxScale);
      break;
    case OpKind::GaussianBlur:
      need(op, 2, 2);
      for (int k = 0; k < 2; ++k) {
        int_in(op, "kernel_size", op.i[size_t(k)], 1, kMaxKernel);
        if (op.i[size_t(k)] % 2 == 0) throw ConfigErr(op.name + ": kernel_size must be odd, got " + std::to_string(op.i[size_t(k)]));
        float_in(op, "sigma", op.f[size_t(k)], 1e-300, M);
      }
      break;
    case OpKind::ColorJitter:
      need(op, 8, 4);
      for (int k = 0; k < 8; ++k) float_in(op, "jitter range", op.f[size_t(k)], -M, M);
      break;
    case OpKind::GaussianNoise:
      need(op, 2, 0);
      float_in(op, "mean", op.f[0], -M, M);
      float_in(op, "sigma", op.f[1], 0.0, M);
      break;
    case OpKind::RandomGrayscale:
    case OpKind::RandomAutocontrast:
      need(op, 1, 0);
      float_in(op, "p", op.f[0], 0.0, 1.0);
      break;
    default:
      throw ConfigErr("unknown transform kind " + std::to_string(int(op.kind)));
  }
  if (op.fill.empty() || op.fill.size() > kMaxFill)
    throw ConfigErr(op.name + ": fill needs 1 to " + std::to_string(kMaxFill) + " values");
  for (double v : op.fill) float_in(op, "fill", v, 0.0, 255.0);
}

void op_draw(const OpSpec& op, Stream& rng, const Shape3& in, Params& p) {
  p = Params{};
  switch (op.kind) {
    case OpKind::Pad:
      return;
    case OpKind::RandomCrop: {
      const long long th = op.i[0], tw = op.i[1];
      long long pl = op.i[2], pt = op.i[3], pr = op.i[4], pb = op.i[5];
      long long ph = in.h + pt + pb, pw = in.w + pl + pr;
      if (op.i[7]) {  // pad_if_needed: torchvision pads both sides by the shortfall
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
      p.i = {top - pt, left - pl, top, left, pt, pl, 0, 0};
      return;
    }
    case OpKind::CenterCrop:
      p.i[0] = center_offset(in.h, op.i[0]);
      p.i[1] = center_offset(in.w, op.i[1]);
      return;
    case OpKind::Resize: {
      const long long mode = op.i[0];
      long long oh, ow, cy = 0, cx = 0, ch = in.h, cw = in.w;
      if (mode == 0) {
        oh = op.i[1];
        ow = op.i[2];
      } else if (mode == 1) {  // torchvision: the short side becomes `size`
        const long long size = op.i[1];
        const bool wshort = in.w <= in.h;
        const long long sh = wshort ? in.w : in.h, lg = wshort ? in.h : in.w;
        const double nld = double(size) * double(lg) / double(sh);  // size, lg < 2^31: no overflow
        if (nld > double(kMaxSide))
          throw DataErr(op.name + ": a " + dims(in.h, in.w) + " image would get a long side of " +
                        std::to_string(nld) + ", over the limit " + std::to_string(kMaxSide));
        long long ns = size, nl = (long long)nld;
        const long long maxs = op.i[3];
        if (maxs > 0 && nl > maxs) {
          ns = (long long)(double(maxs * ns) / double(nl));
          nl = maxs;
        }
        ow = wshort ? ns : nl;
        oh = wshort ? nl : ns;
      } else {  // the seed's Resize: centred square of the short side, then size x size
        const long long s = std::min(in.h, in.w);
        cy = center_offset(in.h, s);
        cx = center_offset(in.w, s);
        ch = cw = s;
        oh = ow = op.i[1];
      }
      if (oh < 1 || ow < 1)
        throw DataErr(op.name + ": output size " + dims(oh, ow) + " of a " + dims(in.h, in.w) + " image is empty");
      p.i = {oh, ow, cy, cx, ch, cw, 0, 0};
      return;
    }
    case OpKind::RandomResizedCrop: {
      // torchvision.transforms.RandomResizedCrop.get_params, with Philox draws.
      const int H = in.h, W = in.w;
      const double area = double(H) * double(W);
      const double lr0 = std::log(op.f[2]), lr1 = std::log(op.f[3]);
      for (int attempt = 0; attempt < 10; ++attempt) {
        const double ta = area * rng.uniform(op.f[0], op.f[1]);
        const double ar = std::exp(rng.uniform(lr0, lr1));
        const double wd = std::nearbyint(std::sqrt(ta * ar)), hd = std::nearbyint(std::sqrt(ta / ar));
        if (0 < wd && wd <= W && 0 < hd && hd <= H) {  // compared as doubles: no out-of-range conversion
          const long long w = (long long)wd, h = (long long)hd;
          const long long i = rng.randint(0, H - h);
          const long long j = rng.randint(0, W - w);
          p.i = {i, j, h, w, attempt, 0, 0, 0};
          return;
        }
      }
      const double in_ratio = double(W) / double(H);
      const double rmin = std::min(op.f[2], op.f[3]), rmax = std::max(op.f[2], op.f[3]);
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
      p.i = {(H - h) / 2, (W - w) / 2, h, w, 10, 0, 0, 0};
      return;
    }
    case OpKind::RandomRotation:
      p.f[0] = rng.uniform(op.f[0], op.f[1]);
      return;
    case OpKind::RandomScale: {
      const double s = rng.uniform(op.f[0], op.f[1]);
      const double nhd = std::nearbyint(in.h * s), nwd = std::nearbyint(in.w * s);
      if (nhd > double(kMaxSide) || nwd > double(kMaxSide))
        throw DataErr(op.name + ": scale " + std::to_string(s) + " makes a " + dims(in.h, in.w) + " image " +
                      dims((long long)nhd, (long long)nwd) + ", over the side limit " + std::to_string(kMaxSide));
      const long long nh = std::max(1LL, (long long)nhd);
      const long long nw = std::max(1LL, (long long)nwd);
      p.f[0] = s;
      p.i = {nh, nw, nh > in.h ? center_offset(int(nh), in.h) : -((in.h - nh) / 2),
             nw > in.w ? center_offset(int(nw), in.w) : -((in.w - nw) / 2), 0, 0, 0, 0};
      return;
    }
    case OpKind::ColorJitter: {
      p.perm = {0, 1, 2, 3};
      for (int k = 3; k > 0; --k) std::swap(p.perm[size_t(k)], p.perm[size_t(rng.u64() % uint64_t(k + 1))]);
      for (int k = 0; k < 4; ++k)
        p.f[size_t(k)] = op.i[size_t(k)] ? rng.uniform(op.f[size_t(2 * k)], op.f[size_t(2 * k + 1)]) : (k == 3 ? 0.0 : 1.0);
      return;
    }
    case OpKind::GaussianBlur:
      p.f[0] = rng.uniform(op.f[0], op.f[1]);
      return;
    case OpKind::GaussianNoise:
      p.i[0] = (long long)rng.u64();
      return;
    case OpKind::RandomGrayscale:
      p.apply = rng.uniform() < op.f[0] && in.c == 3;
      return;
    case OpKind::RandomAutocontrast:
      p.apply = rng.uniform() < op.f[0];
      return;
  }
}

Shape3 op_out_shape(const OpSpec& op, const Params& p, const Shape3& in) {
  if (!p.apply) return in;
  // In 64 bits, then held to the limits: an int sum could wrap (Pad(2**31) once gave a 1x1 image).
  switch (op.kind) {
    case OpKind::Pad:
      return checked_shape(op.name, (long long)in.h + op.i[1] + op.i[3], (long long)in.w + op.i[0] + op.i[2], in.c);
    case OpKind::RandomCrop:
    case OpKind::CenterCrop:
    case OpKind::RandomResizedCrop:
      return checked_shape(op.name, op.i[0], op.i[1], in.c);
    case OpKind::Resize:
      return checked_shape(op.name, p.i[0], p.i[1], in.c);
    default:
      return in;
  }
}

void op_apply(const OpSpec& op, const Params& p, const ImgC& in, const Img& out, Workspace& ws) {
  const int C = in.c;
  uint8_t fill[kMaxFill > 64 ? kMaxFill : 64] = {0};
  switch (op.kind) {
    case OpKind::Pad:
      fill_u8(op, C, fill);
      remap_window(in, out, -op.i[1], -op.i[0], PadMode(op.i[4]), fill);
      return;
    case OpKind::RandomCrop:
      fill_u8(op, C, fill);
      remap_window(in, out, p.i[0], p.i[1], PadMode(op.i[6]), fill);
      return;
    case OpKind::CenterCrop:
      remap_window(in, out, p.i[0], p.i[1], PadMode::Constant, fill);
      return;
    case OpKind::Resize:
      build_axis(ws.ay, int(p.i[2]), int(p.i[4]), int(p.i[0]), 0, int(p.i[0]));
      build_axis(ws.ax, int(p.i[3]), int(p.i[5]), int(p.i[1]), 0, int(p.i[1]));
      resample(in, out, ws.ay, ws.ax, fill, ws.rs);
      return;
    case OpKind::RandomResizedCrop:
      build_axis(ws.ay, int(p.i[0]), int(p.i[2]), int(op.i[0]), 0, int(op.i[0]));
      build_axis(ws.ax, int(p.i[1]), int(p.i[3]), int(op.i[1]), 0, int(op.i[1]));
      resample(in, out, ws.ay, ws.ax, fill, ws.rs);
      return;
    case OpKind::RandomRotation: {
      float ff[64];
      fill_f32(op, C, ff);
      rotate_bilinear(in, out, p.f[0], ff);
      return;
    }
    case OpKind::RandomScale:
      fill_u8(op, C, fill);
      resample(in, out, cached_axis(0, in.h, int(p.i[0]), int(p.i[2]), in.h),
               cached_axis(0, in.w, int(p.i[1]), int(p.i[3]), in.w), fill, ws.rs);
      return;
    case OpKind::ColorJitter: {
      const int order[4] = {p.perm[0], p.perm[1], p.perm[2], p.perm[3]};
      const double factor[4] = {p.f[0], p.f[1], p.f[2], p.f[3]};
      const bool enabled[4] = {op.i[0] != 0, op.i[1] != 0, op.i[2] != 0, op.i[3] != 0};
      color_jitter(in, out, order, factor, enabled);
      return;
    }
    case OpKind::GaussianBlur:
      gaussian_blur(in, out, int(op.i[0]), int(op.i[1]), p.f[0], ws);
      return;
    case OpKind::GaussianNoise: {
      const uint64_t key = uint64_t(p.i[0]);
      const size_t n = in.shape().bytes();
      for (size_t k = 0; k < n; ++k) {
        const float nz = philox_normal(philox4x32_10(key, k), op.f[0], op.f[1]);
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
  }
}

std::vector<std::pair<std::string, double>> op_describe(const OpSpec& op, const Params& p) {
  std::vector<std::pair<std::string, double>> v;
  switch (op.kind) {
    case OpKind::Pad:
      v = {{"left", double(op.i[0])}, {"top", double(op.i[1])}, {"right", double(op.i[2])}, {"bottom", double(op.i[3])}};
      break;
    case OpKind::RandomCrop:
      v = {{"top", double(p.i[2])}, {"left", double(p.i[3])}, {"pad_top", double(p.i[4])}, {"pad_left", double(p.i[5])}};
      break;
    case OpKind::CenterCrop:
      v = {{"y0", double(p.i[0])}, {"x0", double(p.i[1])}};
      break;
    case OpKind::Resize:
      v = {{"height", double(p.i[0])}, {"width", double(p.i[1])}, {"crop_top", double(p.i[2])},
           {"crop_left", double(p.i[3])}, {"crop_height", double(p.i[4])}, {"crop_width", double(p.i[5])}};
      break;
    case OpKind::RandomResizedCrop:
      v = {{"top", double(p.i[0])}, {"left", double(p.i[1])}, {"height", double(p.i[2])}, {"width", double(p.i[3])},
           {"attempts", double(p.i[4])}};
      break;
    case OpKind::RandomRotation:
      v = {{"angle", p.f[0]}};
      break;
    case OpKind::RandomScale:
      v = {{"scale", p.f[0]}, {"height", double(p.i[0])}, {"width", double(p.i[1])}, {"y0", double(p.i[2])},
           {"x0", double(p.i[3])}};
      break;
    case OpKind::ColorJitter:
      v = {{"brightness", p.f[0]}, {"contrast", p.f[1]}, {"saturation", p.f[2]}, {"hue", p.f[3]}};
      for (int k = 0; k < 4; ++k) v.push_back({"order" + std::to_string(k), double(p.perm[size_t(k)])});
      break;
    case OpKind::GaussianBlur:
      v = {{"sigma", p.f[0]}};
      break;
    case OpKind::GaussianNoise:
      // the key as two exact 32-bit halves (a double cannot hold 64 bits)
      v = {{"key_lo", double(uint64_t(p.i[0]) & 0xFFFFFFFFull)}, {"key_hi", double(uint64_t(p.i[0]) >> 32)}};
      break;
    default:
      break;
  }
  (void)pad_mode_name;
  return v;
}

}  // namespace trd
