// Convolutions through the cuDNN frontend's graph API (see conv_cudnn.hpp).
//
// One frontend graph per (direction, geometry, dtypes, TF32, choice): built once per process and shared by every
// op of that shape (the train, last-batch and validation variants of a layer often coincide). The candidates are
// the heuristics' (modes A, then FALLBACK), filtered: deterministic ones only (no atomics: two runs give the
// same bytes), none reducing in reduced precision (a split-K whose partial sums are 16-bit overflows to inf
// where the FP32 sum fits: a loss-scaled FP16 weight gradient then reads as an overflow and the step is
// skipped), for FP32 without TF32 only engines that compute in plain FP32 (no tensor cores, FFT or
// Winograd), and none asking for more workspace than TR_CUDNN_WORKSPACE_MB (a constant: a cap derived from free
// memory would make two machines choose differently). Which candidate:
// - by default the first that builds, untimed: a function of the GPU model (cuDNN's heuristics read the
//   device's properties), the cuDNN and frontend versions and the plan key, so two machines of one model and
//   one library choose alike; the plan cache is neither read nor written;
// - with autotuning (an opt-in: TR_CUDNN_AUTOTUNE=1) the first kCandidates are built and timed and the fastest
//   kept, and the winner persists (conv_plan_cache.hpp): with a cache entry for the plan's shape only that engine
//   is built, untimed, if the heuristics still offer it under the same filters; otherwise (cuDNN or its
//   heuristics changed, a smaller workspace cap) the plan is searched again and the entry replaced. Timings
//   differ between machines, so the winners may too;
// - a pinned engine (set_conv_pins: recorded by an earlier run) is built exactly, from the heuristics' list or,
//   where they do not offer it, from its engine id and knobs, under the same filters; where it cannot run the
//   op fails naming the convolution.
// Every plan runs once at planning, outside any stream capture (autotuning runs its candidates anyway): whatever
// cuDNN does on a plan's first execution never lands in a capture. Execution is one cudnnBackendExecute on the
// op's stream, legal inside a stream capture.
//
// Workspace: one buffer per device shared by all convolutions, grown (by replacement: graphs captured with
// the old one keep it alive) when a plan needs more, up to the cap. Ops that may run at the same time on
// different streams must not both be convolutions (the step's branches never are).
#include "ops/conv_cudnn.hpp"

#include <cstdlib>
#include <mutex>
#include <utility>

#include "ops/conv_plan_cache.hpp"

namespace tr::native {

namespace {

constexpr int kCandidates = 8;  // heuristics' engines built (and timed) per graph when autotuning

long workspace_cap_mb() {
  const char* env = std::getenv("TR_CUDNN_WORKSPACE_MB");
  const long mb = (env != nullptr && *env != '\0') ? std::atol(env) : 1024;
  return mb > 0 ? mb : 1024;
}

}  // namespace

}  // namespace tr::native

#ifdef TR_HAVE_CUDNN_FRONTEND

#include <cudnn_frontend.h>

#include <chrono>
#include <optional>
#include <unordered_map>

#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "cuda/cudnn.hpp"
#include "native/device.hpp"
#include "ops/cudnn_per_device.hpp"

namespace tr::native {

namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;
using Notes = std::vector<fe::NumericalNote_t>;

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t a = 0, b = 0, out = 0;  // uids: (x, w, y), (dy, w, dx), (dy, x, dw)
  ConvPlanRecord record;               // its key, engine (the frontend's plan name), source, workspace
};

std::mutex g_mutex;
std::map<std::string, std::shared_ptr<Plan>> g_plans;
CudnnPerDevice g_cudnn;  // the handles and the shared workspace (under g_mutex)
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

std::int64_t workspace_cap() { return static_cast<std::int64_t>(workspace_cap_mb()) << 20; }

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

