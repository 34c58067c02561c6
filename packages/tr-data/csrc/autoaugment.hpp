// RandAugment and TrivialAugmentWide (torchvision.transforms.v2's) on uint8 HWC images: the op list, the
// magnitude tables and the fourteen ops, each with the float32 arithmetic of torchvision's tensor kernels.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"

namespace trd {

// torchvision's _AUGMENTATION_SPACE order (the draw picks an index into it).
enum AugOp : int {
  kAugIdentity = 0,
  kAugShearX,
  kAugShearY,
  kAugTranslateX,
  kAugTranslateY,
  kAugRotate,
  kAugBrightness,
  kAugColor,
  kAugContrast,
  kAugSharpness,
  kAugPosterize,
  kAugSolarize,
  kAugAutoContrast,
  kAugEqualize,
  kAugOpCount
};
constexpr int kMaxAugSteps = 16;  // RandAugment's num_ops limit (tr.data.checks.MAX_AUGMENT_OPS)

const char* aug_op_name(int op);

// One drawn operation: the op, its magnitude bin and the signed magnitude torchvision passes to the op
// (Solarize: the threshold as a fraction of 255; Posterize: the bits).
struct AugStep {
  int op = kAugIdentity;
  int bin = 0;
  double magnitude = 0.0;
};

// One sample's draws: the steps in the order they run.
struct AugDraw {
  std::array<AugStep, kMaxAugSteps> steps{};
  int n = 0;
};

// RandAugment (wide false: num_ops steps at bin `magnitude`) or TrivialAugmentWide (wide true: one step, its bin
// uniform): per step the op index (randint 0..13), the bin (TrivialAugmentWide: randint 0..bins-1) and the sign
// (uniform < 0.5), always all three draws, so a step's draws never depend on the op drawn.
void aug_draw(bool wide, int num_ops, int magnitude, int bins, Stream& rng, const Shape3& in, AugDraw& d);
// Some step is not Identity (else the image is passed on as it is, not copied).
bool aug_changes(const AugDraw& d);
// Runs the drawn steps from `in` into `out` (same shape); `tmp` is scratch for the intermediate images.
void aug_run(const AugDraw& d, const ImgC& in, const Img& out, const uint8_t* fill, std::vector<uint8_t>& tmp);
// The parameters of aug_check's kinds (num_ops < 0: TrivialAugmentWide); ConfigErr naming `name`.
void aug_check(const std::string& name, long long num_ops, long long magnitude, long long bins);

// The magnitude of `op` at `bin` of `bins`, before the sign (torchvision's tables, float32 as torch computes
// them): `wide` picks TrivialAugmentWide's table; h, w: the image (RandAugment's translations scale with it).
double aug_magnitude(int op, int bin, int bins, bool wide, int h, int w);
// The op's magnitude takes a random sign.
bool aug_signed(int op);

// out = op(in) for one step (same shape, never aliasing); fill: one uint8 per channel for the geometric ops.
void aug_apply(const AugStep& s, const ImgC& in, const Img& out, const uint8_t* fill);

// The pixel kernels (autoaugment_ops.cpp), torchvision.transforms.v2.functional's on uint8 tensors.
// Nearest-neighbour affine warp through torchvision's inverse matrix (6 doubles), grid and grid_sample.
void aug_affine_nearest(const ImgC& in, const Img& out, const double matrix[6], const uint8_t* fill);
void aug_brightness(const ImgC& in, const Img& out, double factor);
void aug_saturation(const ImgC& in, const Img& out, double factor);
void aug_contrast(const ImgC& in, const Img& out, double factor);
void aug_sharpness(const ImgC& in, const Img& out, double factor);
void aug_posterize(const ImgC& in, const Img& out, int bits);
void aug_solarize(const ImgC& in, const Img& out, double threshold);
void aug_autocontrast(const ImgC& in, const Img& out);
void aug_equalize(const ImgC& in, const Img& out);

}  // namespace trd
