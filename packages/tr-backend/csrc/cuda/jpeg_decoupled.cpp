#include "cuda/jpeg_decoupled.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda/check.hpp"
#include "native/errors.hpp"

#ifdef TR_HAVE_NVJPEG_H
#include <nvjpeg.h>
// the values and layouts this file declares in nvjpeg_api.hpp, checked against the real header
static_assert(NVJPEG_STATUS_SUCCESS == 0 && NVJPEG_STATUS_INVALID_PARAMETER == 2 && NVJPEG_STATUS_BAD_JPEG == 3 &&
              NVJPEG_STATUS_JPEG_NOT_SUPPORTED == 4 && NVJPEG_STATUS_INCOMPLETE_BITSTREAM == 10);
static_assert(NVJPEG_BACKEND_HYBRID == 1 && NVJPEG_BACKEND_GPU_HYBRID == 2 && NVJPEG_OUTPUT_RGBI == 5);
static_assert(NVJPEG_ENCODING_PROGRESSIVE_DCT_HUFFMAN == 0xc2);
static_assert(sizeof(nvjpegBackend_t) == sizeof(int) && sizeof(nvjpegJpegEncoding_t) == sizeof(int) &&
              sizeof(nvjpegOutputFormat_t) == sizeof(int));
static_assert(NVJPEG_MAX_COMPONENT == 4 && sizeof(nvjpegImage_t) == sizeof(tr::native::cuda::nvj::Image));
#endif

namespace tr::native::cuda {

namespace {

constexpr int kCpu = 0, kGpu = 1;  // index of a decoder (and of its state in a slot)

}  // namespace

struct JpegDecoupled::Slot {
  nvj::Stream js = nullptr;
  nvj::Params params = nullptr;
  nvj::State state[2] = {nullptr, nullptr};
  nvj::PinnedBuffer pinned = nullptr;
  nvj::DeviceBuffer device = nullptr;
  cudaEvent_t done = nullptr;  // recorded on the stream after the device phase of the slot's last image
};

// One decode() call: what the host threads and the calling thread share.
struct JpegDecoupled::Batch {
  const std::vector<JpegImage>& images;
  std::vector<int> status;
  std::vector<char> host_done;  // the host phase of image k has ended (ready or not)
  std::vector<char> ready;      // ... and left the image for the device phase
  std::vector<int> which;       // kCpu or kGpu: the decoder that took it
  std::atomic<int> next{0};     // the next image for a host thread
  std::mutex m;
  std::condition_variable cv;
  int enqueued = 0;  // images whose device phase is on the stream (in order)
  bool abort = false;
  std::exception_ptr error;

  explicit Batch(const std::vector<JpegImage>& im)
      : images(im), status(im.size(), int(JpegStatus::Ok)), host_done(im.size(), 0), ready(im.size(), 0),
        which(im.size(), kCpu) {}

  void stop(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(m);
      if (!error) error = e;
      abort = true;
    }
    cv.notify_all();
  }
};

