#include "cuda/jpeg_decoder.hpp"

#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cuda/jpeg_decoupled.hpp"
#include "cuda/library_path.hpp"
#include "cuda/nvjpeg_api.hpp"
#include "native/errors.hpp"

#ifndef TR_NVJPEG_BUILD_PATH
#define TR_NVJPEG_BUILD_PATH ""
#endif

#ifdef TR_HAVE_NVJPEG_H
#include <nvjpeg.h>
static_assert(NVJPEG_STATUS_SUCCESS == 0 && NVJPEG_STATUS_BAD_JPEG == 3 && NVJPEG_STATUS_JPEG_NOT_SUPPORTED == 4 &&
              NVJPEG_STATUS_ARCH_MISMATCH == 7 && NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED == 9 &&
              NVJPEG_STATUS_INCOMPLETE_BITSTREAM == 10);
static_assert(NVJPEG_BACKEND_GPU_HYBRID == 2 && NVJPEG_BACKEND_HARDWARE == 3 && NVJPEG_OUTPUT_RGBI == 5 &&
              NVJPEG_OUTPUT_RGB == 3 && NVJPEG_OUTPUT_YUV == 1);
static_assert(NVJPEG_FLAGS_BITSTREAM_STRICT == (1 << 2) && NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION == (1 << 5));
static_assert(NVJPEG_MAX_COMPONENT == 4 && sizeof(nvjpegImage_t) == sizeof(tr::native::cuda::nvj::Image));
#endif

namespace tr::native::cuda {

namespace {

using nvj::Api;

std::mutex g_mutex;
std::vector<std::string> g_extra;
Api g_api;
bool g_loaded = false;

template <class F>
void bind(void* handle, F& slot, const char* symbol, std::string& missing) {
  slot = reinterpret_cast<F>(dlsym(handle, symbol));
  if (slot == nullptr) missing += std::string(missing.empty() ? "" : ", ") + symbol;
}

std::vector<std::string> candidates_locked() {
  return library_candidates("TR_NVJPEG_PATH", g_extra, TR_NVJPEG_BUILD_PATH,
                            {"libnvjpeg.so." + std::to_string(CUDART_VERSION / 1000), "libnvjpeg.so"});
}

}  // namespace

const Api& nvj::api() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_loaded) return g_api;
  std::string tried;
  for (const std::string& path : candidates_locked()) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += "\n  " + path + ": " + (why != nullptr ? why : "not loadable");
      continue;
    }
    Api a;
    std::string missing;
    bind(handle, a.get_property, "nvjpegGetProperty", missing);
    bind(handle, a.create_ex, "nvjpegCreateEx", missing);
    bind(handle, a.destroy, "nvjpegDestroy", missing);
    bind(handle, a.state_create, "nvjpegJpegStateCreate", missing);
    bind(handle, a.state_destroy, "nvjpegJpegStateDestroy", missing);
    bind(handle, a.batched_init, "nvjpegDecodeBatchedInitialize", missing);
    bind(handle, a.batched_ex, "nvjpegDecodeBatchedEx", missing);
    bind(handle, a.batched, "nvjpegDecodeBatched", missing);
    bind(handle, a.image_info, "nvjpegGetImageInfo", missing);
    bind(handle, a.params_create, "nvjpegDecodeParamsCreate", missing);
    bind(handle, a.params_destroy, "nvjpegDecodeParamsDestroy", missing);
    bind(handle, a.params_format, "nvjpegDecodeParamsSetOutputFormat", missing);
    bind(handle, a.params_roi, "nvjpegDecodeParamsSetROI", missing);
    bind(handle, a.stream_create, "nvjpegJpegStreamCreate", missing);
    bind(handle, a.stream_destroy, "nvjpegJpegStreamDestroy", missing);
    bind(handle, a.parse_header, "nvjpegJpegStreamParseHeader", missing);
    bind(handle, a.batched_supported_ex, "nvjpegDecodeBatchedSupportedEx", missing);
    // the decoupled API: optional, the decoupled path names what is missing
    std::string& opt = a.decoupled_missing;
    bind(handle, a.decoder_create, "nvjpegDecoderCreate", opt);
    bind(handle, a.decoder_destroy, "nvjpegDecoderDestroy", opt);
    bind(handle, a.decoder_state_create, "nvjpegDecoderStateCreate", opt);
    bind(handle, a.decoder_supported, "nvjpegDecoderJpegSupported", opt);
    bind(handle, a.pinned_create, "nvjpegBufferPinnedCreate", opt);
    bind(handle, a.pinned_destroy, "nvjpegBufferPinnedDestroy", opt);
    bind(handle, a.device_create, "nvjpegBufferDeviceCreate", opt);
    bind(handle, a.device_destroy, "nvjpegBufferDeviceDestroy", opt);
    bind(handle, a.attach_pinned, "nvjpegStateAttachPinnedBuffer", opt);
    bind(handle, a.attach_device, "nvjpegStateAttachDeviceBuffer", opt);
    bind(handle, a.stream_parse, "nvjpegJpegStreamParse", opt);
    bind(handle, a.stream_encoding, "nvjpegJpegStreamGetJpegEncoding", opt);
    bind(handle, a.stream_dims, "nvjpegJpegStreamGetFrameDimensions", opt);
    bind(handle, a.decode_host, "nvjpegDecodeJpegHost", opt);
    bind(handle, a.transfer_to_device, "nvjpegDecodeJpegTransferToDevice", opt);
    bind(handle, a.decode_device, "nvjpegDecodeJpegDevice", opt);
    if (!missing.empty()) {
      tried += "\n  " + path + ": lacks " + missing;
      dlclose(handle);
      continue;
    }
    int v[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) a.get_property(k, &v[k]);
    a.version = v[0] * 1000 + v[1] * 10 + v[2];
    a.path = path;
    g_api = a;
    g_loaded = true;  // the handle stays open for the life of the process
    return g_api;
  }
  fail(ErrorKind::DeviceUnavailable,
       "nvJPEG could not be loaded (install nvidia-nvjpeg, or set TR_NVJPEG_PATH); tried:" + tried);
}

