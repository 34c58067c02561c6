// Convolutions through the cuDNN frontend's graph API (see conv_cudnn.hpp).
//
// One frontend graph per (direction, geometry, dtypes, TF32): built once per process and shared by every op
// of that shape (the train, last-batch and validation variants of a layer often coincide). Engines are
// chosen among the heuristics' first candidates, deterministic ones only (no atomics: two runs give the same
// bytes) and, for FP32 without TF32, only engines that compute in plain FP32 (no tensor cores, FFT or
// Winograd); with autotuning each candidate is timed at build and the fastest is kept. Execution is one
// cudnnBackendExecute on the op's stream, legal inside a stream capture.
//
// Autotuning results persist (conv_plan_cache.hpp): with a cache entry for the plan's shape, only that engine
// is built, untimed, if the heuristics still offer it under the same filters; otherwise (cuDNN or its
// heuristics changed, a smaller workspace cap) the plan is searched again and the entry replaced.
//
// Workspace: one buffer per device shared by all convolutions, grown (by replacement: graphs captured with
// the old one keep it alive) when a plan needs more, up to TR_CUDNN_WORKSPACE_MB (default 1024). Ops that
// may run at the same time on different streams must not both be convolutions (the step's branches never
// are).
#include "ops/conv_cudnn.hpp"

#ifdef TR_HAVE_CUDNN_FRONTEND

#include <cudnn_frontend.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "cuda/cudnn.hpp"
#include "native/device.hpp"
#include "ops/conv_plan_cache.hpp"

namespace tr::native {

namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

constexpr int kCandidates = 8;  // heuristics' engines built (and timed) per graph

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t a = 0, b = 0, out = 0;  // uids: (x, w, y), (dy, w, dx), (dy, x, dw)
  std::int64_t workspace = 0;
  std::string name;
};

std::mutex g_mutex;
std::map<std::string, std::shared_ptr<Plan>> g_plans;
std::map<int, cudnnHandle_t> g_handles;
std::map<int, std::shared_ptr<DeviceBuffer>> g_workspaces;
std::map<int, std::size_t> g_workspace_bytes;
std::map<int, std::pair<std::string, std::string>> g_cache_names;  // device -> (cache file name, identity)
CudnnPlanStats g_stats;

using Clock = std::chrono::steady_clock;

// Adds the seconds of its lifetime to a counter (early returns included).
class AddTime {
 public:
  explicit AddTime(double& to) : to_(to), t0_(Clock::now()) {}
  ~AddTime() { to_ += std::chrono::duration<double>(Clock::now() - t0_).count(); }
  AddTime(const AddTime&) = delete;
  AddTime& operator=(const AddTime&) = delete;

 private:
  double& to_;
  Clock::time_point t0_;
};

std::int64_t workspace_cap() {
  const char* env = std::getenv("TR_CUDNN_WORKSPACE_MB");
  const long mb = (env != nullptr && *env != '\0') ? std::atol(env) : 1024;
  return static_cast<std::int64_t>(mb > 0 ? mb : 1024) << 20;
}

fe::DataType_t fe_type(DT dt) {
  switch (dt) {
    case DT::F32: return fe::DataType_t::FLOAT;
    case DT::F16: return fe::DataType_t::HALF;
    case DT::BF16: return fe::DataType_t::BFLOAT16;
    default: return fe::DataType_t::NOT_SET;
  }
}

// NHWC (and KRSC) memory, described with cuDNN's NCHW dimension order.
TensorPtr tensor(fe::graph::Graph& g, const char* name, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                 DT dt) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_dim({n, c, h, w})
                      .set_stride({h * w * c, 1, w * c, c})
                      .set_data_type(fe_type(dt)));
}

void output(const TensorPtr& t, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, DT dt) {
  t->set_output(true).set_dim({n, c, h, w}).set_stride({h * w * c, 1, w * c, c}).set_data_type(fe_type(dt));
}

cudnnHandle_t handle_for(int device) {
  auto it = g_handles.find(device);
  if (it != g_handles.end()) return it->second;
  cuda::DeviceGuard guard(device);
  cudnnHandle_t h = nullptr;
  const cudnnStatus_t st = fe::detail::create_handle(&h);
  if (st != CUDNN_STATUS_SUCCESS) {
    fail(ErrorKind::Backend, std::string("cudnnCreate failed: ") + fe::detail::get_error_string(st));
  }
  g_handles[device] = h;  // one per device for the life of the process
  return h;
}

