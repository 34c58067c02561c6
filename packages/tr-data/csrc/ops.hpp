// The uint8 HWC transforms. Each transform is (spec, params): the spec is fixed when the chain is
// built; the params are drawn per sample from that transform's Philox stream. draw() picks the
// params, out_shape() says what they produce, apply() does the work. No virtual calls: one switch
// per transform per sample, then tight loops.
#pragma once

#include <array>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "autoaugment.hpp"
#include "common.hpp"
#include "op_params.hpp"
#include "resample.hpp"

namespace trd {

constexpr int kMaxFill = 16;  // fill values carried per transform (one per channel, or one for all)

// One transform of a chain: its typed parameters (op_params.hpp, generated from tools/gen_op_params.py; the
// alternative held is the kind), its Philox stream slot and its name for messages.
struct OpSpec {
  OpKind kind;
  int slot = 0;      // Philox stream slot of this transform (its position in the user's chain + 1)
  std::string name;  // for messages (the Python transform's repr)
  OpParams params;

  OpSpec(OpParams p, int slot_, std::string name_)
      : kind(std::visit([](const auto& x) { return std::decay_t<decltype(x)>::kind; }, p)),
        slot(slot_),
        name(std::move(name_)),
        params(std::move(p)) {}
  // The parameters of kind P (the caller switched on `kind`).
  template <class P>
  const P& as() const {
    return std::get<P>(params);
  }
};

// A box of an image: rows [top, top + height), columns [left, left + width).
struct Box {
  long long top = 0, left = 0, height = 0, width = 0;
};

// ColorJitter's operations, as its factor and order entries number them.
enum JitterOp : int { kBrightness = 0, kContrast = 1, kSaturation = 2, kHue = 3 };

// One sample's draws of one transform (op_draw); each field is read by the kinds its comment names.
struct Params {
  bool apply = true;
  // RandomCrop, CenterCrop: where the output's pixel (0, 0) lies in the input (negative: in the padding);
  // RandomScale: where the output window starts in the scaled image (negative: centred padding)
  long long y0 = 0, x0 = 0;
  long long top = 0, left = 0, pad_top = 0, pad_left = 0;  // RandomCrop: the corner in the padded image
  long long out_h = 0, out_w = 0;  // Resize: the output size; RandomScale: the scaled image's size
  Box box;                         // Resize, RandomResizedCrop: the input box that is resampled
  int attempts = 0;                // RandomResizedCrop: draws taken (10: the centre-crop fallback)
  double angle = 0.0;              // RandomRotation, degrees
  double scale = 0.0;              // RandomScale
  double sigma = 0.0;              // GaussianBlur
  std::array<double, 4> factor{};  // ColorJitter, by JitterOp
  std::array<int, 4> order{};      // ColorJitter: the JitterOps in the order they run
  uint64_t noise_key = 0;          // GaussianNoise: the Philox key of the sample's noise
  AugDraw aug;                     // RandAugment, TrivialAugmentWide: the steps drawn
};

struct Workspace;  // pipeline.hpp

// Draw this sample's parameters; throws DataErr when the input cannot be transformed (e.g. an
// image smaller than its crop).
void op_draw(const OpSpec& op, Stream& rng, const Shape3& in, Params& p);
// Shape produced from `in` with params `p` (p.apply false: the input shape).
Shape3 op_out_shape(const OpSpec& op, const Params& p, const Shape3& in);
// out = op(in); `out` has op_out_shape() and never aliases `in`.
void op_apply(const OpSpec& op, const Params& p, const ImgC& in, const Img& out, Workspace& ws);
// Parameters in readable form (for Compose.params and the tests).
std::vector<std::pair<std::string, double>> op_describe(const OpSpec& op, const Params& p);

// Validation of a spec's parameters that does not need an image (called when the chain is built).
void op_check(const OpSpec& op);

}  // namespace trd
