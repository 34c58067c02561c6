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

// Whether the file's entropy coding is progressive or arithmetic (what jpeg_recode_baseline speeds up), from
// its header; DataErr for a bad file.
bool jpeg_needs_baseline(const uint8_t* data, size_t size);

// Decodes ``data`` into ``out`` (resized to h*w*c) as RGB u8 HWC (a gray file too, as torchvision's
// ImageFolder converts it; keep_gray: one channel for a gray file).
// ``scale`` M in 1..8: libjpeg-turbo's DCT scaling, the image decoded at M/8 of its size (ceil of each side):
// the IDCT, upsampling and colour conversion do M^2/64 of the work. Not the bytes of a full decode and a
// resize (a different filter): used only when the user asks for it (PreprocessorSettings.jpeg_dct_scaling).
// ``interpolate_chroma``: libjpeg's default "fancy" (triangle-filtered) chroma upsampling of subsampled files, as
// Pillow and the CPU pipeline decode; false: each chroma sample replicated (what nvJPEG's engine does at full
// speed: the device feeder's libjpeg-turbo share then matches it).
ImgC decode_jpeg(const uint8_t* data, size_t size, std::vector<uint8_t>& out, bool keep_gray = false, int scale = 8,
                 bool interpolate_chroma = true);

// The size of a (h, w) image decoded at scale/8 (libjpeg's jdiv_round_up).
Shape3 jpeg_scaled_shape(const Shape3& full, int scale);

// The smallest M of 1, 2, 4 (the reductions libjpeg-turbo has SIMD IDCTs for) for which a (h, w) crop decoded
// at M/8 is still at least (oh, ow): the resample after it then only shrinks, as it would from the full
// decode; 8 when none keeps that.
int jpeg_scale_for(int h, int w, int oh, int ow);

// Decodes only the rows and columns of the window (y, x, h, w) of the full image, widened by a margin and
// to libjpeg's iMCU columns: ``oy``/``ox`` say where the decoded image starts in the full one. The pixels
// inside the window are those a full decode gives (checked by the tests); damage in the rows below the window
// is not seen (they are not decoded).
// ``full``: the image's jpeg_shape (the caller has it already).
// With ``scale`` < 8 the decode is DCT-scaled (see decode_jpeg) and ``full`` and the window are in the scaled
// image's coordinates (full = jpeg_scaled_shape(shape, scale)).
ImgC decode_jpeg_window(const uint8_t* data, size_t size, const Shape3& full, int y, int x, int h, int w,
                        std::vector<uint8_t>& out, int& oy, int& ox, int scale = 8, bool interpolate_chroma = true);

// Whether the engine decodes only the window a first RandomResizedCrop reads (default on: 17 % more images/s
// on 300-500 px JPEGs, benchmarks/RESULTS.md; libjpeg-turbo still entropy-decodes the rows above the window
// and the cropped columns, so the gain grows with the image; off: whole decodes, the same bytes).
void set_window_decode(bool on);
bool window_decode();

}  // namespace trd
