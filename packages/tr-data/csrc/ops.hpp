// The uint8 HWC transforms. Each transform is (spec, params): the spec is fixed when the chain is
// built; the params are drawn per sample from that transform's Philox stream. draw() picks the
// params, out_shape() says what they produce, apply() does the work. No virtual calls: one switch
// per transform per sample, then tight loops.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "resample.hpp"

namespace trd {

enum class OpKind : int {
  Pad = 1,
  RandomCrop = 2,
  CenterCrop = 3,
  Resize = 4,
  RandomResizedCrop = 5,
  RandomRotation = 6,
  RandomScale = 7,
  ColorJitter = 8,
  GaussianBlur = 9,
  GaussianNoise = 10,
  RandomGrayscale = 11,
  RandomAutocontrast = 12,
};

constexpr int kMaxFill = 16;  // fill values carried per transform (one per channel, or one for all)

// Spec layouts (f = doubles, i = ints); see ops.cpp and tr/data/transforms.py, which build them.
struct OpSpec {
  OpKind kind = OpKind::Pad;
  int slot = 0;  // Philox stream slot of this transform (its position in the user's chain + 1)
  std::vector<double> f;
  std::vector<long long> i;
  std::vector<double> fill;  // per channel (or a single value), 0..255
  std::string name;          // for messages
};

struct Params {
  bool apply = true;
  std::array<double, 8> f{};
  std::array<long long, 8> i{};
  std::array<int, 4> perm{};
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

// Validation of a spec that does not need an image (called when the chain is built).
void op_check(const OpSpec& op);

}  // namespace trd
