// Multi-head self-attention through cuDNN's SDPA graphs (the frontend's flash attention forward and backward,
// FP16/BF16 in, FP32 softmax and accumulation), with csrc/ops/attention.cu's kernels where cuDNN cannot take a
// call. Host code only (the cuDNN frontend, like csrc/ops/conv_cudnn.cpp); see ops/attention_sdpa.hpp.
//
// Layout, no copies: qkv [N, T, 3D] holds per token [q | k | v], head h on channels h*dh .. (h+1)*dh of each
// third, so Q, K and V are the BHSD views dims [N, heads, T, dh], strides [T*3D, dh, 3D, 1] at qkv, qkv + D and
// qkv + 2D; O (y) and dO (dy) are [N, heads, T, dh] with strides [T*D, dh, D, 1]; dQ, dK, dV are written in place
// into dqkv like Q, K, V. Stats is cuDNN's FP32 [N, heads, T, 1], strides [heads*T, T, 1, 1]: the bytes of tr's
// stats [N, 1, heads, T], and the same quantity, each softmax row's natural-log log-sum-exp of the scaled scores
// (max + ln(sum exp(s - max)); the frontend's default, stats_use_log2 off). So a forward here and a backward by
// the kernels (or the CPU backend) are interchangeable, and the other way round.
//
// One frontend graph per (device, plan key: direction, dtype, sizes, strides, stats, deterministic, the scale's
// bits), built when the op is made (at capture, i.e. at compile) and shared by every op of that key; a key cuDNN
// cannot take (graph validation, no engine, no library) is remembered with the reason and the op runs tr's
// kernels, the reason in its info and its plan record. Which engine: the heuristics' (modes A, then FALLBACK)
// first that builds, untimed, as convolutions' default rule: a function of the GPU model, the cuDNN and frontend
// versions and the key, so two machines of one model choose alike. The backward asks for cuDNN's deterministic
// algorithm unless the op's record opts out (CudaBackend.configure(attention_deterministic=False)), and then
// deselects engines noted NONDETERMINISTIC; the forward has no such option (its query blocks do not share sums;
// tests/test_cuda_attention_sdpa.py checks that its bytes repeat).
//
// The frontend's dynamic-loading shim would otherwise open libcudart itself: the SM version is given (not queried)
// and CUDA-graph retention is off (the op holds its plan as long as any graph captured with it), so no frontend
// call needs a second CUDA runtime. Every plan runs once when it is made, outside any capture, the device idle;
// execution is one cudnnBackendExecute on the op's stream, legal inside a stream capture.
//
// Workspace: one buffer per device shared by all SDPA ops, sized when a plan is made (at compile) and grown by
// replacement (graphs captured with the old one keep it alive); nothing is allocated at step time. Two SDPA ops
// must not run at the same time on different streams (the step's parallel branches never hold two).
#include "ops/attention_sdpa.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "cuda/context.hpp"
#include "cuda/cudnn.hpp"
#include "native/errors.hpp"
#include "ops/args/attention.hpp"
#include "ops/args/attention_sdpa.hpp"
#include "ops/dtype.hpp"
#include "ops/op.hpp"

#ifdef TR_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>

#include <unordered_map>
#include <vector>

#include "cuda/check.hpp"
#include "native/device.hpp"
#include "ops/cudnn_per_device.hpp"
#endif