JpegDecoupled::JpegDecoupled(nvj::Handle handle, int device, int threads, long long gpu_huffman_pixels)
    : a_(nvj::api()), handle_(handle), device_(device), threads_(std::max(1, threads)),
      gpu_huffman_pixels_(gpu_huffman_pixels) {
  if (!a_.decoupled_missing.empty())
    fail(ErrorKind::DeviceUnavailable, "nvJPEG at " + a_.path + " lacks the decoupled API that GPU-hybrid decoding "
                                           "needs: " + a_.decoupled_missing);
  try {
    std::string why;
    nvj::Status s = a_.decoder_create(handle_, nvj::kBackendHybrid, &cpu_);
    if (s != nvj::kSuccess) {
      cpu_ = nullptr;
      why += "\n  NVJPEG_BACKEND_HYBRID: " + nvj::status_text(s);
    }
    s = a_.decoder_create(handle_, nvj::kBackendGpuHybrid, &gpu_);
    if (s != nvj::kSuccess) {
      gpu_ = nullptr;
      why += "\n  NVJPEG_BACKEND_GPU_HYBRID: " + nvj::status_text(s);
    }
    if (cpu_ == nullptr && gpu_ == nullptr)
      fail(ErrorKind::DeviceUnavailable, "nvJPEG made no decoupled decoder (nvjpegDecoderCreate):" + why);
    // two slots a host thread: one in its host phase while the other's copy and device phase are in flight
    for (int k = 0; k < 2 * threads_; ++k) {
      slots_.push_back(new Slot());
      Slot& sl = *slots_.back();
      nvj::check(a_.stream_create(handle_, &sl.js), "nvjpegJpegStreamCreate");
      nvj::check(a_.params_create(handle_, &sl.params), "nvjpegDecodeParamsCreate");
      nvj::check(a_.params_format(sl.params, nvj::kOutputRgbi), "nvjpegDecodeParamsSetOutputFormat");
      nvj::check(a_.pinned_create(handle_, nullptr, &sl.pinned), "nvjpegBufferPinnedCreate");
      nvj::check(a_.device_create(handle_, nullptr, &sl.device), "nvjpegBufferDeviceCreate");
      const nvj::Decoder decs[2] = {cpu_, gpu_};
      for (int d : {kCpu, kGpu}) {  // both states share the slot's buffers: one of them is used an image
        if (decs[d] == nullptr) continue;
        nvj::check(a_.decoder_state_create(handle_, decs[d], &sl.state[d]), "nvjpegDecoderStateCreate");
        nvj::check(a_.attach_pinned(sl.state[d], sl.pinned), "nvjpegStateAttachPinnedBuffer");
        nvj::check(a_.attach_device(sl.state[d], sl.device), "nvjpegStateAttachDeviceBuffer");
      }
      cuda::check(cudaEventCreateWithFlags(&sl.done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
  } catch (...) {
    release();
    throw;
  }
}

JpegDecoupled::~JpegDecoupled() { release(); }

void JpegDecoupled::release() {
  for (Slot* sl : slots_) {
    if (sl->done != nullptr) {
      cudaEventSynchronize(sl->done);  // nvJPEG's buffers may still be read by the stream
      cudaEventDestroy(sl->done);
    }
    for (nvj::State st : sl->state)
      if (st != nullptr) a_.state_destroy(st);
    if (sl->pinned != nullptr) a_.pinned_destroy(sl->pinned);
    if (sl->device != nullptr) a_.device_destroy(sl->device);
    if (sl->params != nullptr) a_.params_destroy(sl->params);
    if (sl->js != nullptr) a_.stream_destroy(sl->js);
    delete sl;
  }
  slots_.clear();
  if (cpu_ != nullptr) a_.decoder_destroy(cpu_);
  if (gpu_ != nullptr) a_.decoder_destroy(gpu_);
  cpu_ = gpu_ = nullptr;
}

std::string JpegDecoupled::decoders() const {
  std::string out = cpu_ != nullptr ? "cpu-huffman" : "";
  if (gpu_ != nullptr) out += std::string(out.empty() ? "" : "+") + "gpu-huffman";
  return out;
}

void JpegDecoupled::host_phase(Batch& b, int k) {
  const int n_slots = int(slots_.size());
  Slot& sl = *slots_[size_t(k % n_slots)];
  {  // the slot's previous image must be on the stream before its event says anything
    std::unique_lock<std::mutex> lock(b.m);
    b.cv.wait(lock, [&] { return b.abort || b.enqueued > k - n_slots; });
    if (b.abort) return;
  }
  // ... and the stream past it: its pinned buffer's copy and its device buffer's use are done
  cuda::check(cudaEventSynchronize(sl.done), "cudaEventSynchronize");
  const JpegImage& im = b.images[size_t(k)];
  int& status = b.status[size_t(k)];
  nvj::Status s = a_.stream_parse(handle_, im.data, im.length, 0, 0, sl.js);
  if (s != nvj::kSuccess) {
    status = int(nvj::unsupported(s) ? JpegStatus::Unsupported : JpegStatus::Bad);
    return;
  }
  unsigned w = 0, h = 0;
  int encoding = 0;
  nvj::check(a_.stream_dims(sl.js, &w, &h), "nvjpegJpegStreamGetFrameDimensions");
  nvj::check(a_.stream_encoding(sl.js, &encoding), "nvjpegJpegStreamGetJpegEncoding");
  if (im.roi_x < 0 || im.roi_y < 0 || unsigned(im.roi_x) + unsigned(im.roi_w) > w ||
      unsigned(im.roi_y) + unsigned(im.roi_h) > h)
    fail(ErrorKind::BadArgument, "JPEG decoder: image " + std::to_string(k) + " is " + std::to_string(w) + "x" +
                                     std::to_string(h) + " (w x h); its region " + std::to_string(im.roi_w) + "x" +
                                     std::to_string(im.roi_h) + " at (" + std::to_string(im.roi_x) + ", " +
                                     std::to_string(im.roi_y) + ") lies outside it");
  nvj::check(a_.params_roi(sl.params, im.roi_x, im.roi_y, im.roi_w, im.roi_h), "nvjpegDecodeParamsSetROI");
  // GPU Huffman for large baseline regions only: the CPU's is faster on small ones, and only the CPU's takes
  // progressive files (the Huffman work is every row down to the region's bottom)
  const long long work = (long long)im.roi_w * (long long)(im.roi_y + im.roi_h);
  const bool gpu_first = encoding != nvj::kEncodingProgressive && gpu_huffman_pixels_ >= 0 &&
                         work >= gpu_huffman_pixels_;
  const nvj::Decoder decs[2] = {cpu_, gpu_};
  int chosen = -1;
  const int order[2] = {gpu_first ? kGpu : kCpu, gpu_first ? kCpu : kGpu};
  for (int d : order) {
    if (decs[d] == nullptr) continue;
    int not_supported = 1;
    if (a_.decoder_supported(decs[d], sl.js, sl.params, &not_supported) == nvj::kSuccess && not_supported == 0) {
      chosen = d;  // 0 means supported
      break;
    }
  }
  if (chosen < 0) {
    status = int(JpegStatus::Unsupported);
    return;
  }
  s = a_.decode_host(handle_, decs[chosen], sl.state[chosen], sl.params, sl.js);
  if (s == nvj::kSuccess) {
    b.which[size_t(k)] = chosen;
    b.ready[size_t(k)] = 1;
  } else if (nvj::damaged(s)) {
    status = int(JpegStatus::Bad);
  } else if (nvj::unsupported(s)) {
    status = int(JpegStatus::Unsupported);
  } else {
    nvj::check(s, "nvjpegDecodeJpegHost");
  }
}

void JpegDecoupled::device_phase(Batch& b, int k, cudaStream_t stream) {
  Slot& sl = *slots_[size_t(k) % slots_.size()];
  nvj::Status s = nvj::kSuccess;
  const char* what = "";
  if (b.ready[size_t(k)]) {
    const int d = b.which[size_t(k)];
    const nvj::Decoder dec = d == kGpu ? gpu_ : cpu_;
    const JpegImage& im = b.images[size_t(k)];
    what = "nvjpegDecodeJpegTransferToDevice";
    s = a_.transfer_to_device(handle_, dec, sl.state[d], sl.js, stream);
    if (s == nvj::kSuccess) {
      nvj::Image out{};
      out.channel[0] = im.dst;  // RGBI: one interleaved plane
      out.pitch[0] = im.pitch;
      what = "nvjpegDecodeJpegDevice";
      s = a_.decode_device(handle_, dec, sl.state[d], &out, stream);
    }
  }
  // recorded even where nothing was enqueued: the slot's next host phase waits on it
  cuda::check(cudaEventRecord(sl.done, stream), "cudaEventRecord");
  if (s == nvj::kSuccess) return;
  if (nvj::damaged(s))
    b.status[size_t(k)] = int(JpegStatus::Bad);
  else if (nvj::unsupported(s))
    b.status[size_t(k)] = int(JpegStatus::Unsupported);
  else
    nvj::check(s, what);
}

std::vector<int> JpegDecoupled::decode(const std::vector<JpegImage>& images, cudaStream_t stream) {
  const int n = int(images.size());
  Batch b(images);
  if (n == 0) return b.status;
  auto worker = [this, &b, n] {
    try {
      cuda::check(cudaSetDevice(device_), "cudaSetDevice");  // pinned allocations and event waits need it
      for (;;) {
        const int k = b.next.fetch_add(1);
        if (k >= n) return;
        host_phase(b, k);
        {
          std::lock_guard<std::mutex> lock(b.m);
          if (b.abort) return;
          b.host_done[size_t(k)] = 1;
        }
        b.cv.notify_all();
      }
    } catch (...) {
      b.stop(std::current_exception());
    }
  };
  std::vector<std::thread> pool;
  try {
    for (int t = 0; t < std::min(threads_, n); ++t) pool.emplace_back(worker);
    for (int k = 0; k < n; ++k) {  // the device phases, in order, on the caller's stream
      {
        std::unique_lock<std::mutex> lock(b.m);
        b.cv.wait(lock, [&] { return b.abort || b.host_done[size_t(k)] != 0; });
        if (b.abort) break;
      }
      device_phase(b, k, stream);
      {
        std::lock_guard<std::mutex> lock(b.m);
        b.enqueued = k + 1;
      }
      b.cv.notify_all();
    }
  } catch (...) {
    b.stop(std::current_exception());
  }
  b.cv.notify_all();
  for (std::thread& t : pool) t.join();
  if (b.error) std::rethrow_exception(b.error);
  return b.status;
}

}  // namespace tr::native::cuda