std::string nvj::status_text(nvj::Status s) {
  static const char* names[] = {"SUCCESS", "NOT_INITIALIZED", "INVALID_PARAMETER", "BAD_JPEG", "JPEG_NOT_SUPPORTED",
                                "ALLOCATOR_FAILURE", "EXECUTION_FAILED", "ARCH_MISMATCH", "INTERNAL_ERROR",
                                "IMPLEMENTATION_NOT_SUPPORTED", "INCOMPLETE_BITSTREAM"};
  const std::string name = (s >= 0 && s <= 10) ? names[s] : "unknown status";
  return "NVJPEG_STATUS_" + name + " (" + std::to_string(s) + ")";
}

void nvj::check(nvj::Status s, const char* what) {
  if (s != nvj::kSuccess) fail(ErrorKind::Backend, std::string("nvJPEG: ") + what + " failed: " + status_text(s));
}

namespace {
using nvj::api;
using nvj::check;
using nvj::status_text;
using nvj::unsupported;
}  // namespace

void add_nvjpeg_candidates(const std::vector<std::string>& paths) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_extra.insert(g_extra.end(), paths.begin(), paths.end());
}

std::vector<std::string> nvjpeg_candidates() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return candidates_locked();
}

std::pair<std::string, int> load_nvjpeg() {
  const Api& a = api();
  return {a.path, a.version};
}

struct JpegDecoder::Impl {
  const Api& a;
  nvj::Handle handle = nullptr;
  nvj::State state = nullptr;
  std::vector<nvj::Params> params;
  std::vector<nvj::Stream> streams;
  int init_size = 0;    // the batch size the state was initialised for (0: none)
  int init_format = 0;  // and the output format
  int made = 0;         // the backend of `handle` (nvjpegBackend_t)
  std::unique_ptr<JpegDecoupled> decoupled;  // the per-image path (jpeg_decoupled.hpp), made on `handle`

