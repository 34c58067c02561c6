// The part of nvJPEG's C ABI that jpeg_decoder.cpp and jpeg_decoupled.cpp use, declared here so that the extension
// builds without nvjpeg.h (as nccl.cpp declares NCCL's); where the header is found at build time, TR_HAVE_NVJPEG_H
// makes each of the two files check the declarations it uses against it (static_asserts there). The library is
// opened once (dlopen) by api(); the batched API's symbols are required, the decoupled API's are optional (an
// older or trimmed library still serves the hardware path; the decoupled path names what is missing).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace tr::native::cuda::nvj {

using Status = int;  // nvjpegStatus_t
constexpr Status kSuccess = 0, kInvalidParameter = 2, kBadJpeg = 3, kNotSupported = 4, kArchMismatch = 7,
                 kImplNotSupported = 9, kIncomplete = 10;
constexpr int kBackendHybrid = 1, kBackendGpuHybrid = 2, kBackendHardware = 3;  // nvjpegBackend_t
constexpr int kOutputYuv = 1, kOutputRgb = 3, kOutputRgbi = 5;                  // nvjpegOutputFormat_t
constexpr int kEncodingProgressive = 0xc2;                                      // nvjpegJpegEncoding_t
constexpr unsigned kFlagStrict = 1u << 2, kFlagInterpolate = 1u << 5;
constexpr int kMaxComponent = 4;
struct Image {
  unsigned char* channel[kMaxComponent];
  std::size_t pitch[kMaxComponent];
};
using Handle = struct Opaque_handle*;
using State = struct Opaque_state*;
using Params = struct Opaque_params*;
using Stream = struct Opaque_stream*;
using Decoder = struct Opaque_decoder*;
using PinnedBuffer = struct Opaque_pinned_buffer*;
using DeviceBuffer = struct Opaque_device_buffer*;

struct Api {
  // the batched API (required)
  Status (*get_property)(int, int*) = nullptr;  // libraryPropertyType: 0 major, 1 minor, 2 patch
  Status (*create_ex)(int, void*, void*, unsigned, Handle*) = nullptr;
  Status (*destroy)(Handle) = nullptr;
  Status (*state_create)(Handle, State*) = nullptr;
  Status (*state_destroy)(State) = nullptr;
  Status (*batched_init)(Handle, State, int, int, int) = nullptr;
  Status (*batched_ex)(Handle, State, const unsigned char* const*, const std::size_t*, Image*, Params*,
                       cudaStream_t) = nullptr;
  Status (*batched)(Handle, State, const unsigned char* const*, const std::size_t*, Image*, cudaStream_t) = nullptr;
  Status (*image_info)(Handle, const unsigned char*, std::size_t, int*, int*, int*, int*) = nullptr;
  Status (*params_create)(Handle, Params*) = nullptr;
  Status (*params_destroy)(Params) = nullptr;
  Status (*params_format)(Params, int) = nullptr;
  Status (*params_roi)(Params, int, int, int, int) = nullptr;
  Status (*stream_create)(Handle, Stream*) = nullptr;
  Status (*stream_destroy)(Stream) = nullptr;
  Status (*parse_header)(Handle, const unsigned char*, std::size_t, Stream) = nullptr;
  Status (*batched_supported_ex)(Handle, Stream, Params, int*) = nullptr;
  // the decoupled API (optional: `decoupled_missing` names the symbols the library lacks)
  Status (*decoder_create)(Handle, int, Decoder*) = nullptr;
  Status (*decoder_destroy)(Decoder) = nullptr;
  Status (*decoder_state_create)(Handle, Decoder, State*) = nullptr;
  Status (*decoder_supported)(Decoder, Stream, Params, int*) = nullptr;
  Status (*pinned_create)(Handle, void*, PinnedBuffer*) = nullptr;  // default allocator: nullptr
  Status (*pinned_destroy)(PinnedBuffer) = nullptr;
  Status (*device_create)(Handle, void*, DeviceBuffer*) = nullptr;
  Status (*device_destroy)(DeviceBuffer) = nullptr;
  Status (*attach_pinned)(State, PinnedBuffer) = nullptr;
  Status (*attach_device)(State, DeviceBuffer) = nullptr;
  Status (*stream_parse)(Handle, const unsigned char*, std::size_t, int, int, Stream) = nullptr;
  Status (*stream_encoding)(Stream, int*) = nullptr;
  Status (*stream_dims)(Stream, unsigned*, unsigned*) = nullptr;
  Status (*decode_host)(Handle, Decoder, State, Params, Stream) = nullptr;
  Status (*transfer_to_device)(Handle, Decoder, State, Stream, cudaStream_t) = nullptr;
  Status (*decode_device)(Handle, Decoder, State, Image*, cudaStream_t) = nullptr;
  std::string decoupled_missing;
  std::string path;
  int version = 0;
};

// Loads the library once (thread-safe); DeviceUnavailable naming every path tried when none loads.
const Api& api();
std::string status_text(Status s);
// Backend error "nvJPEG: <what> failed: <status>" unless s is kSuccess.
void check(Status s, const char* what);
// A status saying the backend does not take the file (not that it is damaged).
inline bool unsupported(Status s) { return s == kNotSupported || s == kImplNotSupported || s == kArchMismatch; }
// A status saying the file is damaged.
inline bool damaged(Status s) { return s == kBadJpeg || s == kIncomplete; }

}  // namespace tr::native::cuda::nvj
