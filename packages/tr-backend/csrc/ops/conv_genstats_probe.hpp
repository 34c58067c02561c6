// A measurement, not an op (issue [18]): can cuDNN produce batch norm's statistics in a convolution's epilogue
// (conv + genstats) and apply the previous BN's scale, bias and ReLU in its prologue (scale-bias-relu-conv-genstats,
// NVIDIA's ResNet fusion), deterministically, accurately and faster than the plain convolution plus tr's own BN
// statistics pass? benchmarks/conv_genstats_probe.py calls this for each convolution shape of a network and keeps
// the answers; no plan uses the fusion until they say it wins (docs/decisions/2026-12-01-batch-norm-carries-what-
// follows.md). FP16 NHWC only: cuDNN's runtime-fusion engines take genstats with HALF tensors only.
#pragma once

#include <cstdint>
#include <string>

namespace tr::native {

// One convolution: n x h x w x c input (NHWC), k filters r x s (KRSC), stride and padding alike on both axes.
struct GenstatsProbeShape {
  std::int64_t n = 0, c = 0, h = 0, w = 0, k = 0, r = 1, s = 1, stride = 1, pad = 0;
  bool prologue = false;  // scale, bias and ReLU applied to x inside the convolution (the previous BN's apply)
  int reps = 20;          // timed executions of each plan
  std::uint64_t seed = 1;
};

struct GenstatsProbeResult {
  // the plain convolution (the graph tr's convolutions build) under tr's rule: the heuristics' first buildable
  // engine with no NONDETERMINISTIC or REDUCED_PRECISION_REDUCTION note
  std::string plain_engine;
  double plain_ms = 0.0;
  // the fused graph: the plans the heuristics offer, the rule's choice (its place among them, -1 for none)
  std::int64_t fused_plans = 0;
  std::int64_t fused_rank = -1;
  std::string fused_engine;  // "" when no deterministic engine builds (fused_note says why)
  std::string fused_note;
  double fused_build_s = 0.0;
  double fused_ms = 0.0;
  bool sums_repeat = false;   // two executions wrote the same SUM and SQ_SUM bytes
  bool y_matches_plain = false;  // the fused graph's y has the plain convolution's bytes
  double y_max_abs_diff = 0.0;   // between the two y
  // the fused sums against float64 sums of the fused y (computed on the host): the largest relative error of the
  // per-channel sum (over max |sum|), of the variance sq_sum / m - mean^2 derived from them (over the float64
  // variance), with m = n * p * q
  double sum_rel_err = 0.0;
  double var_rel_err = 0.0;
};

// Builds, runs and times both graphs on `device`. Raises DeviceUnavailable without cuDNN (or a build without the
// frontend), BadArgument for sizes that are not a convolution or odd channel counts (HALF rows must be 32-bit
// aligned), Backend when even the plain convolution has no engine. A fused graph cuDNN cannot take is an answer:
// fused_engine "" and fused_note saying why.
GenstatsProbeResult conv_genstats_probe(int device, const GenstatsProbeShape& shape);

}  // namespace tr::native
