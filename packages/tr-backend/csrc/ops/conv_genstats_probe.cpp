// conv + genstats and scale-bias-relu-conv-genstats measured against the plain convolution (ops/conv_genstats_probe.hpp).
// Host code only (the cuDNN frontend, like csrc/ops/conv_cudnn.cpp). Its buffers are freed when it returns (its cuDNN
// handle and workspace stay for the next probe); it runs outside any capture, the device synchronised around each
// measurement. Not thread-safe: one probe at a time.
#include "ops/conv_genstats_probe.hpp"

#include <string>

#include "native/errors.hpp"

#ifdef TR_HAVE_CUDNN_FRONTEND
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "cuda/cudnn.hpp"
#include "native/device.hpp"
#include "ops/cudnn_per_device.hpp"
#include "ops/op.hpp"

namespace tr::native {

namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

enum Uid : std::int64_t { kX = 1, kW, kScale, kBias, kY, kSum, kSqSum };

// NHWC (KRSC) memory in cuDNN's NCHW dimension order
fe::graph::Tensor_attributes nhwc(const char* name, Uid uid, std::int64_t n, std::int64_t c, std::int64_t h,
                                  std::int64_t w, fe::DataType_t dt) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({n, c, h, w})
      .set_stride({h * w * c, 1, w * c, c})
      .set_data_type(dt);
}

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;
  std::string engine, note;
  std::int64_t plans = 0, rank = -1;  // candidates offered; the chosen one's place among them
  std::int64_t workspace = 0;
};

// The graph of the shape: conv alone, or (scale-bias-relu)-conv-genstats; the rule's engine built.
Built build(cudnnHandle_t handle, const DeviceProperties& p, const GenstatsProbeShape& g, bool fused,
            std::int64_t out_h, std::int64_t out_w) {
  Built b;
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT)
      .set_sm_version(p.major * 10 + p.minor);
  TensorPtr x = graph->tensor(nhwc("x", kX, g.n, g.c, g.h, g.w, fe::DataType_t::HALF));
  TensorPtr w = graph->tensor(nhwc("w", kW, g.k, g.c, g.r, g.s, fe::DataType_t::HALF));
  TensorPtr in = x;
  if (fused && g.prologue) {
    using PA = fe::graph::Pointwise_attributes;
    auto scale = graph->tensor(nhwc("scale", kScale, 1, g.c, 1, 1, fe::DataType_t::HALF));
    auto bias = graph->tensor(nhwc("bias", kBias, 1, g.c, 1, 1, fe::DataType_t::HALF));
    in = graph->pointwise(in, scale, PA().set_mode(fe::PointwiseMode_t::MUL));
    in = graph->pointwise(in, bias, PA().set_mode(fe::PointwiseMode_t::ADD));
    in = graph->pointwise(in, PA().set_mode(fe::PointwiseMode_t::RELU_FWD));
  }
  auto y = graph->conv_fprop(in, w, fe::graph::Conv_fprop_attributes()
                                        .set_padding({g.pad, g.pad})
                                        .set_stride({g.stride, g.stride})
                                        .set_dilation({1, 1}));
  y->set_output(true).set_uid(kY).set_dim({g.n, g.k, out_h, out_w})
      .set_stride({out_h * out_w * g.k, 1, out_w * g.k, g.k}).set_data_type(fe::DataType_t::HALF);
  if (fused) {
    auto [sum, sq] = graph->genstats(y, fe::graph::Genstats_attributes().set_name("genstats"));
    sum->set_output(true).set_uid(kSum).set_data_type(fe::DataType_t::FLOAT);
    sq->set_output(true).set_uid(kSqSum).set_data_type(fe::DataType_t::FLOAT);
  }
  auto bad = [&](fe::error_t e, const char* step) {
    if (e.is_good()) return false;
    b.note = std::string(step) + ": " + e.get_message();
    return true;
  };
  if (bad(graph->validate(), "validate") || bad(graph->build_operation_graph(handle), "build_operation_graph") ||
      bad(graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "heuristics")) {
    return b;
  }
  b.plans = graph->get_execution_plan_count();
  graph->deselect_numeric_notes(
      {fe::NumericalNote_t::NONDETERMINISTIC, fe::NumericalNote_t::REDUCED_PRECISION_REDUCTION});
  std::string failures;
  for (std::int64_t i = 0; i < b.plans; ++i) {
    auto e = graph->build_plan_at_index(i);
    if (e.is_good()) {
      b.rank = i;
      if (bad(graph->get_plan_name_at_index(i, b.engine), "plan name") ||
          bad(graph->get_workspace_size_plan_at_index(i, b.workspace), "workspace size")) {
        b.engine.clear();
        return b;
      }
      break;  // the rule: the first that builds
    } else if (failures.size() < 400) {
      failures += " [" + std::to_string(i) + "] " + e.get_message();
    }
  }
  if (b.engine.empty()) {
    b.note = "no engine without the NONDETERMINISTIC and REDUCED_PRECISION_REDUCTION notes builds among " +
             std::to_string(b.plans) + ":" + failures;
    return b;
  }
  b.graph = graph;
  return b;
}

