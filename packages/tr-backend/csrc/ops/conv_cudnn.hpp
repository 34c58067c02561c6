// Convolutions through cuDNN (the frontend's graph API): forward, dgrad and wgrad of an NHWC
// cross-correlation with KRSC weights, grouped or not (cuDNN reads the group count from the weights' channels),
// FP32 accumulation. Each call returns an op, or nullptr with `why` set
// when cuDNN cannot take it (not built with the frontend, no deterministic engine for these dtypes), so the
// caller can fall back to the direct kernels (csrc/ops/conv.cu); a missing library and a pinned engine that
// cannot run here are errors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ops/op.hpp"

namespace tr::native {

// c and k are the input's and output's channels; groups divides both: output channel ko reads input channels
// [ko / (k / groups) * c / groups, ... + c / groups), the weights are [k, r, s, c / groups] (torch's groups).
struct ConvGeo {
  int n, h, w, c, k, r, s, sh, sw, ph, pw, p, q;
  int groups = 1;
};

// How a plan's engine is chosen. By default a rule of (GPU model, cuDNN and frontend versions, the plan's key)
// alone: the heuristics' first engine that passes tr's filters and builds, untimed, the plan cache unread, so two
// machines of one model and one library choose alike. `autotune` (an explicit opt-in) times the first few and
// keeps the fastest, or the one the plan cache names: faster on some shapes, but the choice may differ between
// machines. A pinned engine (set_conv_pins) overrides both.
struct ConvChoice {
  bool tf32 = false;      // FP32 convolutions may round their inputs to TF32
  bool autotune = false;  // time the heuristics' first engines at build and keep the fastest (or the cached one)
};

enum class ConvDir { Fwd, Dgrad, Wgrad };
const char* conv_dir_name(ConvDir d);  // "fprop", "dgrad", "wgrad"

// A plan's key, the same on every machine: direction, geometry, dtypes and TF32, e.g.
// "fprop:n8:h32:w32:c3:k64:r3:s3:sh1:sw1:ph1:pw1:FP16,FP16,FP16:tf32=0" (":g<groups>" after pw when grouped).
// Dtypes are (dy, x, dw) for wgrad and (dy, w, dx) for dgrad. The plan cache keys its entries by it plus the
// workspace cap; pins are keyed by it.
std::string conv_plan_key(ConvDir d, const ConvGeo& g, DT a, DT b, DT out, bool tf32);

// Engines pinned by plan key: the frontend's engine name ("eng<id>_k<knob>=<value>...") or "direct" (tr's
// direct kernels). A plan made later for a pinned key builds exactly that engine, timing and cache aside, or
// the op fails naming the convolution: nothing else is tried. Replaces every earlier pin (an empty map unpins).
// Plans already made keep their engines (graphs captured with them are unaffected).
void set_conv_pins(std::map<std::string, std::string> pins);
std::map<std::string, std::string> conv_pins();
std::string conv_pin(const std::string& key);  // "" when `key` is not pinned

// What one plan chose, for reports and pins.
struct ConvPlanRecord {
  std::string key;        // conv_plan_key
  std::string direction;  // "fprop", "dgrad", "wgrad"
  std::string engine;     // the frontend's engine name; "direct" for the direct kernels
  std::string source;     // "heuristic", "timed", "cache" (autotune's cached winner), "pinned", "direct"
  int rank = -1;          // the engine's position in the heuristics' list; -1 when not from it
  std::int64_t workspace = 0;  // bytes
  int timed = 0;          // candidates timed (autotune)
};

// The plans of a conv_fwd / conv_bwd op made from `args` (the record its factory took; only geometry, dtypes,
// tf32, autotune, engine and whether dx is given are read) on `device`: fprop, or wgrad then dgrad. A direction
// with no cuDNN plan (the direct kernels ran) has engine "direct". Needs no GPU (then every one is "direct").
// Refuses what the factory refuses of the same values (groups, engine, contradicting pins). Defined in conv.cu;
// the records are ops/args/conv.hpp's.
struct ConvFwdArgs;
struct ConvBwdArgs;
std::vector<ConvPlanRecord> conv_op_plans(int device, const ConvFwdArgs& args);
std::vector<ConvPlanRecord> conv_op_plans(int device, const ConvBwdArgs& args);

// The plan of (device, direction, geometry, dtypes, choice) with the pins now, if one was made. Used by
// conv_op_plans.
bool cudnn_plan_record(int device, ConvDir d, const ConvGeo& g, DT a, DT b, DT out, const ConvChoice& choice,
                       ConvPlanRecord& out_record);

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
  std::int64_t pinned = 0;        // plans built from a pinned engine
  double seconds = 0;             // all planning: graph validation, heuristics, builds, timing, cache I/O
  double build_seconds = 0;       // of which heuristics queries and plan builds
  double tune_seconds = 0;        // of which timing candidates
};
CudnnPlanStats cudnn_plan_stats();

// What every plan's choice depends on besides the GPU, cuDNN's version and the plan key: the frontend version
// compiled in (0 without the frontend), the workspace cap (TR_CUDNN_WORKSPACE_MB, default 1024; a constant,
// never derived from free memory) and how many candidates autotuning times.
struct CudnnConvSettings {
  long frontend = 0;
  long workspace_cap_mb = 0;
  int candidates = 0;
};
CudnnConvSettings cudnn_conv_settings();

// The plan cache file convolutions on `device` use now, "" when it is off (TR_CUDNN_CACHE=0, no directory) or
// cuDNN is not available. Loads cuDNN.
std::string cudnn_plan_cache_path(int device);

}  // namespace tr::native
