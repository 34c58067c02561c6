// Native ops of the CUDA backend: what a factory builds from one catalogued op call, and how factories are
// found by name.
//
// The Python side resolves an OpCall once, at capture time, into an OpArgs (device pointers, integer and
// float parameters by name) and asks make_op() for the op. The factory validates what only it can (cuBLASLt
// support of a layout, sizes) and returns an Op whose record() issues the op's work on a stream: kernels,
// cuBLASLt calls, memsets and copies, all of them legal inside a stream capture. record() does no allocation
// and no host synchronisation; everything an op needs (descriptors, algorithms, scratch) is made here.
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

namespace tr::native {

class Context;

// Element types: DT, generated into codes.hpp and numbered as tr.core.dtype.DType.code.

int dtype_size(DT dt);
const char* dtype_name(DT dt);

// One op call's arguments, by name. Pointers are absolute device (or pinned host) addresses.
struct OpArgs {
  std::string op;
  std::map<std::string, std::uintptr_t> ptrs;
  std::map<std::string, std::int64_t> ints;
  std::map<std::string, double> floats;

  bool has(const std::string& name) const;  // a non-null pointer named `name` was given
  void* ptr(const std::string& name) const;  // throws BadArgument when missing
  std::int64_t i(const std::string& name) const;
  std::int64_t i(const std::string& name, std::int64_t fallback) const;
  double f(const std::string& name) const;
  double f(const std::string& name, double fallback) const;
  DT dt(const std::string& name) const;  // ints["<name>_dt"]
  [[noreturn]] void bad(const std::string& message) const;  // BadArgument "native op <op>: <message>"
};

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

using Factory = std::unique_ptr<Op> (*)(Context&, const OpArgs&);

void register_factory(const std::string& name, Factory factory);
std::unique_ptr<Op> make_op(Context& ctx, const OpArgs& args);
std::vector<std::string> factory_names();

// One per op family (csrc/ops/<family>.cu); register_all_ops() calls each once.
void register_activation_ops();
void register_augment_ops();
void register_bn_ops();
void register_bn_pool_ops();
void register_collective_ops();
void register_conv_ops();
void register_copy_ops();
void register_dropout_ops();
void register_extern_kernel_ops();
void register_fc_ops();
void register_image_ops();
void register_layernorm_ops();
void register_onehot_loss_ops();
void register_optimizer_ops();
void register_pool_ops();
void register_range_ops();
void register_resident_ops();
void register_scalar_ops();
void register_scale_ops();
void register_softmax_ce_ops();
void register_transfer_ops();
void register_all_ops();

}  // namespace tr::native
