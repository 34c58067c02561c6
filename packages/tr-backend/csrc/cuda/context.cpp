#include "cuda/context.hpp"

#include <algorithm>
#include <string>
#include <unordered_map>
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
  // TRANS at the device's greatest priority: the transfer graph that feeds the next step is scheduled ahead of the
  // running step's kernels as their blocks retire, instead of behind every kernel already launched. (nvJPEG's
  // decode on it still waits for the whole device: measured, benchmarks/RESULTS.md.) The compute
  // streams keep the default (least) priority.
  int least = 0, greatest = 0;
  cuda::check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  for (int k = 0; k < kNumStreams; ++k) {
    priorities_[k] = k == kTransStream ? greatest : least;
    cuda::check(cudaStreamCreateWithPriority(&streams_[k], cudaStreamNonBlocking, priorities_[k]),
                "cudaStreamCreateWithPriority");
  }
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

int Context::priority(int kind) const {
  check_kind(kind);
  return priorities_[kind];
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
  if (capturing_) abort();
  discard();
  release_events();
  cudaGetLastError();
}

void Graph::discard() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
}

void Graph::release_events() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  events_.clear();
}

int Graph::resolve(int kind) const {
  if (kind == -1) return kind_;
  check_kind(kind);
  return kind;
}

void Graph::require_joined(int kind) const {
  if (!joined_[kind]) {
    fail(ErrorKind::Backend, "stream " + std::to_string(kind) + " is not part of this capture: make it wait() for a "
                                 "mark of a stream that is, first");
  }
}

void Graph::begin() {
  if (capturing_ || exec_ != nullptr) fail(ErrorKind::Backend, "graph capture begun twice");
  cuda::DeviceGuard guard(ctx_.device());
  cudaGetLastError();
  // Thread-local mode: other threads (a data pipeline) may keep calling CUDA while we capture.
  cuda::check(cudaStreamBeginCapture(ctx_.stream(kind_), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  capturing_ = true;
  for (bool& j : joined_) j = false;
  joined_[kind_] = true;
}

void Graph::record(Op& op, int kind) {
  if (!capturing_) fail(ErrorKind::Backend, "record() outside begin()/end()");
  cuda::DeviceGuard guard(ctx_.device());
  try {
    kind = resolve(kind);
    require_joined(kind);
    cudaStream_t s = ctx_.stream(kind);
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

int Graph::mark(int kind) {
  if (!capturing_) fail(ErrorKind::Backend, "mark() outside begin()/end()");
  kind = resolve(kind);
  require_joined(kind);
  cuda::DeviceGuard guard(ctx_.device());
  cudaEvent_t e = nullptr;
  cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  events_.push_back(e);
  cuda::check(cudaEventRecord(e, ctx_.stream(kind)), "cudaEventRecord (capture mark)");
  return static_cast<int>(events_.size()) - 1;
}

void Graph::wait(int kind, int mark) {
  if (!capturing_) fail(ErrorKind::Backend, "wait() outside begin()/end()");
  kind = resolve(kind);
  if (mark < 0 || mark >= static_cast<int>(events_.size())) {
    fail(ErrorKind::BadArgument, "capture mark " + std::to_string(mark) + " does not exist (" +
                                     std::to_string(events_.size()) + " marks)");
  }
  cuda::DeviceGuard guard(ctx_.device());
  cuda::check(cudaStreamWaitEvent(ctx_.stream(kind), events_[mark], 0), "cudaStreamWaitEvent (capture join)");
  joined_[kind] = true;
}

void Graph::join_side_streams() {
  for (int k = 0; k < kNumStreams; ++k) {
    if (k != kind_ && joined_[k]) wait(kind_, mark(k));
  }
}

void Graph::abort() {
  if (!capturing_) return;
  try {
    join_side_streams();  // unjoined work would leave the side streams capturing
  } catch (...) {
  }
  capturing_ = false;
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(ctx_.stream(kind_), &g);
  if (g != nullptr) cudaGraphDestroy(g);
  release_events();
  cudaGetLastError();
}

void Graph::end() {
  if (!capturing_) fail(ErrorKind::Backend, "end() without begin()");
  cuda::DeviceGuard guard(ctx_.device());
  try {
    join_side_streams();
  } catch (...) {
    abort();
    throw;
  }
  capturing_ = false;
  cudaGraph_t g = nullptr;
  const cudaError_t error = cudaStreamEndCapture(ctx_.stream(kind_), &g);
  release_events();  // captured as dependencies: the graph no longer needs them
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

std::size_t Graph::depth() const {
  if (graph_ == nullptr) return 0;
  std::size_t count = 0, edges = 0;
  cuda::check(cudaGraphGetNodes(graph_, nullptr, &count), "cudaGraphGetNodes");
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0) cuda::check(cudaGraphGetNodes(graph_, nodes.data(), &count), "cudaGraphGetNodes");
#if CUDART_VERSION >= 13000
  cuda::check(cudaGraphGetEdges(graph_, nullptr, nullptr, nullptr, &edges), "cudaGraphGetEdges");
  std::vector<cudaGraphNode_t> from(edges), to(edges);
  std::vector<cudaGraphEdgeData> data(edges);
  if (edges > 0) cuda::check(cudaGraphGetEdges(graph_, from.data(), to.data(), data.data(), &edges), "cudaGraphGetEdges");
#else
  cuda::check(cudaGraphGetEdges(graph_, nullptr, nullptr, &edges), "cudaGraphGetEdges");
  std::vector<cudaGraphNode_t> from(edges), to(edges);
  if (edges > 0) cuda::check(cudaGraphGetEdges(graph_, from.data(), to.data(), &edges), "cudaGraphGetEdges");
#endif
  std::unordered_map<cudaGraphNode_t, std::size_t> index;
  for (std::size_t i = 0; i < count; ++i) index[nodes[i]] = i;
  std::vector<std::vector<std::size_t>> out(count);
  std::vector<std::size_t> indegree(count, 0), longest(count, 1);
  for (std::size_t e = 0; e < edges; ++e) {
    out[index.at(from[e])].push_back(index.at(to[e]));
    ++indegree[index.at(to[e])];
  }
  std::vector<std::size_t> ready;
  for (std::size_t i = 0; i < count; ++i) {
    if (indegree[i] == 0) ready.push_back(i);
  }
  std::size_t best = 0;
  while (!ready.empty()) {  // Kahn's order: a node's longest path is final when it becomes ready
    const std::size_t n = ready.back();
    ready.pop_back();
    best = std::max(best, longest[n]);
    for (std::size_t m : out[n]) {
      longest[m] = std::max(longest[m], longest[n] + 1);
      if (--indegree[m] == 0) ready.push_back(m);
    }
  }
  return best;
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