namespace tr::native {

namespace {

// One op's sizes and dtype, checked as attention.cu checks its records.
struct Call {
  SdpaShape s;
  std::int64_t d = 0;  // D = heads * dh
  DT dt = DT::F32;
  float scale = 0.0f;
};

template <class A>
Call call_of(const A& a, std::initializer_list<std::pair<const char*, Dev>> same) {
  if (a.n < 1 || a.t < 1 || a.d < 1 || a.heads < 1 || a.d % a.heads != 0) {
    bad(a, "sizes n=" + std::to_string(a.n) + " t=" + std::to_string(a.t) + " d=" + std::to_string(a.d) +
               " heads=" + std::to_string(a.heads) + " must be positive, heads dividing d");
  }
  if (!(std::isfinite(a.scale) && a.scale > 0.0)) bad(a, "scale=" + std::to_string(a.scale) + " must be finite and > 0");
  for (const auto& [name, t] : same) {
    if (t.dt != a.qkv.dt) {
      bad(a, std::string(name) + " is " + dtype_name(t.dt) + " but qkv is " + dtype_name(a.qkv.dt));
    }
  }
  if (a.stats && a.stats.dt != DT::F32) bad(a, std::string("stats must be FP32, got ") + dtype_name(a.stats.dt));
  Call c;
  c.s = {a.n, a.t, a.heads, a.d / a.heads};
  c.d = a.d;
  c.dt = a.qkv.dt;
  c.scale = static_cast<float>(a.scale);
  return c;
}

Call call_of(const AttentionSdpaFwdArgs& a) { return call_of(a, {{"y", a.y}}); }
Call call_of(const AttentionSdpaBwdArgs& a) { return call_of(a, {{"y", a.y}, {"dy", a.dy}, {"dqkv", a.dqkv}}); }

std::string strides(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  return std::to_string(a) + "," + std::to_string(b) + "," + std::to_string(c) + "," + std::to_string(d);
}

std::string key_of(const AttentionSdpaFwdArgs& a) {
  const Call c = call_of(a);
  return sdpa_plan_key(false, c.dt, c.s, static_cast<bool>(a.stats), false, c.scale);
}

std::string key_of(const AttentionSdpaBwdArgs& a) {
  const Call c = call_of(a);
  return sdpa_plan_key(true, c.dt, c.s, true, a.deterministic, c.scale);
}

// The same call for tr's kernels (attention.cu), field by field: fields the kernels' records gain keep their
// defaults.
AttentionFwdArgs kernel_args(const AttentionSdpaFwdArgs& a) {
  AttentionFwdArgs k;
  k.qkv = a.qkv;
  k.y = a.y;
  k.stats = a.stats;
  k.n = a.n;
  k.t = a.t;
  k.d = a.d;
  k.heads = a.heads;
  k.scale = a.scale;
  return k;
}

AttentionBwdArgs kernel_args(const AttentionSdpaBwdArgs& a) {
  AttentionBwdArgs k;
  k.qkv = a.qkv;
  k.y = a.y;
  k.dy = a.dy;
  k.stats = a.stats;
  k.dqkv = a.dqkv;
  k.n = a.n;
  k.t = a.t;
  k.d = a.d;
  k.heads = a.heads;
  k.scale = a.scale;
  return k;
}

std::unique_ptr<Op> kernel_op(Context& ctx, const AttentionFwdArgs& k) { return attention_fwd(ctx, k); }
std::unique_ptr<Op> kernel_op(Context& ctx, const AttentionBwdArgs& k) { return attention_bwd(ctx, k); }

// tr's kernels for a call cuDNN cannot take (`why`); where the kernels refuse it too (a T whose scores do not fit
// shared memory), the error says why neither can run it.
template <class A>
std::unique_ptr<Op> kernels(Context& ctx, const A& args, const std::string& why) {
  std::unique_ptr<Op> op;
  try {
    op = kernel_op(ctx, kernel_args(args));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadArgument) throw;
    bad(args, std::string("neither engine can run it: cuDNN's SDPA: ") + why + "; tr's kernels: " + e.what());
  }
  op->info = "tr kernels (cuDNN: " + why + "): " + op->info;
  return op;
}

std::mutex g_mutex;  // the plans, handles and workspaces below

}  // namespace

std::string sdpa_plan_key(bool backward, DT dt, const SdpaShape& s, bool stats, bool deterministic, float scale) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &scale, sizeof bits);
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%08x", bits);
  const std::int64_t d = s.heads * s.dh;
  std::string key = std::string(backward ? "bprop" : "fprop") + ":" + dtype_name(dt) + ":n" + std::to_string(s.n) +
                    ":t" + std::to_string(s.t) + ":h" + std::to_string(s.heads) + ":d" + std::to_string(s.dh) +
                    ":qkv=" + strides(s.t * 3 * d, s.dh, 3 * d, 1) + ":o=" + strides(s.t * d, s.dh, d, 1);
  key += backward ? std::string(":det=") + (deterministic ? "1" : "0") : std::string(":stats=") + (stats ? "1" : "0");
  return key + ":scale=" + hex;
}

}  // namespace tr::native

#ifdef TR_HAVE_CUDNN_FRONTEND

namespace tr::native {

namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// the uids of the graphs' tensors (the variant pack's keys)
enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// A key's plan: cuDNN's graph, or none (tr's kernels) with the reason in its record.
struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN cannot take the key (record.note says why)
  SdpaPlanRecord record;
};

std::map<std::string, std::shared_ptr<Plan>> g_plans;  // "<device>:<plan key>"
CudnnPerDevice g_cudnn;  // the handles and the shared workspace (under g_mutex)

// A [N, heads, T, dh] view of rows of `row` elements (3D for qkv and dqkv, D for y and dy).
fe::graph::Tensor_attributes bhsd(const char* name, Uid uid, const SdpaShape& s, std::int64_t row, DT dt) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({s.n, s.heads, s.t, s.dh})
      .set_stride({s.t * row, s.dh, row, 1})
      .set_data_type(dt == DT::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF);
}