std::vector<__half> random_halves(std::size_t count, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<__half> v(count);
  for (auto& e : v) e = __float2half(u(rng));
  return v;
}

struct Buffers {
  std::unique_ptr<DeviceBuffer> x, w, scale, bias, y, sum, sq;
};

double time_ms(cudnnHandle_t handle, fe::graph::Graph& graph, std::unordered_map<std::int64_t, void*>& ptrs,
               void* ws, cudaStream_t s, int reps) {
  if (auto e = graph.execute(handle, ptrs, ws); e.is_bad()) fail(ErrorKind::Backend, "execute: " + e.get_message());
  cuda::check(cudaStreamSynchronize(s), "probe warm-up");
  cudaEvent_t a, b;
  cuda::check(cudaEventCreate(&a), "cudaEventCreate");
  cuda::check(cudaEventCreate(&b), "cudaEventCreate");
  cuda::check(cudaEventRecord(a, s), "cudaEventRecord");
  for (int i = 0; i < reps; ++i) {
    if (auto e = graph.execute(handle, ptrs, ws); e.is_bad()) fail(ErrorKind::Backend, "execute: " + e.get_message());
  }
  cuda::check(cudaEventRecord(b, s), "cudaEventRecord");
  cuda::check(cudaEventSynchronize(b), "cudaEventSynchronize");
  float ms = 0.0f;
  cuda::check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / reps;
}

template <class T>
std::vector<T> download(const DeviceBuffer& d, std::size_t count) {
  std::vector<T> h(count);
  cuda::check(cudaMemcpy(h.data(), d.get(), count * sizeof(T), cudaMemcpyDeviceToHost), "probe download");
  return h;
}

}  // namespace

