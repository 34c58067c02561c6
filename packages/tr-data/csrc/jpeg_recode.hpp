// Lossless JPEG re-coding through libjpeg-turbo (jpegtran's transcoding: the DCT coefficients are copied, not
// decoded and re-encoded), for DTS packing: a progressive or arithmetic-coded file becomes a baseline one with
// optimised Huffman tables, which decodes to the same pixels about 2.5x faster (benchmarks/RESULTS.md).
// Which files need it: jpeg_needs_baseline (jpeg.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trd {

// The file re-coded as sequential (baseline) Huffman JPEG with optimised tables and no APPn/COM markers
// (the pixels a decoder gives are unchanged); DataErr with libjpeg's message for a corrupt file.
std::vector<uint8_t> jpeg_recode_baseline(const uint8_t* data, size_t size);

}  // namespace trd
