// Batched JPEG decoding on the device through nvJPEG, opened at run time (dlopen) like cuBLASLt and NCCL: the
// extension imports without the library, and a missing one is DeviceUnavailable naming every path tried.
//
// One decoder decodes batches of JPEGs whose bytes are in host memory (pinned for speed) into device buffers
// as interleaved RGB (a gray file as RGB too, as tr.data's CPU decode gives it), each image's region of interest
// only. The hardware backend (the JPEG engines of A100/H100/H200) is used where the GPU has it, else the
// GPU-assisted hybrid backend; an image the backend does not take (progressive on the hardware engine, 4:1:0,
// CMYK, ...) is reported, not decoded, so the caller decodes it on the CPU; a damaged one is reported as such
// (NVJPEG_FLAGS_BITSTREAM_STRICT).
//
// Two paths: the hardware backend decodes a batch in one nvjpegDecodeBatchedEx call (per-image decode parameters);
// the GPU-hybrid backend refuses every file there (measured on the H200), so its region calls go through nvJPEG's
// decoupled per-image API instead (jpeg_decoupled.hpp: Huffman on host threads, the rest on the stream). The
// decoupled path's CPU-Huffman decoder (NVJPEG_BACKEND_HYBRID) is the one meant for progressive files (DALI sends
// them there; nvjpegDecoderJpegSupported decides per file, a refusal being Unsupported), and it can be made on a
// hardware handle too (as DALI does): JpegCall::RoiDecoupled sends a hardware decoder's batch through it, so a
// caller may give the engine's refusals (progressive files) to a decoder with that call instead of to
// libjpeg-turbo (tr.task.jpeg_feeder does with refused="nvjpeg"; the H200 decodes them there, GPU tests).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tr::native::cuda {

// Per-image results of decode().
enum class JpegStatus : int { Ok = 0, Unsupported = 1, Bad = 2 };

// How decode() calls nvJPEG: Roi, nvjpegDecodeBatchedEx with each image's region of interest, interleaved RGB (what
// the feeder uses); Whole / WholePlanar, nvjpegDecodeBatched of whole images (each region must be its image),
// interleaved, or planar RGB (plane c at dst + c * w * h): the calls other decoders make, for comparison;
// WholeYuv, the file's own Y, Cb, Cr planes (plane c at dst + c * w * h, pitch w, chroma at the file's
// subsampling): no colour conversion by nvJPEG, to measure what its conversion kernel costs beside a load;
// RoiDecoupled, the regions through the decoupled per-image API whatever the backend (what Roi does on the
// GPU-hybrid backend).
enum class JpegCall : int { Roi = 0, Whole = 1, WholePlanar = 2, WholeYuv = 3, RoiDecoupled = 4 };

// Paths tried before the built-in ones (the nvidia-nvjpeg wheel's library, found by Python).
void add_nvjpeg_candidates(const std::vector<std::string>& paths);
std::vector<std::string> nvjpeg_candidates();
// Loads the library once: (its path, its version as major * 1000 + minor * 10 + patch).
std::pair<std::string, int> load_nvjpeg();

struct JpegImage {
  const unsigned char* data;  // host bytes of the file
  std::size_t length;
  unsigned char* dst;         // device: roi_h rows of roi_w * 3 bytes, `pitch` bytes apart
  std::size_t pitch;
  int roi_x, roi_y, roi_w, roi_h;  // the region of the whole image to decode
};

class JpegDecoder {
 public:
  // backend: "hardware", "gpu" (the GPU-assisted hybrid) or "auto" (hardware where the device has it).
  // max_batch: the largest batch decode() takes; threads: host threads nvJPEG may use for a batch.
  // strict: damaged bitstreams are errors (NVJPEG_FLAGS_BITSTREAM_STRICT); interpolate: interpolated chroma
  // upsampling (NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION, libjpeg-turbo's default "fancy" upsampling; 5x slower
  // on the H200's engine), else each chroma sample replicated; a flag the backend refuses is dropped (backend()
  // says what was made). gpu_huffman_pixels: on the decoupled path, baseline images whose Huffman work (region
  // width x the rows down to its bottom) reaches it are Huffman-decoded on the GPU, the others on `threads` host
  // threads (-1: never on the GPU). The GPU-hybrid backend needs the decoupled API (DeviceUnavailable naming
  // the symbols the library lacks).
  JpegDecoder(int device, const std::string& backend, int max_batch, int threads, bool strict = true,
              bool interpolate = false, long long gpu_huffman_pixels = 1000000);
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Decodes every supported image of the batch on `stream` (asynchronously: the regions are written when the
  // stream reaches that point) and returns one JpegStatus per image. The host bytes must stay valid until the
  // stream has passed the decode. precheck: parse each header and ask the backend first (what it refuses is then
  // reported without disturbing the batch); without, the batch is submitted as it is, and only a failed batch is
  // decoded image by image to find the refused or damaged ones (for callers that sorted the files already). The
  // decoupled path (Roi on the GPU-hybrid backend, RoiDecoupled) parses every image anyway: precheck is moot.
  std::vector<int> decode(const std::vector<JpegImage>& images, cudaStream_t stream, bool precheck = true,
                          JpegCall call = JpegCall::Roi);

  const std::string& backend() const { return backend_name_; }
  int device() const { return device_; }
  // The decoupled path's decoders ("cpu-huffman+gpu-huffman", see jpeg_decoupled.hpp), "" until it is made (at
  // construction for the GPU-hybrid backend, at the first RoiDecoupled call for the hardware one).
  std::string decoupled() const;

 private:
  struct Impl;
  Impl* impl_;
  std::string backend_name_;
  int device_;
  int max_batch_;
  int threads_;
  long long gpu_huffman_pixels_;
};

}  // namespace tr::native::cuda
