// RandAugment / TrivialAugmentWide: the draws, torchvision's affine matrices and rotate's fast paths, and the
// dispatch of each step to its kernel (autoaugment_ops.cpp).
#include "autoaugment.hpp"

#include <cmath>
#include <cstring>

namespace trd {

namespace {

constexpr double kPi = 3.14159265358979323846;
// CPython's math.radians / math.degrees: one multiplication by these constants
constexpr double kDegToRad = kPi / 180.0;
constexpr double kRadToDeg = 180.0 / kPi;

// Python's float `x % m` (m > 0): the result takes m's sign.
double py_mod(double x, double m) {
  double r = std::fmod(x, m);
  if (r != 0.0) {
    if ((m < 0) != (r < 0)) r += m;
  } else {
    r = std::copysign(0.0, m);
  }
  return r;
}

// torchvision's _get_inverse_affine_matrix, operation for operation (the same doubles).
void inverse_affine(double cx, double cy, double angle, double tx, double ty, double shear_x, double shear_y,
                    double m[6]) {
  const double scale = 1.0;
  const double rot = angle * kDegToRad, sx = shear_x * kDegToRad, sy = shear_y * kDegToRad;
  const double cos_sy = std::cos(sy), tan_sx = std::tan(sx), rot_minus_sy = rot - sy;
  const double cx_plus_tx = cx + tx, cy_plus_ty = cy + ty;
  const double a = std::cos(rot_minus_sy) / cos_sy;
  const double b = -(a * tan_sx + std::sin(rot));
  const double c = std::sin(rot_minus_sy) / cos_sy;
  const double d = std::cos(rot) - c * tan_sx;
  m[0] = d / scale;
  m[1] = -b / scale;
  m[2] = 0.0;
  m[3] = -c / scale;
  m[4] = a / scale;
  m[5] = 0.0;
  m[2] += cx - m[0] * cx_plus_tx - m[1] * cy_plus_ty;
  m[5] += cy - m[3] * cx_plus_tx - m[4] * cy_plus_ty;
}

// torch.rot90(img, k, dims=(-2, -1)) for k = 1, 2, 3 (counter-clockwise quarter turns); k 1 and 3 on square
// images only (torchvision's fast paths).
void rot90(const ImgC& in, const Img& out, int k) {
  const int H = in.h, W = in.w;
  const size_t C = size_t(in.c);
  for (int i = 0; i < out.h; ++i) {
    uint8_t* d = out.row(i);
    for (int j = 0; j < out.w; ++j) {
      const int y = k == 1 ? j : (k == 2 ? H - 1 - i : H - 1 - j);
      const int x = k == 1 ? W - 1 - i : (k == 2 ? W - 1 - j : i);
      std::memcpy(d + size_t(j) * C, in.row(y) + size_t(x) * C, C);
    }
  }
}

// rotate_image (v2): angle % 360; 0, 180 and (square) 90 / 270 are exact copies; otherwise the affine warp of
// the matrix of -angle about the centre.
void rotate(const ImgC& in, const Img& out, double degrees, const uint8_t* fill) {
  const double a = py_mod(degrees, 360.0);
  if (a == 0.0) {
    std::memcpy(out.p, in.p, in.shape().bytes());
    return;
  }
  if (a == 180.0) return rot90(in, out, 2);
  if (in.h == in.w && a == 90.0) return rot90(in, out, 1);
  if (in.h == in.w && a == 270.0) return rot90(in, out, 3);
  double m[6];
  inverse_affine(0.0, 0.0, -a, 0.0, 0.0, 0.0, 0.0, m);
  aug_affine_nearest(in, out, m, fill);
}

}  // namespace

const char* aug_op_name(int op) {
  static const char* const names[kAugOpCount] = {
      "Identity",   "ShearX", "ShearY",   "TranslateX", "TranslateY", "Rotate",       "Brightness",
      "Color",      "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"};
  return op >= 0 && op < kAugOpCount ? names[op] : "?";
}

bool aug_signed(int op) { return op >= kAugShearX && op <= kAugSharpness; }

void aug_check(const std::string& name, long long num_ops, long long magnitude, long long bins) {
  if (bins < 2 || bins > kMaxSide)
    throw ConfigErr(name + ": num_magnitude_bins must be in [2, " + std::to_string(kMaxSide) + "], got " +
                    std::to_string(bins));
  if (num_ops < 0) return;  // TrivialAugmentWide: no num_ops, no fixed magnitude
  if (num_ops > kMaxAugSteps)
    throw ConfigErr(name + ": num_ops must be in [0, " + std::to_string(kMaxAugSteps) + "], got " +
                    std::to_string(num_ops));
  if (magnitude < 0 || magnitude > bins - 1)
    throw ConfigErr(name + ": magnitude must be in [0, num_magnitude_bins - 1] = [0, " + std::to_string(bins - 1) +
                    "], got " + std::to_string(magnitude));
}

void aug_draw(bool wide, int num_ops, int magnitude, int bins, Stream& rng, const Shape3& in, AugDraw& d) {
  d.n = wide ? 1 : num_ops;
  for (int k = 0; k < d.n; ++k) {
    AugStep& s = d.steps[size_t(k)];
    s.op = int(rng.randint(0, kAugOpCount - 1));
    s.bin = wide ? int(rng.randint(0, bins - 1)) : magnitude;
    const bool negate = rng.uniform() < 0.5f;
    s.magnitude = aug_magnitude(s.op, s.bin, bins, wide, in.h, in.w);
    if (aug_signed(s.op) && negate) s.magnitude = -s.magnitude;
  }
}

bool aug_changes(const AugDraw& d) {
  for (int k = 0; k < d.n; ++k)
    if (d.steps[size_t(k)].op != kAugIdentity) return true;
  return false;
}

void aug_apply(const AugStep& s, const ImgC& in, const Img& out, const uint8_t* fill) {
  const double m = s.magnitude;
  double mat[6];
  switch (s.op) {
    case kAugShearX:  // about the top-left corner (center=[0, 0]); shear angle atan(m) in degrees
      inverse_affine(-(in.w * 0.5), -(in.h * 0.5), 0.0, 0.0, 0.0, std::atan(m) * kRadToDeg, 0.0, mat);
      return aug_affine_nearest(in, out, mat, fill);
    case kAugShearY:
      inverse_affine(-(in.w * 0.5), -(in.h * 0.5), 0.0, 0.0, 0.0, 0.0, std::atan(m) * kRadToDeg, mat);
      return aug_affine_nearest(in, out, mat, fill);
    case kAugTranslateX:  // translate=[int(m), 0]: truncated to whole pixels
      inverse_affine(0.0, 0.0, 0.0, std::trunc(m), 0.0, 0.0, 0.0, mat);
      return aug_affine_nearest(in, out, mat, fill);
    case kAugTranslateY:
      inverse_affine(0.0, 0.0, 0.0, 0.0, std::trunc(m), 0.0, 0.0, mat);
      return aug_affine_nearest(in, out, mat, fill);
    case kAugRotate:
      return rotate(in, out, m, fill);
    case kAugBrightness:
      return aug_brightness(in, out, 1.0 + m);
    case kAugColor:
      return aug_saturation(in, out, 1.0 + m);
    case kAugContrast:
      return aug_contrast(in, out, 1.0 + m);
    case kAugSharpness:
      return aug_sharpness(in, out, 1.0 + m);
    case kAugPosterize:
      return aug_posterize(in, out, int(m));
    case kAugSolarize:
      return aug_solarize(in, out, 255.0 * m);
    case kAugAutoContrast:
      return aug_autocontrast(in, out);
    case kAugEqualize:
      return aug_equalize(in, out);
    default:  // Identity
      std::memcpy(out.p, in.p, in.shape().bytes());
  }
}

void aug_run(const AugDraw& d, const ImgC& in, const Img& out, const uint8_t* fill, std::vector<uint8_t>& tmp) {
  if (d.n == 0) {
    std::memcpy(out.p, in.p, in.shape().bytes());
    return;
  }
  if (d.n > 1 && tmp.size() < in.shape().bytes()) tmp.resize(in.shape().bytes());
  const Img scratch{tmp.data(), in.h, in.w, in.c};
  ImgC cur = in;
  for (int k = 0; k < d.n; ++k) {
    // alternate between `scratch` and `out` so that the last step writes `out`
    const Img& dst = (d.n - 1 - k) % 2 == 0 ? out : scratch;
    aug_apply(d.steps[size_t(k)], cur, dst, fill);
    cur = dst;
  }
}

}  // namespace trd
