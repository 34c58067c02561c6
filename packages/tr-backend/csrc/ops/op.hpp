// Native ops of the CUDA backend: what a factory builds from one op call's typed record.
//
// The Python side resolves an OpCall once, at capture time, into its native op's record (ops/args/<family>.hpp,
// generated from tr.backend.cuda.signatures) and make_op (bind/op_args.cpp) calls the factory of the record's
// type. The factory validates what only it can (cuBLASLt support of a layout, sizes) and returns an Op whose
// record() issues the op's work on a stream: kernels, cuBLASLt calls, memsets and copies, all of them legal
// inside a stream capture. record() does no allocation and no host synchronisation; everything an op needs
// (descriptors, algorithms, scratch) is made here.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "native/errors.hpp"
#include "ops/codes.hpp"
#include "ops/dtype.hpp"

namespace tr::native {

class Context;

// Element types: DT, generated into codes.hpp and numbered as tr.core.dtype.DType.code; their sizes and names
// in ops/dtype.hpp.

// BadArgument "native op <op>: <message>": a factory's refusal of its record's values.
[[noreturn]] void bad_args(const char* op, const std::string& message);
template <class A>
[[noreturn]] void bad(const A&, const std::string& message) {
  bad_args(A::op, message);
}

class Op {
 public:
  virtual ~Op() = default;
  // Issue the op's work on `stream` (inside a capture or not). Throws tr::native::Error on failure.
  virtual void record(cudaStream_t stream) = 0;
  // How the op was planned (e.g. which cuBLASLt epilogue fused), for profiles and reports.
  std::string info;
};

// An op made of a closure: the closure owns whatever the op keeps (scratch, descriptors).
class FnOp final : public Op {
 public:
  explicit FnOp(std::function<void(cudaStream_t)> fn) : fn_(std::move(fn)) {}
  void record(cudaStream_t stream) override { fn_(stream); }

 private:
  std::function<void(cudaStream_t)> fn_;
};

template <class F>
std::unique_ptr<Op> fn_op(F&& fn, std::string info = "") {
  auto op = std::make_unique<FnOp>(std::function<void(cudaStream_t)>(std::forward<F>(fn)));
  op->info = std::move(info);
  return op;
}

// Device memory private to one op (scratch that lives as long as the op, i.e. as long as its graph).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t nbytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

// Throws Backend "<what> failed: ..." when the last kernel launch failed (bad configuration, capture broken).
void check_launch(const char* what);


}  // namespace tr::native