void as_bhsd(const TensorPtr& t, Uid uid, const SdpaShape& s, std::int64_t row, DT dt) {
  t->set_output(true)
      .set_uid(uid)
      .set_dim({s.n, s.heads, s.t, s.dh})
      .set_stride({s.t * row, s.dh, row, 1})
      .set_data_type(dt == DT::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF);
}

fe::graph::Tensor_attributes stats_tensor(const SdpaShape& s) {
  return fe::graph::Tensor_attributes()
      .set_name("stats")
      .set_uid(kStats)
      .set_dim({s.n, s.heads, s.t, 1})
      .set_stride({s.heads * s.t, s.t, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

// The graph of one key, its nodes added (not yet validated).
std::shared_ptr<fe::graph::Graph> make_graph(int device, bool backward, const Call& c, bool stats, bool det) {
  auto graph = std::make_shared<fe::graph::Graph>();
  const DeviceProperties p = device_properties(device);
  graph->set_io_data_type(c.dt == DT::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT)
      .set_sm_version(p.major * 10 + p.minor);  // given: the frontend would query it through its own libcudart
#if CUDNN_FRONTEND_VERSION >= 13200
  // no CUDA user objects (again through its libcudart): each op keeps its plan alive as long as its graphs
  graph->set_cuda_graph_retention(fe::CudaGraphRetention_t::NONE);
#endif
  const std::int64_t d3 = 3 * c.d;
  auto Q = graph->tensor(bhsd("Q", kQ, c.s, d3, c.dt));
  auto K = graph->tensor(bhsd("K", kK, c.s, d3, c.dt));
  auto V = graph->tensor(bhsd("V", kV, c.s, d3, c.dt));
  if (!backward) {
    auto opts = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(stats).set_attn_scale(c.scale);
    auto [O, Stats] = graph->sdpa(Q, K, V, std::move(opts));
    as_bhsd(O, kO, c.s, c.d, c.dt);
    if (stats) {
      Stats->set_output(true)
          .set_uid(kStats)
          .set_dim({c.s.n, c.s.heads, c.s.t, 1})
          .set_stride({c.s.heads * c.s.t, c.s.t, 1, 1})
          .set_data_type(fe::DataType_t::FLOAT);
    }
    return graph;
  }
  auto O = graph->tensor(bhsd("O", kO, c.s, c.d, c.dt));
  auto dO = graph->tensor(bhsd("dO", kDO, c.s, c.d, c.dt));
  auto Stats = graph->tensor(stats_tensor(c.s));
  auto opts = fe::graph::SDPA_backward_attributes()
                  .set_name("attention_backward")
                  .set_attn_scale(c.scale)
                  .set_deterministic_algorithm(det);
  auto [dQ, dK, dV] = graph->sdpa_backward(Q, K, V, O, dO, Stats, std::move(opts));
  as_bhsd(dQ, kDQ, c.s, d3, c.dt);
  as_bhsd(dK, kDK, c.s, d3, c.dt);
  as_bhsd(dV, kDV, c.s, d3, c.dt);
  return graph;
}

// An op's device pointers by uid: K and V (dK, dV) are qkv's (dqkv's) second and third thirds.
std::unordered_map<std::int64_t, void*> pointers(const Call& c, const AttentionSdpaFwdArgs& a) {
  char* qkv = static_cast<char*>(a.qkv.ptr);
  const std::int64_t third = c.d * dtype_size(c.dt);
  std::unordered_map<std::int64_t, void*> p{{kQ, qkv}, {kK, qkv + third}, {kV, qkv + 2 * third}, {kO, a.y.ptr}};
  if (a.stats) p[kStats] = a.stats.ptr;
  return p;
}

std::unordered_map<std::int64_t, void*> pointers(const Call& c, const AttentionSdpaBwdArgs& a) {
  char* qkv = static_cast<char*>(a.qkv.ptr);
  char* dqkv = static_cast<char*>(a.dqkv.ptr);
  const std::int64_t third = c.d * dtype_size(c.dt);
  return {{kQ, qkv},   {kK, qkv + third},   {kV, qkv + 2 * third},   {kO, a.y.ptr},          {kDO, a.dy.ptr},
          {kDQ, dqkv}, {kDK, dqkv + third}, {kDV, dqkv + 2 * third}, {kStats, a.stats.ptr}};
}

// Runs a new plan once, outside any stream capture, with the device idle (the shared workspace and the op's
// outputs are ours meanwhile): whatever cuDNN does on a plan's first execution never lands in a capture.
std::string warm_up(Context& ctx, cudnnHandle_t handle, const Plan& plan, std::unordered_map<std::int64_t, void*>& ptrs,
                    void* workspace) {
  cuda::check(cudaDeviceSynchronize(), "cuDNN SDPA warm-up");
  cudaStream_t s = ctx.stream(1);
  if (fe::detail::set_stream(handle, s) != CUDNN_STATUS_SUCCESS) fail(ErrorKind::Backend, "cudnnSetStream failed");
  if (auto e = plan.graph->execute(handle, ptrs, workspace); e.is_bad()) {
    return "its first execution (" + plan.record.engine + ") failed: " + e.get_message();
  }
  cuda::check(cudaStreamSynchronize(s), "cuDNN SDPA warm-up");
  return "";
}

// The plan of `args`' key on the context's device: made now (graph, engine, workspace, one run) or found.
template <class A>
std::shared_ptr<Plan> plan_for(Context& ctx, const A& args, bool backward, bool stats, bool det) {
  const Call c = call_of(args);
  const int device = ctx.device();
  const std::string pkey = sdpa_plan_key(backward, c.dt, c.s, stats, det, c.scale);
  const std::string key = std::to_string(device) + ":" + pkey;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto it = g_plans.find(key); it != g_plans.end()) return it->second;
  auto plan = std::make_shared<Plan>();
  SdpaPlanRecord& rec = plan->record;
  rec.key = pkey;
  rec.deterministic = backward && det;
  auto refuse = [&](const std::string& why) {  // tr's kernels, remembered for every op of the key
    plan->graph = nullptr;
    rec.engine = "kernel";
    rec.note = why;
    rec.workspace = 0;
    g_plans[key] = plan;
    return plan;
  };
  if (c.dt != DT::F16 && c.dt != DT::BF16) {
    return refuse(std::string("cuDNN's SDPA takes FP16 and BF16, not ") + dtype_name(c.dt));
  }
  try {
    cuda::cudnn();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::DeviceUnavailable) throw;
    return refuse(e.what());
  }
  const char* dir = backward ? "backward" : "forward";
  cudnnHandle_t handle = g_cudnn.handle(device);
  cuda::DeviceGuard guard(device);
  try {
    plan->graph = make_graph(device, backward, c, stats, det);
    fe::graph::Graph& graph = *plan->graph;
    auto bad_step = [&](fe::error_t e, const char* step) {
      return e.is_good() ? std::string() : std::string(dir) + " " + step + ": " + e.get_message();
    };
    std::string why = bad_step(graph.validate(), "validate");
    if (why.empty()) why = bad_step(graph.build_operation_graph(handle), "build_operation_graph");
    if (why.empty()) why = bad_step(graph.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                                    "heuristics");
    if (!why.empty()) return refuse(why);
    if (backward && det) graph.deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
    const std::int64_t count = graph.get_execution_plan_count();
    std::string failures;
    bool built = false;
    for (std::int64_t i = 0; !built && i < count; ++i) {  // the rule: the first that builds, untimed
      auto e = graph.build_plan_at_index(i);
      built = e.is_good();
      if (!built && failures.size() < 600) failures += "; engine " + std::to_string(i) + ": " + e.get_message();
    }
    if (!built) {
      return refuse(std::string(dir) + ": no engine" + (backward && det ? " (deterministic)" : "") + " builds among " +
                    std::to_string(count) + failures);
    }
    if (!(why = bad_step(graph.get_workspace_size(rec.workspace), "workspace size")).empty() ||
        !(why = bad_step(graph.get_plan_name(rec.engine), "plan name")).empty()) {
      return refuse(why);
    }
    std::shared_ptr<DeviceBuffer> ws;
    try {
      ws = g_cudnn.workspace(device, static_cast<std::size_t>(rec.workspace));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::OutOfMemory) throw;
      fail(ErrorKind::OutOfMemory, "native op " + std::string(A::op) + ": cuDNN's SDPA " + dir + " (" + rec.engine +
                                       ") needs a workspace of " + std::to_string(rec.workspace) + " bytes" +
                                       (backward && det ? " (the deterministic backward's grows with N * heads * T^2)"
                                                        : "") + ": " + e.what());
    }
    auto ptrs = pointers(c, args);
    why = warm_up(ctx, handle, *plan, ptrs, ws ? ws->get() : nullptr);
    if (!why.empty()) return refuse(std::string(dir) + ": " + why);
  } catch (const Error&) {
    throw;  // tr's own failures (a CUDA error, memory) are errors, not a reason to switch engines
  } catch (const std::exception& e) {  // the frontend throws for what it cannot load or do
    return refuse(std::string(dir) + ": " + e.what());
  }
  g_plans[key] = plan;
  return plan;
}

