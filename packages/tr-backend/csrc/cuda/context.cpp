#include "cuda/context.hpp"

#include <string>
#include <vector>

#include "cuda/check.hpp"
#include "cuda/cublaslt.hpp"
#include "native/device.hpp"

namespace tr::native {

namespace {

void check_kind(int kind) {
  if (kind < 0 || kind >= kNumStreams) {
    fail(ErrorKind::BadArgument, "stream kind must be 0..4 (TRANS, COMP_1, COMP_2, COMP_3, UPDATE), got " +
                                     std::to_string(kind));
  }
}

}  // namespace

Context::Context(int device, std::size_t workspace_bytes) : device_(device), workspace_bytes_(workspace_bytes) {
  require_device(device);
  cuda::DeviceGuard guard(device);
  for (auto& s : streams_) cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  if (workspace_bytes_ > 0) {
    const cudaError_t error = cudaMalloc(&workspace_, workspace_bytes_);
    if (error != cudaSuccess) {
      workspace_ = nullptr;
      for (auto& s : streams_) cudaStreamDestroy(s);
      cuda::throw_error(error, "cudaMalloc of the " + std::to_string(workspace_bytes_) + "-byte cuBLASLt workspace");
    }
  }
}

Context::~Context() {
  int previous = -1;
  const bool switched =
      cudaGetDevice(&previous) == cudaSuccess && previous != device_ && cudaSetDevice(device_) == cudaSuccess;
  for (auto& s : streams_) {
    if (s != nullptr) cudaStreamSynchronize(s);
  }
  if (lt_ != nullptr) cuda::lt().destroy(lt_);
  if (workspace_ != nullptr) cudaFree(workspace_);
  for (auto& s : streams_) {
    if (s != nullptr) cudaStreamDestroy(s);
  }
  if (switched) cudaSetDevice(previous);
  cudaGetLastError();
}

cudaStream_t Context::stream(int kind) const {
  check_kind(kind);
  return streams_[kind];
}

cublasLtHandle_t Context::lt_handle() {
  if (lt_ == nullptr) {
    cuda::DeviceGuard guard(device_);
    cuda::lt_check(cuda::lt().create(&lt_), "cublasLtCreate");
  }
  return lt_;
}

void Context::synchronize() {
  cuda::DeviceGuard guard(device_);
  for (auto& s : streams_) cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  cuda::check(cudaGetLastError(), "an earlier asynchronous operation");
}

Graph::Graph(Context& ctx, int stream_kind) : ctx_(ctx), kind_(stream_kind) { check_kind(stream_kind); }

Graph::~Graph() {
  if (capturing_) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(ctx_.stream(kind_), &g);
    if (g != nullptr) cudaGraphDestroy(g);
  }
  discard();
  cudaGetLastError();
}

void Graph::discard() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
}