GenstatsProbeResult conv_genstats_probe(int device, const GenstatsProbeShape& g) {
  if (g.n < 1 || g.c < 2 || g.h < 1 || g.w < 1 || g.k < 2 || g.r < 1 || g.s < 1 || g.stride < 1 || g.pad < 0 ||
      g.reps < 1) {
    fail(ErrorKind::BadArgument, "conv_genstats_probe: sizes must be positive (c, k >= 2), pad >= 0, reps >= 1");
  }
  if (g.c % 2 != 0 || g.k % 2 != 0) {
    fail(ErrorKind::BadArgument, "conv_genstats_probe: cuDNN's fusion needs 32-bit aligned HALF rows: even c and k");
  }
  const std::int64_t p = (g.h + 2 * g.pad - g.r) / g.stride + 1, q = (g.w + 2 * g.pad - g.s) / g.stride + 1;
  if (p < 1 || q < 1) fail(ErrorKind::BadArgument, "conv_genstats_probe: the window is larger than the padded input");
  cuda::cudnn();  // DeviceUnavailable naming every path tried
  require_device(device);
  cuda::DeviceGuard guard(device);
  const DeviceProperties props = device_properties(device);
  static CudnnPerDevice cudnn;  // one handle per device for the process (probes run one at a time)
  cudnnHandle_t handle = cudnn.handle(device);
  cudaStream_t s = nullptr;
  cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  std::unique_ptr<CUstream_st, void (*)(cudaStream_t)> own(s, [](cudaStream_t t) { cudaStreamDestroy(t); });
  if (fe::detail::set_stream(handle, s) != CUDNN_STATUS_SUCCESS) fail(ErrorKind::Backend, "cudnnSetStream failed");

  GenstatsProbeResult r;
  const std::size_t nx = g.n * g.h * g.w * g.c, nw = g.k * g.r * g.s * g.c, ny = g.n * p * q * g.k;
  std::mt19937_64 rng(g.seed);
  Buffers buf;
  buf.x = std::make_unique<DeviceBuffer>(nx * 2);
  buf.w = std::make_unique<DeviceBuffer>(nw * 2);
  buf.y = std::make_unique<DeviceBuffer>(ny * 2);
  buf.sum = std::make_unique<DeviceBuffer>(g.k * 4);
  buf.sq = std::make_unique<DeviceBuffer>(g.k * 4);
  auto up = [](const DeviceBuffer& d, const std::vector<__half>& h) {
    cuda::check(cudaMemcpy(d.get(), h.data(), h.size() * 2, cudaMemcpyHostToDevice), "probe upload");
  };
  up(*buf.x, random_halves(nx, rng, -1.0f, 1.0f));
  const float fan = 1.0f / std::sqrt(static_cast<float>(g.c * g.r * g.s));
  up(*buf.w, random_halves(nw, rng, -fan, fan));
  if (g.prologue) {
    buf.scale = std::make_unique<DeviceBuffer>(g.c * 2);
    buf.bias = std::make_unique<DeviceBuffer>(g.c * 2);
    up(*buf.scale, random_halves(g.c, rng, 0.5f, 1.5f));
    up(*buf.bias, random_halves(g.c, rng, -0.5f, 0.5f));
  }

  // the plain convolution of the unfused input (with a prologue its input would be the BN apply's output: the
  // conv's time is the same for any values)
  Built plain = build(handle, props, g, false, p, q);
  if (!plain.graph) fail(ErrorKind::Backend, "conv_genstats_probe: the plain convolution: " + plain.note);
  r.plain_engine = plain.engine;
  auto ws_plain = cudnn.workspace(device, static_cast<std::size_t>(plain.workspace));
  std::unordered_map<std::int64_t, void*> pp{{kX, buf.x->get()}, {kW, buf.w->get()}, {kY, buf.y->get()}};
  r.plain_ms = time_ms(handle, *plain.graph, pp, ws_plain ? ws_plain->get() : nullptr, s, g.reps);
  std::vector<__half> y_plain;
  if (!g.prologue) y_plain = download<__half>(*buf.y, ny);

  const auto t0 = std::chrono::steady_clock::now();
  Built fused = build(handle, props, g, true, p, q);
  r.fused_build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.fused_plans = fused.plans;
  r.fused_rank = fused.rank;
  r.fused_note = fused.note;
  if (!fused.graph) return r;
  r.fused_engine = fused.engine;
  auto ws_fused = cudnn.workspace(device, static_cast<std::size_t>(fused.workspace));
  void* ws = ws_fused ? ws_fused->get() : nullptr;
  std::unordered_map<std::int64_t, void*> fp{{kX, buf.x->get()}, {kW, buf.w->get()}, {kY, buf.y->get()},
                                             {kSum, buf.sum->get()}, {kSqSum, buf.sq->get()}};
  if (g.prologue) {
    fp[kScale] = buf.scale->get();
    fp[kBias] = buf.bias->get();
  }
  // two executions from zeroed sums: the same bytes, or the engine reduces in a varying order
  std::vector<float> sums[2], sqs[2];
  for (int i = 0; i < 2; ++i) {
    cuda::check(cudaMemset(buf.sum->get(), 0, g.k * 4), "probe memset");
    cuda::check(cudaMemset(buf.sq->get(), 0, g.k * 4), "probe memset");
    if (auto e = fused.graph->execute(handle, fp, ws); e.is_bad()) {
      r.fused_note = "execute: " + e.get_message();
      r.fused_engine.clear();
      return r;
    }
    cuda::check(cudaStreamSynchronize(s), "probe execute");
    sums[i] = download<float>(*buf.sum, g.k);
    sqs[i] = download<float>(*buf.sq, g.k);
  }
  r.sums_repeat = std::memcmp(sums[0].data(), sums[1].data(), g.k * 4) == 0 &&
                  std::memcmp(sqs[0].data(), sqs[1].data(), g.k * 4) == 0;
  const std::vector<__half> y = download<__half>(*buf.y, ny);
  if (!g.prologue) {
    r.y_matches_plain = std::memcmp(y.data(), y_plain.data(), ny * 2) == 0;
    for (std::size_t i = 0; i < ny; ++i) {
      r.y_max_abs_diff = std::max(r.y_max_abs_diff, static_cast<double>(std::fabs(
          __half2float(y[i]) - __half2float(y_plain[i]))));
    }
  }
  // float64 statistics of the y the fused graph wrote
  std::vector<double> ref_sum(g.k, 0.0), ref_sq(g.k, 0.0);
  for (std::size_t i = 0; i < ny; ++i) {
    const double v = __half2float(y[i]);
    ref_sum[i % g.k] += v;
    ref_sq[i % g.k] += v * v;
  }
  const double m = static_cast<double>(g.n * p * q);
  double max_sum = 0.0, sum_err = 0.0, var_err = 0.0;
  for (std::int64_t c = 0; c < g.k; ++c) max_sum = std::max(max_sum, std::fabs(ref_sum[c]));
  for (std::int64_t c = 0; c < g.k; ++c) {
    sum_err = std::max(sum_err, std::fabs(sums[0][c] - ref_sum[c]) / std::max(max_sum, 1e-30));
    const double mean = ref_sum[c] / m, var = ref_sq[c] / m - mean * mean;
    const double fmean = sums[0][c] / m, fvar = sqs[0][c] / m - fmean * fmean;
    var_err = std::max(var_err, std::fabs(fvar - var) / std::max(var, 1e-30));
  }
  r.sum_rel_err = sum_err;
  r.var_rel_err = var_err;
  r.fused_ms = time_ms(handle, *fused.graph, fp, ws, s, g.reps);
  cuda::check(cudaDeviceSynchronize(), "probe end");
  return r;
}

}  // namespace tr::native

#else  // built without the cuDNN frontend

namespace tr::native {

GenstatsProbeResult conv_genstats_probe(int, const GenstatsProbeShape&) {
  fail(ErrorKind::DeviceUnavailable, "tr-backend was built without the cuDNN frontend: no conv + genstats to probe");
}

}  // namespace tr::native

#endif
