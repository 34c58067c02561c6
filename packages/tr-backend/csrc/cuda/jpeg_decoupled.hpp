// Per-image decoding of JPEG regions through nvJPEG's decoupled API, for the handles whose batched calls do not
// take the files (the GPU-hybrid backend refuses every file in nvjpegDecodeBatchedEx on the H200) or the files
// that the hardware engine refuses (progressive): each image is parsed (nvjpegJpegStreamParse), Huffman-decoded on
// the host (nvjpegDecodeJpegHost), then copied up (nvjpegDecodeJpegTransferToDevice) and finished on the device
// (nvjpegDecodeJpegDevice: IDCT, chroma upsampling, colour conversion, only the region written, RGBI at the given
// pitch).
//
// Two nvJPEG decoders share the handle: NVJPEG_BACKEND_HYBRID (Huffman on the CPU; the one that takes progressive
// files) and NVJPEG_BACKEND_GPU_HYBRID (Huffman on the GPU; baseline files only), the latter only for baseline
// images whose Huffman work (the rows down to the region's bottom) reaches `gpu_huffman_pixels`. An image that
// neither decoder takes (nvjpegDecoderJpegSupported) is Unsupported; a damaged one (nvjpegDecodeJpegHost: BAD_JPEG
// or INCOMPLETE_BITSTREAM) is Bad.
//
// The host phases of a batch run on `threads` host threads, the device phases in image order on the caller's
// stream from the calling thread. Each image takes one of 2 * threads slots (a jpeg stream, decode parameters, a
// state for each decoder, a pinned and a device buffer, an event): slot k % slots for image k. Before a slot's
// host phase the image that used it last must have had its device phase enqueued and the stream must have passed
// it (its event), so a pinned buffer is never rewritten while its copy to the device is in flight, and the host
// phase of image k + 1 overlaps the device phases before it.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "cuda/jpeg_decoder.hpp"
#include "cuda/nvjpeg_api.hpp"

namespace tr::native::cuda {

class JpegDecoupled {
 public:
  // handle: the JpegDecoder's (made with its flags: strict bitstreams, interpolated chroma); DeviceUnavailable
  // naming the missing symbols where the library lacks the decoupled API.
  JpegDecoupled(nvj::Handle handle, int device, int threads, long long gpu_huffman_pixels);
  ~JpegDecoupled();
  JpegDecoupled(const JpegDecoupled&) = delete;
  JpegDecoupled& operator=(const JpegDecoupled&) = delete;

  // One JpegStatus per image, as JpegDecoder::decode (the images were validated there); asynchronous w.r.t.
  // `stream`. A region outside its image is a BadArgument error.
  std::vector<int> decode(const std::vector<JpegImage>& images, cudaStream_t stream);

  // Which decoders were made: "cpu-huffman", "gpu-huffman" or both joined by '+'.
  std::string decoders() const;

 private:
  struct Slot;
  struct Batch;
  void host_phase(Batch& b, int k);
  void device_phase(Batch& b, int k, cudaStream_t stream);
  void release();  // waits for the slots' last use, then frees them and the decoders

  const nvj::Api& a_;
  nvj::Handle handle_;
  int device_;
  int threads_;
  long long gpu_huffman_pixels_;
  nvj::Decoder cpu_ = nullptr;  // NVJPEG_BACKEND_HYBRID
  nvj::Decoder gpu_ = nullptr;  // NVJPEG_BACKEND_GPU_HYBRID
  std::vector<Slot*> slots_;
};

}  // namespace tr::native::cuda
