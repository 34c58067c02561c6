// Bindings of the CUDA backend's execution objects: Context (streams, cuBLASLt), Graph (capture, launch),
// Event and NcclComm (make_op: the generated bind/op_args.cpp). CUDA builds only.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bind/bindings.hpp"
#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "cuda/cublaslt.hpp"
#include "cuda/cudnn.hpp"
#include "cuda/jpeg_decoder.hpp"
#include "cuda/nccl.hpp"
#include "ops/args/attention_sdpa.hpp"
#include "ops/args/conv.hpp"
#include "ops/attention_sdpa.hpp"
#include "ops/conv_cudnn.hpp"
#include "ops/conv_genstats_probe.hpp"
#include "ops/conv_plan_cache.hpp"
#include "ops/op.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tr::native::bind {

namespace {

void bind_nccl(nb::module_& m) {
  using cuda::NcclComm;
  nb::class_<NcclComm>(m, "NcclComm",
                       "One nonblocking NCCL communicator (ncclCommInitRankConfig) of nranks ranks on a device; NCCL is opened at "
                       "run time. Collective ops captured with it keep its handle: keep it alive as long as them.")
      .def(
          "__init__",
          [](NcclComm* self, nb::bytes uid, int nranks, int rank, int device, double timeout_s) {
            std::string id(uid.c_str(), uid.size());
            // joining waits for every rank: let other Python threads (e.g. a store's server) run
            nb::gil_scoped_release release;
            new (self) NcclComm(id, nranks, rank, device, timeout_s);
          },
          "unique_id"_a, "nranks"_a, "rank"_a, "device"_a, "timeout_s"_a = 0.0,
          "Join the communicator; waits at most timeout_s (<= 0: forever) for the other ranks, then aborts and "
          "raises BackendError.")
      .def_static(
          "unique_id",
          [] {
            const std::string id = NcclComm::new_unique_id();
            return nb::bytes(id.data(), id.size());
          },
          "ncclGetUniqueId: the 128 bytes rank 0 hands to every rank.")
      .def_prop_ro("handle", [](const NcclComm& c) { return reinterpret_cast<std::uintptr_t>(c.get()); },
                   "The ncclComm_t as an integer (the 'comm' pointer of the nccl_* native ops).")
      .def_prop_ro("nranks", &NcclComm::nranks)
      .def_prop_ro("rank", &NcclComm::rank)
      .def_prop_ro("device", &NcclComm::device)
      .def_prop_ro("alive", &NcclComm::alive)
      .def("destroy", &NcclComm::destroy, nb::call_guard<nb::gil_scoped_release>(),
           "ncclCommDestroy now (waits for pending work); later use raises BackendError.")
      .def("abort", &NcclComm::abort, nb::call_guard<nb::gil_scoped_release>(),
           "ncclCommAbort now: collectives waiting on a dead peer end; later use raises BackendError.")
      .def("async_error", &NcclComm::async_error, nb::call_guard<nb::gil_scoped_release>(),
           "ncclCommGetAsyncError: 0 healthy, 7 (ncclInProgress) busy, another code once failed, -1 once closed.")
      .def_static("error_text", [](int code) { return cuda::nccl_error_text(code); }, "code"_a,
                  "ncclGetErrorString of a result code.");
  m.def(
      "load_nccl",
      [] {
        const cuda::Nccl& api = cuda::nccl();
        return std::make_pair(api.path, api.version);
      },
      "Load NCCL now: (path, version code). Raises DeviceUnavailableError naming every path tried.");
  m.def("probe_nccl", &cuda::probe_nccl, "paths"_a,
        "Try to load NCCL from exactly these paths (not cached): the path that works, else "
        "DeviceUnavailableError naming every path tried.");
  m.def("nccl_candidates", &cuda::nccl_candidates, "The paths load_nccl tries, in order.");
  m.def("add_nccl_candidates", &cuda::add_nccl_candidates, "paths"_a,
        "Library paths the NCCL loader tries first after TR_NCCL_PATH.");
}

nb::dict record_dict(const ConvPlanRecord& r) {
  nb::dict d;
  d["key"] = r.key;
  d["direction"] = r.direction;
  d["engine"] = r.engine;
  d["source"] = r.source;
  d["rank"] = r.rank;
  d["workspace"] = r.workspace;
  d["timed"] = r.timed;
  return d;
}

// Which engines the convolutions chose (and pinning them), with what the choice depends on.
void bind_conv_engines(nb::module_& m) {
  auto plan_dicts = [](const std::vector<ConvPlanRecord>& plans) {
    nb::list out;
    for (const auto& r : plans) out.append(record_dict(r));
    return out;
  };
  m.def(
      "cudnn_conv_op_plans",
      [plan_dicts](int device, const ConvFwdArgs& args) { return plan_dicts(conv_op_plans(device, args)); },
      "device"_a, "args"_a,
      "The plans the conv_fwd or conv_bwd op made on `device` from this record (make_op's) uses, fprop or "
      "(wgrad, dgrad): dicts of key, direction, engine ('direct': the direct kernels), source ('heuristic', "
      "'timed', 'cache', 'pinned', 'direct'), rank (in the heuristics' list; -1 when not from it), workspace "
      "(bytes), timed (candidates). Only geometry, dtypes, engine, tf32, autotune and whether dx is given are "
      "read. Needs no GPU.");
  m.def(
      "cudnn_conv_op_plans",
      [plan_dicts](int device, const ConvBwdArgs& args) { return plan_dicts(conv_op_plans(device, args)); },
      "device"_a, "args"_a);
  m.def("set_cudnn_conv_pins", &set_conv_pins, "pins"_a,
        "Pin engines by plan key ({key: engine name or 'direct'}; replaces earlier pins, {} unpins): plans made "
        "later build exactly these or fail naming the convolution. ConfigError for a malformed key or name.");
  m.def("cudnn_conv_pins", &conv_pins, "The engines pinned now, by plan key.");
  m.def(
      "cudnn_conv_settings",
      [] {
        const CudnnConvSettings s = cudnn_conv_settings();
        nb::dict d;
        d["frontend"] = s.frontend;
        d["workspace_cap_mb"] = s.workspace_cap_mb;
        d["candidates"] = s.candidates;
        return d;
      },
      "What the engine choice depends on besides the GPU, cuDNN and the plan: the cuDNN frontend version compiled "
      "in (0: none), the workspace cap in MiB (TR_CUDNN_WORKSPACE_MB) and the candidates autotuning times.");
  m.def(
      "cublaslt_version", [] { return cuda::lt().get_version(); },
      "cublasLtGetVersion() of the loaded cuBLASLt (its heuristic picks the GEMM algorithms). Loads it.");
}

// Which engine each attention op made through attention_sdpa_fwd / _bwd runs (cuDNN's SDPA or tr's kernels).
void bind_attention_plans(nb::module_& m) {
  auto plan_dict = [](bool found, const SdpaPlanRecord& r) -> nb::object {
    if (!found) return nb::none();
    nb::dict d;
    d["key"] = r.key;
    d["engine"] = r.engine;
    d["note"] = r.note;
    d["workspace"] = r.workspace;
    d["deterministic"] = r.deterministic;
    return d;
  };
  m.def(
      "attention_sdpa_plan",
      [plan_dict](int device, const AttentionSdpaFwdArgs& args) {
        SdpaPlanRecord r;
        const bool found = attention_sdpa_plan(device, args, r);
        return plan_dict(found, r);
      },
      "device"_a, "args"_a,
      "The plan the attention_sdpa_fwd or attention_sdpa_bwd op made on `device` from this record (make_op's) "
      "uses: a dict of key, engine (cuDNN's plan name, or 'kernel': tr's kernels), note (why tr's kernels run), "
      "workspace (bytes) and deterministic (the backward asked for cuDNN's deterministic algorithm); None when "
      "no op of that key was made on `device`.");
  m.def(
      "attention_sdpa_plan",
      [plan_dict](int device, const AttentionSdpaBwdArgs& args) {
        SdpaPlanRecord r;
        const bool found = attention_sdpa_plan(device, args, r);
        return plan_dict(found, r);
      },
      "device"_a, "args"_a);
}

// The conv + genstats measurement (ops/conv_genstats_probe.hpp), for benchmarks/conv_genstats_probe.py.
void bind_genstats_probe(nb::module_& m) {
  m.def(
      "cudnn_conv_genstats_probe",
      [](int device, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t k, std::int64_t r,
         std::int64_t s, std::int64_t stride, std::int64_t pad, bool prologue, int reps, std::uint64_t seed) {
        const GenstatsProbeShape shape{n, c, h, w, k, r, s, stride, pad, prologue, reps, seed};
        GenstatsProbeResult res;
        {
          nb::gil_scoped_release release;
          res = conv_genstats_probe(device, shape);
        }
        nb::dict d;
        d["plain_engine"] = res.plain_engine;
        d["plain_ms"] = res.plain_ms;
        d["fused_plans"] = res.fused_plans;
        d["fused_rank"] = res.fused_rank;
        d["fused_engine"] = res.fused_engine;
        d["fused_note"] = res.fused_note;
        d["fused_build_s"] = res.fused_build_s;
        d["fused_ms"] = res.fused_ms;
        d["sums_repeat"] = res.sums_repeat;
        d["y_matches_plain"] = res.y_matches_plain;
        d["y_max_abs_diff"] = res.y_max_abs_diff;
        d["sum_rel_err"] = res.sum_rel_err;
        d["var_rel_err"] = res.var_rel_err;
        return d;
      },
      "device"_a, "n"_a, "c"_a, "h"_a, "w"_a, "k"_a, "r"_a, "s"_a, "stride"_a, "pad"_a, "prologue"_a = false,
      "reps"_a = 20, "seed"_a = 1,
      "FP16 NHWC: the plain convolution and (scale-bias-relu-)conv-genstats under tr's deterministic engine rule, "
      "timed; whether the fused sums repeat and how far they lie from float64 sums of its y.");
}

// cuDNN convolution planning: its cost, its cache file, and hooks that test the file format without a GPU.
void bind_conv_plans(nb::module_& m) {
  bind_conv_engines(m);
  m.def(
      "cudnn_plan_stats",
      [] {
        const CudnnPlanStats s = cudnn_plan_stats();
        nb::dict d;
        d["graphs"] = s.graphs;
        d["plans_built"] = s.plans_built;
        d["autotuned"] = s.autotuned;
        d["cache_hits"] = s.cache_hits;
        d["cache_misses"] = s.cache_misses;
        d["cache_stale"] = s.cache_stale;
        d["pinned"] = s.pinned;
        d["seconds"] = s.seconds;
        d["build_seconds"] = s.build_seconds;
        d["tune_seconds"] = s.tune_seconds;
        return d;
      },
      "Cumulative cuDNN convolution planning of this process: counts and seconds (see ops/conv_cudnn.hpp).");
  m.def("cudnn_plan_cache_path", &cudnn_plan_cache_path, "device"_a = 0,
        "The autotuning cache file convolutions on `device` use now; '' when off or cuDNN is missing.");
  m.def("take_cudnn_plan_cache_warnings", &plan_cache::take_warnings,
        "Warnings of the plan cache since the last call (unreadable, corrupt or unwritable file; stale entries).");
  m.def(
      "_plan_cache_parse",
      [](const std::string& text, const std::string& ident) {
        plan_cache::Entries entries;
        std::string why;
        const bool ok = plan_cache::parse(text, ident, entries, why);
        return nb::make_tuple(ok, entries, why);
      },
      "text"_a, "ident"_a, "Test hook: (is a cache file for ident, entries, why not / lines skipped).");
  m.def("_plan_cache_format", &plan_cache::format, "ident"_a, "entries"_a, "Test hook: a cache file's text.");
  m.def("_plan_cache_file_name", &plan_cache::file_name, "gpu"_a, "major"_a, "minor"_a, "cudnn"_a, "frontend"_a);
  m.def("_plan_cache_ident", &plan_cache::ident, "gpu"_a, "major"_a, "minor"_a, "cudnn"_a, "frontend"_a);
  m.def("_plan_cache_directory", &plan_cache::directory, "Test hook: the cache directory now ('' when off).");
  m.def(
      "_plan_cache_store",
      [](const std::string& path, const std::string& ident, const std::string& key, const std::string& engine) {
        plan_cache::open(path, ident).store(key, engine);
      },
      "path"_a, "ident"_a, "key"_a, "engine"_a, nb::call_guard<nb::gil_scoped_release>(),
      "Test hook: store one entry through this process's File for path, as a convolution's search does.");
  m.def(
      "_plan_cache_entries",
      [](const std::string& path, const std::string& ident) { return plan_cache::open(path, ident).entries(); },
      "path"_a, "ident"_a, "Test hook: what this process's File for path knows (the file, read once, and stores).");
}

}  // namespace