// The in-process plan map's key: the plan key on one device, with how its engine is chosen.
std::string key_of(int device, const std::string& plan_key, const ConvChoice& c, const std::string& pin) {
  return std::to_string(device) + ":" + plan_key + (c.autotune ? ":tuned" : "") + (pin.empty() ? "" : ":pin=" + pin);
}

// The plan's key in the cache file (per GPU model): the plan key and the workspace cap (a larger one may admit
// a faster engine). Only autotuning reads or writes the file.
std::string cache_key(const std::string& plan_key) {
  return plan_key + ":ws" + std::to_string(workspace_cap_mb()) + "M";
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

// Rebuilds `engine` from its id and knobs when the heuristics do not list it (another cuDNN, other heuristics):
// appended to the graph's candidates, filtered like the others, built. Its index in `index`.
bool replay_engine(fe::graph::Graph& graph, const std::string& engine, const Notes& notes, std::int64_t& index,
                   std::string& why) {
#if CUDNN_FRONTEND_VERSION >= 13200
  std::int64_t id = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> raw;
  if (!plan_cache::parse_engine_name(engine, id, raw)) {
    why = "not a cuDNN frontend engine name";
    return false;
  }
  std::unordered_map<fe::KnobType_t, std::int64_t> knobs;
  for (const auto& [type, value] : raw) {
    const fe::KnobType_t t = fe::convert_from_backend_knob_type(static_cast<cudnnBackendKnobType_t>(type));
    if (t == fe::KnobType_t::NOT_SET) {
      why = "its knob type " + std::to_string(type) + " is unknown to this cuDNN";
      return false;
    }
    knobs[t] = value;
  }
  index = graph.get_execution_plan_count();
  if (auto e = graph.create_execution_plan(id, knobs); e.is_bad()) {
    why = "cuDNN cannot make engine " + std::to_string(id) + " with these knobs for this convolution: " +
          e.get_message();
    return false;
  }
  graph.deselect_numeric_notes(notes);  // the appended candidate is filtered like the heuristics' ones
  if (auto e = graph.build_plan_at_index(index); e.is_bad()) {
    why = "it is deselected by tr's filters or failed to build: " + e.get_message();
    return false;
  }
  return true;
#else
  (void)graph, (void)engine, (void)notes, (void)index;
  why = "the heuristics do not offer it, and this build's cuDNN frontend (" + std::to_string(CUDNN_FRONTEND_VERSION) +
        ") cannot rebuild an engine from its name (1.32 can)";
  return false;
#endif
}

// Builds exactly `engine`, if the heuristics offer it (its position in `rank`) or, with `replay`, from its id and
// knobs; it must pass the filters set on `graph` (determinism, FP32, workspace) as a searched engine must.
// False with `why` if not.
bool build_named(fe::graph::Graph& graph, std::int64_t count, const std::string& engine, bool replay,
                 const Notes& notes, int& rank, std::string& why) {
  rank = -1;
  std::int64_t index = -1;
  for (std::int64_t i = 0; i < count && index < 0; ++i) {
    std::string name;
    if (graph.get_plan_name_at_index(i, name).is_good() && name == engine) index = i;
  }
  if (index >= 0) {
    if (auto e = graph.build_plan_at_index(index); e.is_bad()) {  // refuses a deselected engine
      why = "it is deselected by tr's filters or failed to build: " + e.get_message();
      return false;
    }
    rank = static_cast<int>(index);
  } else if (!replay) {
    why = "the heuristics no longer offer it among their " + std::to_string(count) + " engines";
    return false;
  } else if (!replay_engine(graph, engine, notes, index, why)) {
    return false;
  }
  std::string built;  // the candidate now selected, what get_workspace_size and execute use
  if (graph.get_plan_name(built).is_bad() || built != engine) {
    why = "the plan built is '" + built + "'";
    return false;
  }
  return true;
}

// The error for a pinned engine that cannot run here, naming the convolution and this machine.
[[noreturn]] void refuse_pin(int device, const std::string& plan_key, const std::string& pin, const std::string& why) {
  const DeviceProperties p = device_properties(device);
  fail(ErrorKind::BadArgument,
       "cuDNN conv " + plan_key + ": the pinned engine '" + pin + "' cannot run here (" + why + "; this machine: " +
           p.name + " sm" + std::to_string(p.major) + std::to_string(p.minor) + ", cuDNN " +
           std::to_string(cuda::cudnn().version) + ", frontend " + std::to_string(CUDNN_FRONTEND_VERSION) +
           "). Pins come from a recorded run (tr.task.engines.pin); unpin to let tr choose (other bytes then)");
}

// Runs the plan once, outside any stream capture, with the device idle first (as autotuning leaves it): the
// shared workspace and `pout` are ours meanwhile.
bool warm_up(Context& ctx, cudnnHandle_t handle, const Plan& plan, const void* pa, const void* pb, void* pout,
             std::string& why) {
  cuda::check(cudaDeviceSynchronize(), "cuDNN conv warm-up");
  cudaStream_t s = ctx.stream(1);
  if (fe::detail::set_stream(handle, s) != CUDNN_STATUS_SUCCESS) fail(ErrorKind::Backend, "cudnnSetStream failed");
  auto ws = g_cudnn.workspace(ctx.device(), static_cast<std::size_t>(plan.record.workspace));
  std::unordered_map<std::int64_t, void*> ptrs{
      {plan.a, const_cast<void*>(pa)}, {plan.b, const_cast<void*>(pb)}, {plan.out, pout}};
  if (auto e = plan.graph->execute(handle, ptrs, ws ? ws->get() : nullptr); e.is_bad()) {
    why = "cuDNN conv " + plan.record.key + " first execution (" + plan.record.engine + "): " + e.get_message();
    return false;
  }
  cuda::check(cudaStreamSynchronize(s), "cuDNN conv warm-up");
  return true;
}

// Builds (or finds) the plan. `ptrs` (a, b, out) are real buffers of the right sizes, used to time candidates
// and to run the plan once. Returns nullptr with `why` when cuDNN has no deterministic engine; a pinned engine
// that cannot run is an error.
std::shared_ptr<Plan> plan_for(Context& ctx, ConvDir d, const ConvGeo& g, DT adt, DT bdt, DT odt, const void* pa,
                               const void* pb, void* pout, const ConvChoice& choice, std::string& why) {
  for (DT t : {adt, bdt, odt}) {
    if (fe_type(t) == fe::DataType_t::NOT_SET) {
      why = std::string("cuDNN takes FP32/FP16/BF16 convolutions, not ") + dtype_name(t);
      return nullptr;
    }
  }
  const int device = ctx.device();
  const std::string pkey = conv_plan_key(d, g, adt, bdt, odt, choice.tf32);
  const std::string pin = conv_pin(pkey);
  const std::string key = key_of(device, pkey, choice, pin);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto it = g_plans.find(key); it != g_plans.end()) return it->second;
  AddTime total(g_stats.seconds);
  std::optional<AddTime> building(std::in_place, g_stats.build_seconds);  // until the engines are built
  cuda::cudnn();  // throws DeviceUnavailable when the library is missing
  cudnnHandle_t handle = g_cudnn.handle(device);
  cuda::DeviceGuard guard(device);

  auto graph = std::make_shared<fe::graph::Graph>();
  const bool all_fp32 = adt == DT::F32 && bdt == DT::F32 && odt == DT::F32;
  graph->set_io_data_type(fe_type(odt))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto plan = std::make_shared<Plan>();
  ConvPlanRecord& rec = plan->record;
  rec.key = pkey;
  rec.direction = conv_dir_name(d);
  TensorPtr A, B, O;
  const std::vector<std::int64_t> pad{g.ph, g.pw}, stride{g.sh, g.sw}, dil{1, 1};
  const int cg = g.c / g.groups;  // the weights' channels: cuDNN infers the group count as c / cg
  if (d == ConvDir::Fwd) {
    A = tensor(*graph, "x", g.n, g.c, g.h, g.w, adt);
    B = tensor(*graph, "w", g.k, cg, g.r, g.s, bdt);
    O = graph->conv_fprop(A, B, fe::graph::Conv_fprop_attributes().set_padding(pad).set_stride(stride).set_dilation(dil));
    output(O, g.n, g.k, g.p, g.q, odt);
  } else if (d == ConvDir::Dgrad) {
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
    why = std::string("cuDNN conv ") + rec.direction + " " + step + ": " + e.get_message();
    return true;
  };
  if (bad(graph->validate(), "validate") || bad(graph->build_operation_graph(handle), "build_operation_graph") ||
      bad(graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "heuristics")) {
    if (!pin.empty()) refuse_pin(device, pkey, pin, why);
    return nullptr;
  }
  Notes notes{fe::NumericalNote_t::NONDETERMINISTIC, fe::NumericalNote_t::REDUCED_PRECISION_REDUCTION};
  if (all_fp32 && !choice.tf32) {  // FP32 means FP32: no TF32 tensor cores, no FFT/Winograd transforms
    using N = fe::NumericalNote_t;
    for (N n : {N::TENSOR_CORE, N::DOWN_CONVERT_INPUTS, N::FFT, N::WINOGRAD,
                N::WINOGRAD_TILE_4x4, N::WINOGRAD_TILE_6x6, N::WINOGRAD_TILE_13x13}) {
      notes.push_back(n);
    }
  }
  graph->deselect_numeric_notes(notes);
  graph->deselect_workspace_greater_than(workspace_cap());
  const std::int64_t count = graph->get_execution_plan_count();
  // only autotuning reads or writes the cache: the default rule and pins never depend on a file
  plan_cache::File* cache = choice.autotune && pin.empty() ? cache_for(device) : nullptr;
  const std::string ckey = cache != nullptr ? cache_key(pkey) : std::string();
  bool chosen = false;  // one engine built and selected: nothing to search or time
  if (!pin.empty()) {
    std::string not_here;
    if (!build_named(*graph, count, pin, true, notes, rec.rank, not_here)) refuse_pin(device, pkey, pin, not_here);
    rec.source = "pinned";
    ++g_stats.pinned;
    chosen = true;
  } else if (std::string cached; cache != nullptr && cache->lookup(ckey, cached)) {
    std::string stale;
    chosen = build_named(*graph, count, cached, false, notes, rec.rank, stale);
    if (chosen) {
      rec.source = "cache";
      ++g_stats.cache_hits;
    } else {
      ++g_stats.cache_stale;
      plan_cache::warn("cuDNN plan cache " + cache->path() + ": engine '" + cached + "' cached for " + ckey +
                       " is not used (" + stale + "); searching again");
    }
  } else if (cache != nullptr) {
    ++g_stats.cache_misses;
  }
  int built = chosen ? 1 : 0;
  std::map<std::string, int> built_at;  // searched candidates: name -> position in the heuristics' list
  std::string failures;
  for (std::int64_t i = 0; !chosen && i < count && built < (choice.autotune ? kCandidates : 1); ++i) {
    auto e = graph->build_plan_at_index(i);
    if (e.is_good()) {
      ++built;
      std::string name;
      if (graph->get_plan_name_at_index(i, name).is_good()) built_at.emplace(name, static_cast<int>(i));
    } else if (failures.size() < 600) {
      failures += "\n  engine " + std::to_string(i) + ": " + e.get_message();
    }
  }
  g_stats.plans_built += built;
  building.reset();
  if (built == 0) {
    why = std::string("cuDNN conv ") + rec.direction + ": no deterministic engine" +
          (all_fp32 && !choice.tf32 ? " without TF32" : "") + " among " + std::to_string(count) + failures;
    return nullptr;
  }
  plan->a = A->get_uid();
  plan->b = B->get_uid();
  plan->out = O->get_uid();
  if (!chosen) rec.source = "heuristic";  // the first that built (alone, or before timing)
  if (!chosen && choice.autotune && built > 1) {
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
    rec.source = "timed";
    rec.timed = built;
  }
  if (bad(graph->get_workspace_size(rec.workspace), "workspace size") ||
      bad(graph->get_plan_name(rec.engine), "plan name")) {
    return nullptr;
  }
  if (!chosen) {
    auto at = built_at.find(rec.engine);
    rec.rank = at != built_at.end() ? at->second : -1;
  }
  plan->graph = graph;
  // timed candidates ran already; any other plan runs once now, so that no first execution is captured
  if (rec.source != "timed" && !warm_up(ctx, handle, *plan, pa, pb, pout, why)) {
    if (!pin.empty()) refuse_pin(device, pkey, pin, why);
    return nullptr;
  }
  // a lone buildable candidate is stored too: next time the others are not tried
  if (cache != nullptr && rec.source != "cache") cache->store(ckey, rec.engine);
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
    if (e.is_bad()) fail(ErrorKind::Backend, "cuDNN conv execute (" + plan->record.engine + "): " + e.get_message());
  }
};