std::shared_ptr<DeviceBuffer> workspace_for(int device, std::size_t bytes) {
  if (bytes == 0) return nullptr;
  auto& have = g_workspace_bytes[device];
  if (have >= bytes) return g_workspaces[device];
  cuda::DeviceGuard guard(device);
  auto buf = std::make_shared<DeviceBuffer>(bytes);
  g_workspaces[device] = buf;  // ops holding the previous buffer keep it alive
  have = bytes;
  return buf;
}

enum class Dir { Fwd, Dgrad, Wgrad };

const char* dir_name(Dir d) { return d == Dir::Fwd ? "fprop" : d == Dir::Dgrad ? "dgrad" : "wgrad"; }

std::string key_of(Dir d, const ConvGeo& g, DT a, DT b, DT out, const ConvChoice& c, int device) {
  std::string k = std::to_string(static_cast<int>(d)) + ":" + std::to_string(device);
  for (int v : {g.n, g.h, g.w, g.c, g.k, g.r, g.s, g.sh, g.sw, g.ph, g.pw, g.groups}) k += "," + std::to_string(v);
  for (DT t : {a, b, out}) k += ":" + std::to_string(static_cast<int>(t));
  return k + (c.tf32 ? ":tf32" : "") + (c.autotune ? ":tuned" : "");
}

// The plan's key in the cache file: key_of without the device (the file is per GPU model) and with the
// workspace cap (a larger one may admit a faster engine).
std::string cache_key(Dir d, const ConvGeo& g, DT a, DT b, DT out, const ConvChoice& c) {
  std::string k = dir_name(d);
  const char* names[] = {"n", "h", "w", "c", "k", "r", "s", "sh", "sw", "ph", "pw"};
  const int values[] = {g.n, g.h, g.w, g.c, g.k, g.r, g.s, g.sh, g.sw, g.ph, g.pw};
  for (int i = 0; i < 11; ++i) k += std::string(":") + names[i] + std::to_string(values[i]);
  if (g.groups != 1) k += ":g" + std::to_string(g.groups);  // ungrouped keys as before: their entries stay valid
  k += std::string(":") + dtype_name(a) + "," + dtype_name(b) + "," + dtype_name(out);
  return k + (c.tf32 ? ":tf32=1" : ":tf32=0") + ":ws" + std::to_string(workspace_cap() >> 20) + "M";
}

// This device's cache file (for its GPU model and the loaded cuDNN), or nullptr when the cache is off.
// Called with g_mutex held, cuDNN loaded.
plan_cache::File* cache_for(int device) {
  const std::string dir = plan_cache::directory();  // read each time: TR_CACHE_DIR may change between compiles
  if (dir.empty()) return nullptr;
  auto it = g_cache_names.find(device);
  if (it == g_cache_names.end()) {
    const DeviceProperties p = device_properties(device);
    const long cudnn = cuda::cudnn().version;
    const long fe_version = CUDNN_FRONTEND_VERSION;
    it = g_cache_names
             .emplace(device, std::make_pair(plan_cache::file_name(p.name, p.major, p.minor, cudnn, fe_version),
                                             plan_cache::ident(p.name, p.major, p.minor, cudnn, fe_version)))
             .first;
  }
  return &plan_cache::open(dir + "/" + it->second.first, it->second.second);
}

// Builds only `engine` (a cached search's winner), if the heuristics still offer it: it passes the filters
// set on `graph` (determinism, FP32, workspace) exactly as a searched engine must. False with `why` if not.
bool build_cached(fe::graph::Graph& graph, std::int64_t count, const std::string& engine, std::string& why) {
  for (std::int64_t i = 0; i < count; ++i) {
    std::string name;
    if (graph.get_plan_name_at_index(i, name).is_bad() || name != engine) continue;
    auto e = graph.build_plan_at_index(i);  // refuses a deselected engine
    if (e.is_bad()) {
      why = "it is deselected or failed to build: " + e.get_message();
      return false;
    }
    std::string built;  // the candidate now selected, what get_workspace_size and execute use
    if (graph.get_plan_name(built).is_bad() || built != engine) {
      why = "the plan built is '" + built + "'";
      return false;
    }
    return true;
  }
  why = "the heuristics no longer offer it among their " + std::to_string(count) + " engines";
  return false;
}

