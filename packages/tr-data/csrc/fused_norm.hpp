// FusedNormalization: uint8 HWC -> normalised FP32, FP16 or BF16 HWC in one pass, with the horizontal
// flip and the erasing rectangle folded in, written straight into the destination sample.
#pragma once

#include <vector>

#include "common.hpp"

namespace trd {

// BF16 is stored as its uint16 bit patterns (tr.core.bf16; DType.BF16's numpy storage).
enum class OutDType : int { F32 = 0, F16 = 1, BF16 = 2 };

struct FusedSpec {
  std::vector<double> mean{0.0}, std{1.0};  // one value (all channels) or one per channel
  OutDType dtype = OutDType::F32;
  int pad_channels_to = 0;  // output channels = max(image channels, pad_channels_to); extra = 0
  bool has_flip = false;
  double flip_p = 0.5;
  bool has_erase = false;
  double erase_p = 0.5, erase_scale_lo = 0.02, erase_scale_hi = 0.33;
  double erase_ratio_lo = 0.3, erase_ratio_hi = 3.3;
  std::vector<double> erase_value{0.0};  // in normalised space, one or per channel

  // y = float(x) * a_c + b_c with a_c = float32(1 / (255 std_c)), b_c = float32(-mean_c / std_c):
  // (x / 255 - mean) / std within about 1.5 float32 ulp, identical on every CPU.
  void coefficients(int C, std::vector<float>& a, std::vector<float>& b) const;
  void build();  // validates
  int out_channels(int c) const { return c > pad_channels_to ? c : pad_channels_to; }
  size_t elem_bytes() const { return dtype == OutDType::F32 ? 4 : 2; }
};

struct FusedParams {
  bool flip = false;
  bool erase = false;
  int ei = 0, ej = 0, eh = 0, ew = 0;  // rectangle in output coordinates
};

// Flip draws come from the stream of slot 0 at k = 0, erasing draws from k = 16 on.
void fused_draw(const FusedSpec& f, uint64_t sample_seed, const Shape3& in, FusedParams& p);

// What fused_write keeps between calls (one per worker; no thread_local: in a shared library each
// thread_local access is a __tls_get_addr call, and they took a quarter of the pass).
struct FusedScratch {
  std::vector<float> ca, cb;      // per-channel coefficients
  std::vector<float> arow, brow;  // laid out along the output row (padded channels: a = b = 0)
  int key_w = -1, key_c = -1, key_oc = -1;
  std::vector<float> key_a, key_b;
  std::vector<uint8_t> px;  // a source row flipped and/or widened to the output channels
  std::vector<float> row;   // FP32 row before its FP16 / BF16 conversion (the portable path)
};

// Writes img (h, w, c) as (h, w, out_channels(c)) of f.dtype at dst.
void fused_write(const FusedSpec& f, const FusedParams& p, const ImgC& img, void* dst, FusedScratch& s);

// FP32 -> FP16 (round to nearest even). F16C when the CPU has it, else a bit-exact software path.
void f32_to_f16(const float* src, uint16_t* dst, size_t n);
bool cpu_has_f16c();
void set_f16c_enabled(bool on);  // tests force the software path to compare both
bool f16c_enabled();

// FP32 -> BF16 bits: round to nearest even on the float32 bits, every NaN to the quiet 0x7FC0. The rounding of
// tr.core.bf16.bf16_bits and CUDA's __float2bfloat16_rn, bit for bit.
void f32_to_bf16(const float* src, uint16_t* dst, size_t n);

}  // namespace trd