Exec exec_of(Context& ctx, const std::shared_ptr<Plan>& plan, const void* a, const void* b, void* out) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Exec e{plan, g_cudnn.workspace(ctx.device(), static_cast<std::size_t>(plan->record.workspace)),
         g_cudnn.handle(ctx.device()),
         {}};
  e.ptrs = {{plan->a, const_cast<void*>(a)}, {plan->b, const_cast<void*>(b)}, {plan->out, out}};
  return e;
}

}  // namespace

CudnnPlanStats cudnn_plan_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_stats;
}

CudnnConvSettings cudnn_conv_settings() { return {CUDNN_FRONTEND_VERSION, workspace_cap_mb(), kCandidates}; }

bool cudnn_plan_record(int device, ConvDir d, const ConvGeo& g, DT a, DT b, DT out, const ConvChoice& choice,
                       ConvPlanRecord& out_record) {
  const std::string pkey = conv_plan_key(d, g, a, b, out, choice.tf32);
  const std::string key = key_of(device, pkey, choice, conv_pin(pkey));
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_plans.find(key);
  if (it == g_plans.end()) return false;
  out_record = it->second->record;
  return true;
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
  auto plan = plan_for(ctx, ConvDir::Fwd, g, xdt, xdt, ydt, x, w, y, choice, why);
  if (plan == nullptr) return nullptr;
  Exec e = exec_of(ctx, plan, x, w, y);
  return fn_op(std::move(e), "cudnn fprop " + plan->record.engine);
}