void bind_jpeg(nb::module_& m) {
  using cuda::JpegDecoder;
  nb::class_<JpegDecoder>(m, "JpegDecoder",
                          "Batched nvJPEG decoding of host JPEG bytes into device RGB regions (nvJPEG opened at run "
                          "time); see csrc/cuda/jpeg_decoder.hpp.")
      .def(nb::init<int, const std::string&, int, int, bool, bool, long long>(), "device"_a, "backend"_a = "auto",
           "max_batch"_a = 256, "threads"_a = 4, "strict"_a = true, "interpolate"_a = false,
           "gpu_huffman_pixels"_a = 1000000)
      .def_prop_ro("backend", &JpegDecoder::backend, "The backend made, with its flags (e.g. 'hardware+strict').")
      .def_prop_ro("decoupled", &JpegDecoder::decoupled,
                   "The decoupled path's decoders ('cpu-huffman+gpu-huffman'), '' until made (see "
                   "csrc/cuda/jpeg_decoupled.hpp).")
      .def_prop_ro("device", &JpegDecoder::device)
      .def(
          "decode",
          [](JpegDecoder& d, const std::vector<std::uintptr_t>& data, const std::vector<std::size_t>& lengths,
             const std::vector<std::uintptr_t>& dst, const std::vector<std::size_t>& pitch,
             const std::vector<int>& roi, std::uintptr_t stream, bool precheck, int call) {
            const std::size_t n = data.size();
            if (lengths.size() != n || dst.size() != n || pitch.size() != n || roi.size() != 4 * n)
              fail(ErrorKind::BadArgument, "JpegDecoder.decode: data, lengths, dst and pitch need one entry an "
                                           "image and roi four (x, y, width, height)");
            if (call < 0 || call > 4)
              fail(ErrorKind::BadArgument, "JpegDecoder.decode: call must be 0 (regions), 1 (whole images), 2 "
                                           "(whole images, planar), 3 (whole images, planar YUV) or 4 (regions "
                                           "through the decoupled API), got " + std::to_string(call));
            std::vector<cuda::JpegImage> images(n);
            for (std::size_t i = 0; i < n; ++i)
              images[i] = cuda::JpegImage{reinterpret_cast<const unsigned char*>(data[i]), lengths[i],
                                          reinterpret_cast<unsigned char*>(dst[i]), pitch[i], roi[4 * i],
                                          roi[4 * i + 1], roi[4 * i + 2], roi[4 * i + 3]};
            nb::gil_scoped_release release;
            return d.decode(images, reinterpret_cast<cudaStream_t>(stream), precheck, cuda::JpegCall(call));
          },
          "data"_a, "lengths"_a, "dst"_a, "pitch"_a, "roi"_a, "stream"_a, "precheck"_a = true, "call"_a = 0,
          "Decode on `stream` (a cudaStream_t as an integer); one status an image: 0 decoded, 1 not taken by this "
          "backend (decode it on the CPU), 2 damaged. Host bytes must stay valid until the stream passes it.");
  m.def(
      "h2d_async",
      [](std::uintptr_t dst, std::uintptr_t src, std::size_t nbytes, std::uintptr_t stream) {
        const cudaError_t e = cudaMemcpyAsync(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src),
                                              nbytes, cudaMemcpyHostToDevice, reinterpret_cast<cudaStream_t>(stream));
        if (e != cudaSuccess)
          fail(ErrorKind::Backend, std::string("cudaMemcpyAsync of ") + std::to_string(nbytes) +
                                       " bytes to the device failed: " + cudaGetErrorString(e));
      },
      "dst"_a, "src"_a, "nbytes"_a, "stream"_a,
      "Copy nbytes from host address src (pinned: asynchronous) to device address dst on `stream` (a "
      "cudaStream_t as an integer). The host bytes must stay valid until the stream has passed the copy.");
  m.def(
      "d2d_async",
      [](std::uintptr_t dst, std::uintptr_t src, std::size_t nbytes, std::uintptr_t stream) {
        cuda::check(cudaMemcpyAsync(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), nbytes,
                                    cudaMemcpyDeviceToDevice, reinterpret_cast<cudaStream_t>(stream)),
                    "cudaMemcpyAsync (device to device)");
      },
      "dst"_a, "src"_a, "nbytes"_a, "stream"_a,
      "Copy nbytes from device address src to device address dst on `stream` (a cudaStream_t as an integer).");
  // a stream and events of their own, for work beside the transfer stream (the feeder's side decodes): the transfer
  // stream waits on an event instead of queueing that work behind its own dependencies on the step
  m.def(
      "stream_create",
      [](int device, bool greatest) {
        cuda::DeviceGuard guard(device);
        int least = 0, most = 0;
        cuda::check(cudaDeviceGetStreamPriorityRange(&least, &most), "cudaDeviceGetStreamPriorityRange");
        cudaStream_t s = nullptr;
        cuda::check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest ? most : least),
                    "cudaStreamCreateWithPriority");
        return reinterpret_cast<std::uintptr_t>(s);
      },
      "device"_a, "greatest"_a = true, "A non-blocking stream at the device's greatest (or least) priority.");
  m.def(
      "stream_destroy",
      [](std::uintptr_t s) { cuda::check(cudaStreamDestroy(reinterpret_cast<cudaStream_t>(s)), "cudaStreamDestroy"); },
      "stream"_a);
  m.def(
      "event_create",
      [] {
        cudaEvent_t e = nullptr;
        cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
        return reinterpret_cast<std::uintptr_t>(e);
      },
      "An event without timing (for ordering streams).");
  m.def(
      "event_destroy",
      [](std::uintptr_t e) { cuda::check(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(e)), "cudaEventDestroy"); },
      "event"_a);
  m.def(
      "event_record",
      [](std::uintptr_t e, std::uintptr_t s) {
        cuda::check(cudaEventRecord(reinterpret_cast<cudaEvent_t>(e), reinterpret_cast<cudaStream_t>(s)),
                    "cudaEventRecord");
      },
      "event"_a, "stream"_a, "Record `event` on `stream` (cudaEvent_t and cudaStream_t as integers).");
  m.def(
      "stream_wait_event",
      [](std::uintptr_t s, std::uintptr_t e) {
        cuda::check(cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(s), reinterpret_cast<cudaEvent_t>(e), 0),
                    "cudaStreamWaitEvent");
      },
      "stream"_a, "event"_a, "Work queued on `stream` after this waits until `event` (its last record) is reached.");
  m.def("load_nvjpeg", &cuda::load_nvjpeg,
        "Load nvJPEG now: (path, version major*1000 + minor*10 + patch). Raises DeviceUnavailableError.");
  m.def("nvjpeg_candidates", &cuda::nvjpeg_candidates, "The paths load_nvjpeg tries, in order.");
  m.def("add_nvjpeg_candidates", &cuda::add_nvjpeg_candidates, "paths"_a,
        "Paths tried before the built-in ones (the nvidia-nvjpeg wheel's library).");
}

