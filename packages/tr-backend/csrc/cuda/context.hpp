// DeviceContext (streams, cuBLASLt handle and workspace), captured graphs and events of the CUDA backend.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/op.hpp"

namespace tr::native {

// Stream kinds, numbered as tr.core.phase.StreamKind: TRANS, COMP_1, COMP_2, COMP_3, UPDATE.
inline constexpr int kNumStreams = 5;
inline constexpr int kTransStream = 0;

class Context {
 public:
  Context(int device, std::size_t workspace_bytes);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  cudaStream_t stream(int kind) const;
  // A stream's CUDA priority (lower is more urgent): TRANS the device's greatest, the others its least.
  int priority(int kind) const;
  // The cuBLASLt handle, created on first use (loads the library).
  cublasLtHandle_t lt_handle();
  void* workspace() const { return workspace_; }
  std::size_t workspace_size() const { return workspace_bytes_; }
  // Waits for every stream; raises the first asynchronous error (e.g. a kernel fault) as BackendError.
  void synchronize();

 private:
  int device_;
  cudaStream_t streams_[kNumStreams] = {};
  int priorities_[kNumStreams] = {};
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_;
};

// Ops recorded by stream capture and instantiated once; launch() is one cudaGraphLaunch.
// Capture starts on one stream (the origin); ops may also be recorded on other streams of the context, which
// join the capture through marks: mark(kind) records an event after what stream `kind` has recorded so far,
// wait(kind, m) makes stream `kind` wait for mark m. The captured graph then holds parallel branches (e.g. a
// gradient all-reduce beside the first layer's backward). end() joins every stream back into the origin.
// Branches run concurrently: they must not write what another branch reads (the caller orders them).
class Graph {
 public:
  Graph(Context& ctx, int stream_kind);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  void begin();
  // Records one op on stream `kind` (-1: the origin). On failure the capture is ended and discarded, and the
  // error is re-thrown.
  void record(Op& op, int kind = -1);
  int mark(int kind);            // an event after stream `kind`'s work so far; returns its index
  void wait(int kind, int mark); // stream `kind` waits for the mark (and joins the capture)
  void end();  // joins the side streams, ends the capture and instantiates
  void abort();
  void launch(int stream_kind);
  std::size_t num_nodes() const;
  // Nodes on the longest dependency path: num_nodes() for a chain, fewer when branches run side by side.
  std::size_t depth() const;
  bool instantiated() const { return exec_ != nullptr; }
  // Points every memcpy node reading host address `old_src` at `new_src` (re-bound host staging buffers);
  // returns how many nodes changed.
  int set_memcpy_source(std::uintptr_t old_src, std::uintptr_t new_src);

 private:
  void discard();
  void release_events();
  int resolve(int kind) const;
  void require_joined(int kind) const;
  void join_side_streams();
  Context& ctx_;
  int kind_;
  bool capturing_ = false;
  bool joined_[kNumStreams] = {};  // streams that are part of the running capture
  std::vector<cudaEvent_t> events_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Page-lock (and unlock) host memory the backend did not allocate, so copies from it can be captured.
void host_register(std::uintptr_t ptr, std::size_t nbytes);
void host_unregister(std::uintptr_t ptr);

// A CUDA event for ordering work between streams (and timing).
class Event {
 public:
  explicit Event(Context& ctx);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(int stream_kind);
  void wait(int stream_kind);  // the stream waits for the last record()
  void synchronize();
  float elapsed_ms(const Event& since) const;

 private:
  Context& ctx_;
  cudaEvent_t event_ = nullptr;
};

}  // namespace tr::native
