// Attention through cuDNN's SDPA graphs (the frontend's flash attention, FP16/BF16): which engine an
// attention_sdpa_fwd / attention_sdpa_bwd op runs, cuDNN's or tr's kernels (csrc/ops/attention.cu), and why.
// The factories are declared in ops/args/attention_sdpa.hpp (generated); this header holds what reports use.
#pragma once

#include <cstdint>
#include <string>

#include "ops/codes.hpp"

namespace tr::native {

struct AttentionSdpaFwdArgs;
struct AttentionSdpaBwdArgs;

// The shape a plan is built for: n samples of t tokens, `heads` heads of dh channels (D = heads * dh); qkv rows
// hold 3D values ([q | k | v]), y/dy rows D. Everything else the graph depends on is in the key too.
struct SdpaShape {
  std::int64_t n = 0, t = 0, heads = 0, dh = 0;
};

// A plan's key, the same on every machine (tr.backend.cuda.attention_engines.plan_key builds the same string):
// direction, dtype, sizes, the strides of Q/K/V (and dQ/dK/dV) in qkv and of O (and dO) in y, the stats flag
// (forward), the deterministic flag (backward) and the scale's float32 bits, e.g.
// "fprop:FP16:n2:t197:h12:d64:qkv=453888,64,2304,1:o=151296,64,768,1:stats=1:scale=0x3e000000". Plans are
// cached per device (one GPU model) under it, so the key and the device decide everything a graph depends on.
std::string sdpa_plan_key(bool backward, DT dt, const SdpaShape& s, bool stats, bool deterministic, float scale);

// What one plan chose, for tr.backend.cuda.attention_engines.
struct SdpaPlanRecord {
  std::string key;             // sdpa_plan_key
  std::string engine;          // the frontend's plan name (cuDNN's engine and knobs), or "kernel": tr's kernels
  std::string note;            // why tr's kernels run ("" when cuDNN runs)
  std::int64_t workspace = 0;  // bytes of the cuDNN workspace the plan uses
  bool deterministic = false;  // backward: cuDNN's deterministic algorithm was asked for
};

// The plan the attention_sdpa_fwd / _bwd op made from `args` (the record its factory took) on `device` used, if
// one was made in this process: false when no op of that key was made there.
bool attention_sdpa_plan(int device, const AttentionSdpaFwdArgs& args, SdpaPlanRecord& out);
bool attention_sdpa_plan(int device, const AttentionSdpaBwdArgs& args, SdpaPlanRecord& out);

}  // namespace tr::native
