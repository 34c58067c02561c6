// Colour transforms on uint8 images with torchvision's float32 formulas (tensor functional):
// ColorJitter fused into one or two passes over planar float blocks, and RGB -> grey.
#pragma once

#include "common.hpp"

namespace trd {

// Applies the enabled adjustments (0 brightness, 1 contrast, 2 saturation, 3 hue) in `order`
// with `factor[k]`; each one's result is truncated to uint8 exactly as torchvision's are.
// `in` and `out` have the same shape and may be the same buffer. Channels must be 1 or 3.
void color_jitter(const ImgC& in, const Img& out, const int order[4], const double factor[4], const bool enabled[4]);

// 0.2989 R + 0.587 G + 0.114 B (float32), truncated, written to all three channels.
void rgb_to_gray3(const ImgC& in, const Img& out);

}  // namespace trd
