// Bilinear rotation of uint8 HWC images (RandomRotation).
#pragma once

#include "common.hpp"

namespace trd {

// Rotation by `angle_deg` (counter-clockwise) about the image centre ((w-1)/2, (h-1)/2 in pixel
// indices), bilinear; taps outside the image read `fill` (per channel, 0..255 floats).
void rotate_bilinear(const ImgC& in, const Img& out, double angle_deg, const float* fill);

}  // namespace trd