  explicit Impl(const Api& api_) : a(api_) {}
  ~Impl() {
    decoupled.reset();  // before the handle it was made on
    for (auto p : params)
      if (p != nullptr) a.params_destroy(p);
    for (auto s : streams)
      if (s != nullptr) a.stream_destroy(s);
    if (state != nullptr) a.state_destroy(state);
    if (handle != nullptr) a.destroy(handle);
  }

  void init(int n, int threads, int format) {
    if (init_size == n && init_format == format) return;
    check(a.batched_init(handle, state, n, threads, format), "nvjpegDecodeBatchedInitialize");
    init_size = n;
    init_format = format;
  }

  // One batched call over `which`; its status. ROI: nvjpegDecodeBatchedEx with each image's region (RGBI);
  // else nvjpegDecodeBatched of whole images, interleaved (RGBI) or planar (RGB: plane c at dst + c * h * w), or
  // the engine's own planes (YUV: Y, Cb, Cr at dst + c * h * w, pitch w, the chroma planes at the file's
  // subsampling; no colour conversion: for measuring what nvJPEG's conversion kernel costs).
  nvj::Status run(const std::vector<JpegImage>& images, const std::vector<int>& which, int threads,
                  cudaStream_t stream, JpegCall call = JpegCall::Roi) {
    const int n = int(which.size());
    const bool planes = call == JpegCall::WholePlanar || call == JpegCall::WholeYuv;
    init(n, threads, call == JpegCall::WholeYuv ? nvj::kOutputYuv : planes ? nvj::kOutputRgb : nvj::kOutputRgbi);
    std::vector<const unsigned char*> data(static_cast<std::size_t>(n), nullptr);
    std::vector<std::size_t> lengths(static_cast<std::size_t>(n), 0);
    std::vector<nvj::Image> out(static_cast<std::size_t>(n));
    std::vector<nvj::Params> ps(static_cast<std::size_t>(n), nullptr);
    for (int k = 0; k < n; ++k) {
      const JpegImage& im = images[size_t(which[size_t(k)])];
      data[size_t(k)] = im.data;
      lengths[size_t(k)] = im.length;
      out[size_t(k)] = nvj::Image{};
      if (planes) {
        const std::size_t plane = std::size_t(im.roi_w) * std::size_t(im.roi_h);
        for (int c = 0; c < 3; ++c) {
          out[size_t(k)].channel[c] = im.dst + std::size_t(c) * plane;
          out[size_t(k)].pitch[c] = std::size_t(im.roi_w);
        }
      } else {
        out[size_t(k)].channel[0] = im.dst;
        out[size_t(k)].pitch[0] = im.pitch;
      }
      ps[size_t(k)] = params[size_t(which[size_t(k)])];
    }
    if (call != JpegCall::Roi) return a.batched(handle, state, data.data(), lengths.data(), out.data(), stream);
    return a.batched_ex(handle, state, data.data(), lengths.data(), out.data(), ps.data(), stream);
  }
};