void bind_ops(nb::module_& m) {
  bind_jpeg(m);
  nb::class_<Context>(m, "Context", "Five streams (TRANS, COMP_1..3, UPDATE), a cuBLASLt handle and its workspace.")
      .def(nb::init<int, std::size_t>(), "device"_a = 0, "workspace_bytes"_a = std::size_t(32) << 20)
      .def_prop_ro("device", &Context::device)
      .def_prop_ro("workspace_bytes", &Context::workspace_size)
      .def(
          "stream", [](const Context& c, int kind) { return reinterpret_cast<std::uintptr_t>(c.stream(kind)); },
          "kind"_a, "The cudaStream_t of a stream kind (0..4) as an integer.")
      .def("priority", &Context::priority, "kind"_a,
           "A stream kind's CUDA priority (lower is more urgent): TRANS the device's greatest, the others its least.")
      .def("synchronize", &Context::synchronize, nb::call_guard<nb::gil_scoped_release>(),
           "Wait for every stream; raise the first asynchronous error.")
      .def(
          "load_cublaslt",
          [](Context& c) {
            c.lt_handle();
            return cuda::lt().path;
          },
          "Load cuBLASLt and create the handle now; returns the library path. Raises DeviceUnavailableError.");

  nb::class_<Op>(m, "Op", "One native op, ready to be recorded into a graph.")
      .def_ro("info", &Op::info, "How the op was planned (e.g. which cuBLASLt epilogue fused).")
      .def(
          "record", [](Op& op, Context& ctx, int kind) { op.record(ctx.stream(kind)); }, "ctx"_a, "kind"_a,
          "Issue the op on a stream now (outside a graph: for tests).");

  nb::class_<Graph>(m, "Graph", "Ops recorded by stream capture (on one stream or several joined by marks), instantiated as a cudaGraphExec.")
      .def(nb::init<Context&, int>(), "ctx"_a, "kind"_a, nb::keep_alive<1, 2>())
      .def("begin", &Graph::begin)
      .def("record", &Graph::record, "op"_a, "kind"_a = -1,
           "Record an op on stream `kind` (-1: the stream the capture began on).")
      .def("mark", &Graph::mark, "kind"_a, "An event after stream `kind`'s recorded work; returns its index.")
      .def("wait", &Graph::wait, "kind"_a, "mark"_a, "Stream `kind` waits for the mark (joining the capture).")
      .def("end", &Graph::end)
      .def("abort", &Graph::abort)
      .def("launch", &Graph::launch, "kind"_a)
      .def_prop_ro("num_nodes", &Graph::num_nodes)
      .def_prop_ro("depth", &Graph::depth, "Nodes on the longest dependency path (num_nodes for a chain).")
      .def_prop_ro("instantiated", &Graph::instantiated)
      .def("set_memcpy_source", &Graph::set_memcpy_source, "old"_a, "new"_a);

  nb::class_<Event>(m, "Event")
      .def(nb::init<Context&>(), "ctx"_a, nb::keep_alive<1, 2>())
      .def("record", &Event::record, "kind"_a)
      .def("wait", &Event::wait, "kind"_a)
      .def("synchronize", &Event::synchronize, nb::call_guard<nb::gil_scoped_release>())
      .def("elapsed_ms", &Event::elapsed_ms, "since"_a);

  m.def("host_register", &host_register, "ptr"_a, "nbytes"_a,
        "Page-lock host memory (cudaHostRegister) so that captured copies may read it.");
  m.def("host_unregister", &host_unregister, "ptr"_a);
  m.def("cudnn_frontend_built", &cuda::cudnn_frontend_built,
        "True when convolutions were compiled against the cuDNN frontend (else: direct kernels only).");
  m.def("add_cudnn_candidates", &cuda::add_cudnn_candidates, "paths"_a,
        "Library paths the cuDNN loader tries first after TR_CUDNN_PATH.");
  m.def("cudnn_candidates", &cuda::cudnn_candidates, "The paths load_cudnn tries, in order.");
  m.def(
      "load_cudnn",
      [] {
        const cuda::Cudnn& lib = cuda::cudnn();
        return std::make_pair(lib.path, lib.version);
      },
      "Open cuDNN now: (path, cudnnGetVersion()). Raises DeviceUnavailableError naming every path tried.");
  m.def("add_cublaslt_candidates", &cuda::add_cublaslt_candidates, "paths"_a,
        "Library paths the cuBLASLt loader tries first (before TR_CUBLASLT_PATH's built-in fallbacks).");
  bind_nccl(m);
  bind_conv_plans(m);
  bind_genstats_probe(m);
  bind_attention_plans(m);
}

}  // namespace tr::native::bind
