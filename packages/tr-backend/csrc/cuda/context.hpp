// DeviceContext (streams, cuBLASLt handle and workspace), captured graphs and events of the CUDA backend.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "ops/op.hpp"

namespace tr::native {

// Stream kinds, numbered as tr.core.phase.StreamKind: TRANS, COMP_1, COMP_2, COMP_3, UPDATE.
inline constexpr int kNumStreams = 5;

class Context {
 public:
  Context(int device, std::size_t workspace_bytes);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  cudaStream_t stream(int kind) const;
  // The cuBLASLt handle, created on first use (loads the library).
  cublasLtHandle_t lt_handle();
  void* workspace() const { return workspace_; }
  std::size_t workspace_size() const { return workspace_bytes_; }
  // Waits for every stream; raises the first asynchronous error (e.g. a kernel fault) as BackendError.
  void synchronize();

 private:
  int device_;
  cudaStream_t streams_[kNumStreams] = {};
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_;
};

// A sequence of ops recorded by stream capture and instantiated once; launch() is one cudaGraphLaunch.
class Graph {
 public:
  Graph(Context& ctx, int stream_kind);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  void begin();
  // Records one op. On failure the capture is ended and discarded, and the error is re-thrown.
  void record(Op& op);
  void end();  // ends the capture and instantiates
  void abort();
  void launch(int stream_kind);
  std::size_t num_nodes() const;
  bool instantiated() const { return exec_ != nullptr; }
  // Points every memcpy node reading host address `old_src` at `new_src` (re-bound host staging buffers);
  // returns how many nodes changed.
  int set_memcpy_source(std::uintptr_t old_src, std::uintptr_t new_src);

 private:
  void discard();
  Context& ctx_;
  int kind_;
  bool capturing_ = false;
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
