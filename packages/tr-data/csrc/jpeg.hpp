// JPEG decoding in the worker pool through libjpeg-turbo (its libjpeg API), strict: a warning of the
// decoder (corrupt entropy data, premature end) is an error, so a damaged file never becomes a gray image.
#pragma once

#include <cstdint>
#include <vector>

#include "common.hpp"

namespace trd {

// Whether this build has libjpeg-turbo (CMake found it); without, decode_jpeg raises ConfigErr.
bool jpeg_available();

// The decoded (h, w, c) of a JPEG from its header (c: 3, or with keep_gray 1 for a gray file), DataErr for a
// bad file.
Shape3 jpeg_shape(const uint8_t* data, size_t size, bool keep_gray = false);

// Decodes ``data`` into ``out`` (resized to h*w*c) as RGB u8 HWC (a gray file too, as torchvision's
// ImageFolder converts it; keep_gray: one channel for a gray file).
ImgC decode_jpeg(const uint8_t* data, size_t size, std::vector<uint8_t>& out, bool keep_gray = false);

}  // namespace trd