// Builds (or finds) the plan. `ptrs` (a, b, out) are real buffers of the right sizes, used only to time
// candidates or run a cached engine once. Returns nullptr with `why` when cuDNN has no deterministic engine.
std::shared_ptr<Plan> plan_for(Context& ctx, Dir d, const ConvGeo& g, DT adt, DT bdt, DT odt, const void* pa,
                               const void* pb, void* pout, const ConvChoice& choice, std::string& why) {
  for (DT t : {adt, bdt, odt}) {
    if (fe_type(t) == fe::DataType_t::NOT_SET) {
      why = std::string("cuDNN takes FP32/FP16/BF16 convolutions, not ") + dtype_name(t);
      return nullptr;
    }
  }
  const int device = ctx.device();
  const std::string key = key_of(d, g, adt, bdt, odt, choice, device);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto it = g_plans.find(key); it != g_plans.end()) return it->second;
  AddTime total(g_stats.seconds);
  std::optional<AddTime> building(std::in_place, g_stats.build_seconds);  // until the engines are built
  cuda::cudnn();  // throws DeviceUnavailable when the library is missing
  cudnnHandle_t handle = handle_for(device);
  cuda::DeviceGuard guard(device);

  auto graph = std::make_shared<fe::graph::Graph>();
  const bool all_fp32 = adt == DT::F32 && bdt == DT::F32 && odt == DT::F32;
  graph->set_io_data_type(fe_type(odt))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto plan = std::make_shared<Plan>();
  TensorPtr A, B, O;
  const std::vector<std::int64_t> pad{g.ph, g.pw}, stride{g.sh, g.sw}, dil{1, 1};
  const int cg = g.c / g.groups;  // the weights' channels: cuDNN infers the group count as c / cg
  if (d == Dir::Fwd) {
    A = tensor(*graph, "x", g.n, g.c, g.h, g.w, adt);
    B = tensor(*graph, "w", g.k, cg, g.r, g.s, bdt);
    O = graph->conv_fprop(A, B, fe::graph::Conv_fprop_attributes().set_padding(pad).set_stride(stride).set_dilation(dil));
    output(O, g.n, g.k, g.p, g.q, odt);
  } else if (d == Dir::Dgrad) {
    A = tensor(*graph, "dy", g.n, g.k, g.p, g.q, adt);
    B = tensor(*graph, "w", g.k, cg, g.r, g.s, bdt);
    O = graph->conv_dgrad(A, B, fe::graph::Conv_dgrad_attributes().set_padding(pad).set_stride(stride).set_dilation(dil));
    output(O, g.n, g.c, g.h, g.w, odt);
  } else {
    A = tensor(*graph, "dy", g.n, g.k, g.p, g.q, adt);
    B = tensor(*graph, "x", g.n, g.c, g.h, g.w, bdt);
    O = graph->conv_wgrad(A, B, fe::graph::Conv_wgrad_attributes().set_padding(pad).set_stride(stride).set_dilation(dil));
    output(O, g.k, cg, g.r, g.s, odt);
  }
  auto bad = [&](fe::error_t e, const char* step) {
    if (e.is_good()) return false;
    why = std::string("cuDNN conv ") + dir_name(d) + " " + step + ": " + e.get_message();
    return true;
  };
  if (bad(graph->validate(), "validate") || bad(graph->build_operation_graph(handle), "build_operation_graph") ||
      bad(graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "heuristics")) {
    return nullptr;
  }
  std::vector<fe::NumericalNote_t> notes{fe::NumericalNote_t::NONDETERMINISTIC};
  if (all_fp32 && !choice.tf32) {  // FP32 means FP32: no TF32 tensor cores, no FFT/Winograd transforms
    using N = fe::NumericalNote_t;
    for (N n : {N::TENSOR_CORE, N::DOWN_CONVERT_INPUTS, N::REDUCED_PRECISION_REDUCTION, N::FFT, N::WINOGRAD,
                N::WINOGRAD_TILE_4x4, N::WINOGRAD_TILE_6x6, N::WINOGRAD_TILE_13x13}) {
      notes.push_back(n);
    }
  }
  graph->deselect_numeric_notes(notes);
  graph->deselect_workspace_greater_than(workspace_cap());
  const std::int64_t count = graph->get_execution_plan_count();
  plan_cache::File* cache = choice.autotune ? cache_for(device) : nullptr;  // untuned plans are not cached
  const std::string ckey = cache != nullptr ? cache_key(d, g, adt, bdt, odt, choice) : std::string();
  bool from_cache = false;
  if (std::string cached; cache != nullptr && cache->lookup(ckey, cached)) {
    std::string stale;
    from_cache = build_cached(*graph, count, cached, stale);
    if (from_cache) {
      ++g_stats.cache_hits;
    } else {
      ++g_stats.cache_stale;
      plan_cache::warn("cuDNN plan cache " + cache->path() + ": engine '" + cached + "' cached for " + ckey +
                       " is not used (" + stale + "); searching again");
    }
  } else if (cache != nullptr) {
    ++g_stats.cache_misses;
  }
  int built = from_cache ? 1 : 0;
  std::string failures;
  for (std::int64_t i = 0; !from_cache && i < count && built < (choice.autotune ? kCandidates : 1); ++i) {
    auto e = graph->build_plan_at_index(i);
    if (e.is_good()) {
      ++built;
    } else if (failures.size() < 600) {
      failures += "\n  engine " + std::to_string(i) + ": " + e.get_message();
    }
  }
  g_stats.plans_built += built;
  building.reset();
  if (built == 0) {
    why = std::string("cuDNN conv ") + dir_name(d) + ": no deterministic engine" +
          (all_fp32 && !choice.tf32 ? " without TF32" : "") + " among " + std::to_string(count) + failures;
    return nullptr;
  }
  plan->a = A->get_uid();
  plan->b = B->get_uid();
  plan->out = O->get_uid();
  if (!from_cache && choice.autotune && built > 1) {
    AddTime tuning(g_stats.tune_seconds);
    const std::int64_t tune_bytes = graph->get_autotune_workspace_size();
    DeviceBuffer tune_ws(static_cast<std::size_t>(tune_bytes > 0 ? tune_bytes : 0));
    cudaStream_t s = ctx.stream(1);
    if (fe::detail::set_stream(handle, s) != CUDNN_STATUS_SUCCESS) fail(ErrorKind::Backend, "cudnnSetStream failed");
    std::unordered_map<std::int64_t, void*> ptrs{{plan->a, const_cast<void*>(pa)},
                                                 {plan->b, const_cast<void*>(pb)},
                                                 {plan->out, pout}};
    if (bad(graph->autotune(handle, ptrs, tune_ws.get()), "autotune")) return nullptr;
    cuda::check(cudaStreamSynchronize(s), "cuDNN autotuning");
    ++g_stats.autotuned;
  }
  if (bad(graph->get_workspace_size(plan->workspace), "workspace size") || bad(graph->get_plan_name(plan->name), "plan name")) {
    return nullptr;
  }
  if (from_cache) {
    // Run once now, outside any stream capture, as autotuning runs its candidates: whatever cuDNN does on a
    // plan's first execution happens here, as it did when this engine was timed. The device is idle first
    // (as autotune makes it): the shared workspace and `pout` are ours meanwhile.
    cuda::check(cudaDeviceSynchronize(), "cuDNN conv warm-up");
    cudaStream_t s = ctx.stream(1);
    if (fe::detail::set_stream(handle, s) != CUDNN_STATUS_SUCCESS) fail(ErrorKind::Backend, "cudnnSetStream failed");
    auto ws = workspace_for(device, static_cast<std::size_t>(plan->workspace));
    std::unordered_map<std::int64_t, void*> ptrs{{plan->a, const_cast<void*>(pa)},
                                                 {plan->b, const_cast<void*>(pb)},
                                                 {plan->out, pout}};
    if (bad(graph->execute(handle, ptrs, ws ? ws->get() : nullptr), "first execution")) return nullptr;
    cuda::check(cudaStreamSynchronize(s), "cuDNN conv warm-up");
  }
  // a lone buildable candidate is stored too: next time the others are not tried
  if (cache != nullptr && !from_cache) cache->store(ckey, plan->name);
  plan->graph = graph;
  g_plans[key] = plan;
  ++g_stats.graphs;
  return plan;
}

