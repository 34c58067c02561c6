// Convolutions through cuDNN (the frontend's graph API): forward, dgrad and wgrad of an NHWC
// cross-correlation with KRSC weights, FP32 accumulation. Each call returns an op, or nullptr with `why` set
// when cuDNN cannot take it (not built with the frontend, library missing, no deterministic engine for these
// dtypes), so the caller can fall back to the direct kernels (csrc/ops/conv.cu).
#pragma once

#include <memory>
#include <string>

#include "ops/op.hpp"

namespace tr::native {

struct ConvGeo {
  int n, h, w, c, k, r, s, sh, sw, ph, pw, p, q;
};

struct ConvChoice {
  bool tf32 = false;      // FP32 convolutions may round their inputs to TF32
  bool autotune = true;   // time the heuristics' first engines at build and keep the fastest
};

std::unique_ptr<Op> cudnn_conv_fwd(Context& ctx, const ConvGeo& g, DT xdt, DT ydt, const void* x, const void* w,
                                   void* y, const ConvChoice& choice, std::string& why);

// dgrad (when dx is not null) and wgrad in one op.
std::unique_ptr<Op> cudnn_conv_bwd(Context& ctx, const ConvGeo& g, DT xdt, DT dydt, DT dwdt, DT dxdt, const void* x,
                                   const void* w, const void* dy, void* dw, void* dx, const ConvChoice& choice,
                                   std::string& why);

}  // namespace tr::native