// Executes one plan on a stream; the op keeps the plan and the workspace alive.
struct Exec {
  std::shared_ptr<Plan> plan;
  std::shared_ptr<DeviceBuffer> workspace;
  cudnnHandle_t handle = nullptr;
  std::unordered_map<std::int64_t, void*> ptrs;

  void operator()(cudaStream_t s) {
    if (fe::detail::set_stream(handle, s) != CUDNN_STATUS_SUCCESS) fail(ErrorKind::Backend, "cudnnSetStream failed");
    auto e = plan->graph->execute(handle, ptrs, workspace ? workspace->get() : nullptr);
    if (e.is_bad()) fail(ErrorKind::Backend, "cuDNN SDPA execute (" + plan->record.engine + "): " + e.get_message());
  }
};

template <class A>
std::unique_ptr<Op> make(Context& ctx, const A& args, bool backward, bool stats, bool det) {
  auto plan = plan_for(ctx, args, backward, stats, det);
  if (plan->graph == nullptr) return kernels(ctx, args, plan->record.note);
  Exec e;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    e = Exec{plan, g_cudnn.workspace(ctx.device(), static_cast<std::size_t>(plan->record.workspace)),
             g_cudnn.handle(ctx.device()), pointers(call_of(args), args)};
  }
  std::string info = std::string("cudnn sdpa ") + (backward ? "bprop " : "fprop ") + plan->record.engine +
                     (backward ? (det ? ", deterministic" : ", NONDETERMINISTIC (opted in)") : "") +
                     (stats ? "" : ", no stats") + ", workspace " + std::to_string(plan->record.workspace) + " B";
  return fn_op(std::move(e), std::move(info));
}