JpegDecoder::JpegDecoder(int device, const std::string& backend, int max_batch, int threads, bool strict,
                         bool interpolate, long long gpu_huffman_pixels)
    : impl_(nullptr), device_(device), max_batch_(max_batch), threads_(threads),
      gpu_huffman_pixels_(gpu_huffman_pixels) {
  if (backend != "hardware" && backend != "gpu" && backend != "auto")
    fail(ErrorKind::BadArgument, "JPEG decoder backend must be 'hardware', 'gpu' or 'auto', got '" + backend + "'");
  if (max_batch < 1 || threads < 1)
    fail(ErrorKind::BadArgument, "JPEG decoder: max_batch and threads must be >= 1, got " +
                                     std::to_string(max_batch) + " and " + std::to_string(threads));
  if (gpu_huffman_pixels < -1)
    fail(ErrorKind::BadArgument, "JPEG decoder: gpu_huffman_pixels must be >= 0, or -1 (never), got " +
                                     std::to_string(gpu_huffman_pixels));
  if (cudaSetDevice(device) != cudaSuccess) fail(ErrorKind::Backend, "JPEG decoder: cannot use device " +
                                                                         std::to_string(device));
  const Api& a = api();
  auto* impl = new Impl(a);
  try {
    // strict: a damaged bitstream is an error, not a partly gray image; interpolated chroma upsampling: as
    // libjpeg-turbo's fancy upsampling (several times the engine's time, RESULTS.md). A backend that refuses a
    // flag is tried without it.
    const unsigned asked = (strict ? nvj::kFlagStrict : 0u) | (interpolate ? nvj::kFlagInterpolate : 0u);
    const unsigned flag_sets[] = {asked, asked & nvj::kFlagStrict, 0u};
    const int order_auto[] = {nvj::kBackendHardware, nvj::kBackendGpuHybrid};
    std::vector<int> order;
    if (backend == "hardware") order = {nvj::kBackendHardware};
    else if (backend == "gpu") order = {nvj::kBackendGpuHybrid};
    else order.assign(std::begin(order_auto), std::end(order_auto));
    std::string tried;
    for (int b : order) {
      for (unsigned flags : flag_sets) {
        const nvj::Status s = a.create_ex(b, nullptr, nullptr, flags, &impl->handle);
        if (s == nvj::kSuccess) {
          impl->made = b;
          backend_name_ = std::string(b == nvj::kBackendHardware ? "hardware" : "gpu") +
                          ((flags & nvj::kFlagInterpolate) ? "+interpolated" : "") +
                          ((flags & nvj::kFlagStrict) ? "+strict" : "");
          break;
        }
        impl->handle = nullptr;
        tried += std::string("\n  ") + (b == nvj::kBackendHardware ? "hardware" : "gpu") + " flags " +
                 std::to_string(flags) + ": " + status_text(s);
      }
      if (impl->handle != nullptr) break;
    }
    if (impl->handle == nullptr)
      fail(ErrorKind::DeviceUnavailable, "nvJPEG has no usable '" + backend + "' decoder on device " +
                                             std::to_string(device) + ":" + tried);
    check(a.state_create(impl->handle, &impl->state), "nvjpegJpegStateCreate");
    impl->params.assign(size_t(max_batch), nullptr);
    impl->streams.assign(size_t(max_batch), nullptr);
    for (int k = 0; k < max_batch; ++k) {
      check(a.params_create(impl->handle, &impl->params[size_t(k)]), "nvjpegDecodeParamsCreate");
      check(a.params_format(impl->params[size_t(k)], nvj::kOutputRgbi), "nvjpegDecodeParamsSetOutputFormat");
      check(a.stream_create(impl->handle, &impl->streams[size_t(k)]), "nvjpegJpegStreamCreate");
    }
    // the GPU-hybrid backend's batched calls take no file: its regions go through the decoupled API
    if (impl->made == nvj::kBackendGpuHybrid)
      impl->decoupled = std::make_unique<JpegDecoupled>(impl->handle, device, threads, gpu_huffman_pixels);
  } catch (...) {
    delete impl;
    throw;
  }
  impl_ = impl;
}

JpegDecoder::~JpegDecoder() { delete impl_; }

std::string JpegDecoder::decoupled() const { return impl_->decoupled ? impl_->decoupled->decoders() : ""; }

