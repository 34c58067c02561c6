// Convolutions through cuDNN (the frontend's graph API): forward, dgrad and wgrad of an NHWC
// cross-correlation with KRSC weights, grouped or not (cuDNN reads the group count from the weights' channels),
// FP32 accumulation. Each call returns an op, or nullptr with `why` set
// when cuDNN cannot take it (not built with the frontend, library missing, no deterministic engine for these
// dtypes), so the caller can fall back to the direct kernels (csrc/ops/conv.cu).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ops/op.hpp"

namespace tr::native {

// c and k are the input's and output's channels; groups divides both: output channel ko reads input channels
// [ko / (k / groups) * c / groups, ... + c / groups), the weights are [k, r, s, c / groups] (torch's groups).
struct ConvGeo {
  int n, h, w, c, k, r, s, sh, sw, ph, pw, p, q;
  int groups = 1;
};

struct ConvChoice {
  bool tf32 = false;      // FP32 convolutions may round their inputs to TF32
  bool autotune = true;   // time the heuristics' first engines at build and keep the fastest (or the cached one)
};

std::unique_ptr<Op> cudnn_conv_fwd(Context& ctx, const ConvGeo& g, DT xdt, DT ydt, const void* x, const void* w,
                                   void* y, const ConvChoice& choice, std::string& why);

// dgrad (when dx is not null) and wgrad in one op.
std::unique_ptr<Op> cudnn_conv_bwd(Context& ctx, const ConvGeo& g, DT xdt, DT dydt, DT dwdt, DT dxdt, const void* x,
                                   const void* w, const void* dy, void* dw, void* dx, const ConvChoice& choice,
                                   std::string& why);

// Cumulative cost of planning cuDNN convolutions in this process (one plan per shape and direction), so a
// compile can be split into cuDNN search and the rest. Seconds are wall time on the planning thread.
struct CudnnPlanStats {
  std::int64_t graphs = 0;        // plans made (one per direction, geometry, dtypes, TF32; shared by ops)
  std::int64_t plans_built = 0;   // engines built (build_plan_at_index), winners and timed candidates
  std::int64_t autotuned = 0;     // plans whose candidates were timed
  std::int64_t cache_hits = 0;    // plans whose cached engine was built directly, untimed
  std::int64_t cache_misses = 0;  // plans with no cache entry (searched, then stored)
  std::int64_t cache_stale = 0;   // cached engine no longer offered or failed to build (searched again)
  double seconds = 0;             // all planning: graph validation, heuristics, builds, timing, cache I/O
  double build_seconds = 0;       // of which heuristics queries and plan builds
  double tune_seconds = 0;        // of which timing candidates
};
CudnnPlanStats cudnn_plan_stats();

// The plan cache file convolutions on `device` use now, "" when it is off (TR_CUDNN_CACHE=0, no directory) or
// cuDNN is not available. Loads cuDNN.
std::string cudnn_plan_cache_path(int device);

}  // namespace tr::native