bool find(int device, const std::string& pkey, SdpaPlanRecord& out) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_plans.find(std::to_string(device) + ":" + pkey);
  if (it == g_plans.end()) return false;
  out = it->second->record;
  return true;
}

}  // namespace

std::unique_ptr<Op> attention_sdpa_fwd(Context& ctx, const AttentionSdpaFwdArgs& args) {
  return make(ctx, args, false, static_cast<bool>(args.stats), false);
}

std::unique_ptr<Op> attention_sdpa_bwd(Context& ctx, const AttentionSdpaBwdArgs& args) {
  return make(ctx, args, true, true, args.deterministic);
}

bool attention_sdpa_plan(int device, const AttentionSdpaFwdArgs& args, SdpaPlanRecord& out) {
  return find(device, key_of(args), out);
}

bool attention_sdpa_plan(int device, const AttentionSdpaBwdArgs& args, SdpaPlanRecord& out) {
  return find(device, key_of(args), out);
}

}  // namespace tr::native

#else  // built without the cuDNN frontend: every attention op runs tr's kernels

namespace tr::native {

namespace {

constexpr const char* kNoFrontend =
    "tr.backend._native was built without the cuDNN frontend (cudnn_frontend.h and cudnn.h not found)";

std::map<std::string, SdpaPlanRecord> g_records;  // "<device>:<plan key>": what ops were made

template <class A>
std::unique_ptr<Op> make(Context& ctx, const A& args, const std::string& pkey, bool det) {
  SdpaPlanRecord rec;
  rec.key = pkey;
  rec.engine = "kernel";
  rec.note = kNoFrontend;
  rec.deterministic = det;
  auto op = kernels(ctx, args, kNoFrontend);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_records[std::to_string(ctx.device()) + ":" + pkey] = rec;
  return op;
}

bool find(int device, const std::string& pkey, SdpaPlanRecord& out) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_records.find(std::to_string(device) + ":" + pkey);
  if (it == g_records.end()) return false;
  out = it->second;
  return true;
}

}  // namespace

std::unique_ptr<Op> attention_sdpa_fwd(Context& ctx, const AttentionSdpaFwdArgs& args) {
  return make(ctx, args, key_of(args), false);
}

std::unique_ptr<Op> attention_sdpa_bwd(Context& ctx, const AttentionSdpaBwdArgs& args) {
  return make(ctx, args, key_of(args), args.deterministic);
}

bool attention_sdpa_plan(int device, const AttentionSdpaFwdArgs& args, SdpaPlanRecord& out) {
  return find(device, key_of(args), out);
}

bool attention_sdpa_plan(int device, const AttentionSdpaBwdArgs& args, SdpaPlanRecord& out) {
  return find(device, key_of(args), out);
}

}  // namespace tr::native

#endif