void Graph::begin() {
  if (capturing_ || exec_ != nullptr) fail(ErrorKind::Backend, "graph capture begun twice");
  cuda::DeviceGuard guard(ctx_.device());
  cudaGetLastError();
  // Thread-local mode: other threads (a data pipeline) may keep calling CUDA while we capture.
  cuda::check(cudaStreamBeginCapture(ctx_.stream(kind_), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  capturing_ = true;
}

void Graph::record(Op& op) {
  if (!capturing_) fail(ErrorKind::Backend, "record() outside begin()/end()");
  cuda::DeviceGuard guard(ctx_.device());
  cudaStream_t s = ctx_.stream(kind_);
  try {
    op.record(s);
    cuda::check(cudaGetLastError(), "recording the op");
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cuda::check(cudaStreamIsCapturing(s, &status), "cudaStreamIsCapturing");
    if (status != cudaStreamCaptureStatusActive) {
      fail(ErrorKind::Backend, "the op invalidated the stream capture (it used an operation that cannot be captured)");
    }
  } catch (...) {
    abort();
    throw;
  }
}

void Graph::abort() {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(ctx_.stream(kind_), &g);
  if (g != nullptr) cudaGraphDestroy(g);
  cudaGetLastError();
}

void Graph::end() {
  if (!capturing_) fail(ErrorKind::Backend, "end() without begin()");
  cuda::DeviceGuard guard(ctx_.device());
  capturing_ = false;
  cudaGraph_t g = nullptr;
  const cudaError_t error = cudaStreamEndCapture(ctx_.stream(kind_), &g);
  if (error != cudaSuccess) {
    if (g != nullptr) cudaGraphDestroy(g);
    cuda::throw_error(error, "cudaStreamEndCapture");
  }
  graph_ = g;
  const cudaError_t inst = cudaGraphInstantiate(&exec_, graph_, 0);
  if (inst != cudaSuccess) {
    exec_ = nullptr;
    discard();
    cuda::throw_error(inst, "cudaGraphInstantiate");
  }
}

void Graph::launch(int stream_kind) {
  if (exec_ == nullptr) fail(ErrorKind::Backend, "launch of a graph that was not captured");
  cuda::check(cudaGraphLaunch(exec_, ctx_.stream(stream_kind)), "cudaGraphLaunch");
}

std::size_t Graph::num_nodes() const {
  if (graph_ == nullptr) return 0;
  std::size_t count = 0;
  cuda::check(cudaGraphGetNodes(graph_, nullptr, &count), "cudaGraphGetNodes");
  return count;
}

int Graph::set_memcpy_source(std::uintptr_t old_src, std::uintptr_t new_src) {
  if (graph_ == nullptr || exec_ == nullptr) fail(ErrorKind::Backend, "set_memcpy_source on an uncaptured graph");
  cuda::DeviceGuard guard(ctx_.device());
  std::size_t count = num_nodes();
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0) cuda::check(cudaGraphGetNodes(graph_, nodes.data(), &count), "cudaGraphGetNodes");
  int changed = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    cuda::check(cudaGraphNodeGetType(node, &type), "cudaGraphNodeGetType");
    if (type != cudaGraphNodeTypeMemcpy) continue;
    cudaMemcpy3DParms p = {};
    cuda::check(cudaGraphMemcpyNodeGetParams(node, &p), "cudaGraphMemcpyNodeGetParams");
    if (reinterpret_cast<std::uintptr_t>(p.srcPtr.ptr) != old_src) continue;
    p.srcPtr.ptr = reinterpret_cast<void*>(new_src);
    cuda::check(cudaGraphExecMemcpyNodeSetParams(exec_, node, &p), "cudaGraphExecMemcpyNodeSetParams");
    cuda::check(cudaGraphMemcpyNodeSetParams(node, &p), "cudaGraphMemcpyNodeSetParams");
    ++changed;
  }
  return changed;
}

void host_register(std::uintptr_t ptr, std::size_t nbytes) {
  if (nbytes == 0) return;
  cuda::check(cudaHostRegister(reinterpret_cast<void*>(ptr), nbytes, cudaHostRegisterPortable),
              ("cudaHostRegister of " + std::to_string(nbytes) + " bytes").c_str());
}

void host_unregister(std::uintptr_t ptr) {
  cudaHostUnregister(reinterpret_cast<void*>(ptr));
  cudaGetLastError();
}

Event::Event(Context& ctx) : ctx_(ctx) {
  cuda::DeviceGuard guard(ctx.device());
  cuda::check(cudaEventCreate(&event_), "cudaEventCreate");
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
  cudaGetLastError();
}

void Event::record(int stream_kind) { cuda::check(cudaEventRecord(event_, ctx_.stream(stream_kind)), "cudaEventRecord"); }

void Event::wait(int stream_kind) {
  cuda::check(cudaStreamWaitEvent(ctx_.stream(stream_kind), event_, 0), "cudaStreamWaitEvent");
}

void Event::synchronize() { cuda::check(cudaEventSynchronize(event_), "cudaEventSynchronize"); }

float Event::elapsed_ms(const Event& since) const {
  float ms = 0.0f;
  cuda::check(cudaEventElapsedTime(&ms, since.event_, event_), "cudaEventElapsedTime");
  return ms;
}

}  // namespace tr::native