// Executes one plan on a stream; the op keeps the plan and the workspace alive.
struct Exec {
  std::shared_ptr<Plan> plan;
  std::shared_ptr<DeviceBuffer> workspace;
  cudnnHandle_t handle;
  std::unordered_map<std::int64_t, void*> ptrs;

  void operator()(cudaStream_t s) {
    if (fe::detail::set_stream(handle, s) != CUDNN_STATUS_SUCCESS) fail(ErrorKind::Backend, "cudnnSetStream failed");
    auto e = plan->graph->execute(handle, ptrs, workspace ? workspace->get() : nullptr);
    if (e.is_bad()) fail(ErrorKind::Backend, "cuDNN conv execute (" + plan->name + "): " + e.get_message());
  }
};

Exec exec_of(Context& ctx, const std::shared_ptr<Plan>& plan, const void* a, const void* b, void* out) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Exec e{plan, workspace_for(ctx.device(), static_cast<std::size_t>(plan->workspace)), handle_for(ctx.device()), {}};
  e.ptrs = {{plan->a, const_cast<void*>(a)}, {plan->b, const_cast<void*>(b)}, {plan->out, out}};
  return e;
}

}  // namespace

CudnnPlanStats cudnn_plan_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_stats;
}

std::string cudnn_plan_cache_path(int device) {
  try {
    cuda::cudnn();
  } catch (const Error&) {
    return "";  // no cuDNN, no cuDNN plans
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  plan_cache::File* f = cache_for(device);
  return f != nullptr ? f->path() : "";
}

std::unique_ptr<Op> cudnn_conv_fwd(Context& ctx, const ConvGeo& g, DT xdt, DT ydt, const void* x, const void* w,
                                   void* y, const ConvChoice& choice, std::string& why) {
  auto plan = plan_for(ctx, Dir::Fwd, g, xdt, xdt, ydt, x, w, y, choice, why);
  if (plan == nullptr) return nullptr;
  Exec e = exec_of(ctx, plan, x, w, y);
  return fn_op(std::move(e), "cudnn fprop " + plan->name);
}

std::unique_ptr<Op> cudnn_conv_bwd(Context& ctx, const ConvGeo& g, DT xdt, DT dydt, DT dwdt, DT dxdt, const void* x,
                                   const void* w, const void* dy, void* dw, void* dx, const ConvChoice& choice,
                                   std::string& why) {
  auto wplan = plan_for(ctx, Dir::Wgrad, g, dydt, xdt, dwdt, dy, x, dw, choice, why);
  if (wplan == nullptr) return nullptr;
  std::shared_ptr<Plan> dplan;
  if (dx != nullptr) {
    dplan = plan_for(ctx, Dir::Dgrad, g, dydt, xdt, dxdt, dy, w, dx, choice, why);
    if (dplan == nullptr) return nullptr;
  }
  Exec we = exec_of(ctx, wplan, dy, x, dw);
  std::string info = "cudnn wgrad " + wplan->name;
  if (dplan == nullptr) return fn_op(std::move(we), info);
  Exec de = exec_of(ctx, dplan, dy, w, dx);
  info += ", dgrad " + dplan->name;
  return fn_op(
      [we, de](cudaStream_t s) mutable {
        de(s);
        we(s);
      },
      info);
}

}  // namespace tr::native

#else  // built without the cuDNN frontend: every convolution takes the direct kernels

namespace tr::native {

CudnnPlanStats cudnn_plan_stats() { return {}; }

std::string cudnn_plan_cache_path(int) { return ""; }

std::unique_ptr<Op> cudnn_conv_fwd(Context&, const ConvGeo&, DT, DT, const void*, const void*, void*,
                                   const ConvChoice&, std::string& why) {
  why = "tr.backend._native was built without the cuDNN frontend (cudnn_frontend.h and cudnn.h not found)";
  return nullptr;
}

std::unique_ptr<Op> cudnn_conv_bwd(Context&, const ConvGeo&, DT, DT, DT, DT, const void*, const void*, const void*,
                                   void*, void*, const ConvChoice&, std::string& why) {
  why = "tr.backend._native was built without the cuDNN frontend (cudnn_frontend.h and cudnn.h not found)";
  return nullptr;
}

}  // namespace tr::native

#endif