std::unique_ptr<Op> cudnn_conv_bwd(Context& ctx, const ConvGeo& g, DT xdt, DT dydt, DT dwdt, DT dxdt, const void* x,
                                   const void* w, const void* dy, void* dw, void* dx, const ConvChoice& choice,
                                   std::string& why) {
  auto wplan = plan_for(ctx, ConvDir::Wgrad, g, dydt, xdt, dwdt, dy, x, dw, choice, why);
  if (wplan == nullptr) return nullptr;
  std::shared_ptr<Plan> dplan;
  if (dx != nullptr) {
    dplan = plan_for(ctx, ConvDir::Dgrad, g, dydt, xdt, dxdt, dy, w, dx, choice, why);
    if (dplan == nullptr) return nullptr;
  }
  Exec we = exec_of(ctx, wplan, dy, x, dw);
  std::string info = "cudnn wgrad " + wplan->record.engine;
  if (dplan == nullptr) return fn_op(std::move(we), info);
  Exec de = exec_of(ctx, dplan, dy, w, dx);
  info += ", dgrad " + dplan->record.engine;
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

CudnnConvSettings cudnn_conv_settings() { return {0, workspace_cap_mb(), kCandidates}; }

bool cudnn_plan_record(int, ConvDir, const ConvGeo&, DT, DT, DT, const ConvChoice&, ConvPlanRecord&) { return false; }

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