std::vector<int> JpegDecoder::decode(const std::vector<JpegImage>& images, cudaStream_t stream, bool precheck,
                                     JpegCall call) {
  const int n = int(images.size());
  if (n > max_batch_)
    fail(ErrorKind::BadArgument, "JPEG decoder: a batch of " + std::to_string(n) + " images, made for at most " +
                                     std::to_string(max_batch_));
  if (cudaSetDevice(device_) != cudaSuccess) fail(ErrorKind::Backend, "JPEG decoder: cannot use its device");
  const Api& a = impl_->a;
  for (int i = 0; i < n; ++i) {
    const JpegImage& im = images[size_t(i)];
    if (im.data == nullptr || im.dst == nullptr || im.roi_w < 1 || im.roi_h < 1 || im.pitch < size_t(im.roi_w) * 3)
      fail(ErrorKind::BadArgument, "JPEG decoder: image " + std::to_string(i) + " has no bytes, no destination or "
                                       "a region of " + std::to_string(im.roi_w) + "x" + std::to_string(im.roi_h) +
                                       " with a pitch of " + std::to_string(im.pitch) + " bytes");
  }
  if (call == JpegCall::RoiDecoupled || (call == JpegCall::Roi && impl_->decoupled)) {
    if (!impl_->decoupled)  // a hardware decoder's first decoupled call: made on its handle, with its flags
      impl_->decoupled = std::make_unique<JpegDecoupled>(impl_->handle, device_, threads_, gpu_huffman_pixels_);
    return impl_->decoupled->decode(images, stream);
  }
  std::vector<int> status(size_t(n), int(JpegStatus::Ok));
  std::vector<int> ok;
  for (int i = 0; i < n; ++i) {
    const JpegImage& im = images[size_t(i)];
    nvj::Stream js = impl_->streams[size_t(i)];
    if (call != JpegCall::Roi) {  // whole images: the region must be the image, or nvJPEG writes past it
      int comps = 0, css = 0, w[4] = {0, 0, 0, 0}, h[4] = {0, 0, 0, 0};
      if (a.image_info(impl_->handle, im.data, im.length, &comps, &css, w, h) != nvj::kSuccess) {
        status[size_t(i)] = int(JpegStatus::Bad);
        continue;
      }
      if (im.roi_x != 0 || im.roi_y != 0 || im.roi_w != w[0] || im.roi_h != h[0])
        fail(ErrorKind::BadArgument, "JPEG decoder: image " + std::to_string(i) + " is " + std::to_string(w[0]) +
                                         "x" + std::to_string(h[0]) + " (w x h); a whole-image call needs its "
                                         "region to be the image");
    }
    if (!precheck) {
      check(a.params_roi(impl_->params[size_t(i)], im.roi_x, im.roi_y, im.roi_w, im.roi_h), "nvjpegDecodeParamsSetROI");
      ok.push_back(i);
      continue;
    }
    if (a.parse_header(impl_->handle, im.data, im.length, js) != nvj::kSuccess) {
      status[size_t(i)] = int(JpegStatus::Bad);
      continue;
    }
    check(a.params_roi(impl_->params[size_t(i)], im.roi_x, im.roi_y, im.roi_w, im.roi_h), "nvjpegDecodeParamsSetROI");
    int not_supported = 0;
    const nvj::Status s = a.batched_supported_ex(impl_->handle, js, impl_->params[size_t(i)], &not_supported);
    if (s != nvj::kSuccess || not_supported != 0) {  // 0 means supported
      status[size_t(i)] = int(unsupported(s) || s == nvj::kSuccess ? JpegStatus::Unsupported : JpegStatus::Bad);
      continue;
    }
    ok.push_back(i);
  }
  if (ok.empty()) return status;
  const nvj::Status s = impl_->run(images, ok, threads_, stream, call);
  if (s == nvj::kSuccess) return status;
  if (!(s == nvj::kBadJpeg || s == nvj::kIncomplete || unsupported(s)))
    check(s, "nvjpegDecodeBatchedEx");
  // One image failed the batch: decode them one by one to name it (the others are decoded again; rare).
  for (int i : ok) {
    const nvj::Status one = impl_->run(images, {i}, threads_, stream, call);
    if (one == nvj::kSuccess) continue;
    if (one == nvj::kBadJpeg || one == nvj::kIncomplete)
      status[size_t(i)] = int(JpegStatus::Bad);
    else if (unsupported(one))
      status[size_t(i)] = int(JpegStatus::Unsupported);
    else
      check(one, "nvjpegDecodeBatchedEx (one image)");
  }
  return status;
}

}  // namespace tr::native::cuda
