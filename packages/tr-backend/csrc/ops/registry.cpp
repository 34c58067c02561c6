// Factories by name, OpArgs accessors, op scratch memory.
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

#include "cuda/check.hpp"
#include "ops/op.hpp"

namespace tr::native {

int dtype_size(DT dt) {
  switch (dt) {
    case DT::F32:
    case DT::I32:
      return 4;
    case DT::F16:
    case DT::BF16:
      return 2;
    case DT::I8:
    case DT::U8:
      return 1;
  }
  return 0;
}

const char* dtype_name(DT dt) {
  switch (dt) {
    case DT::F32:
      return "FP32";
    case DT::F16:
      return "FP16";
    case DT::BF16:
      return "BF16";
    case DT::I8:
      return "INT8";
    case DT::I32:
      return "INT32";
    case DT::U8:
      return "UINT8";
  }
  return "?";
}

void OpArgs::bad(const std::string& message) const { fail(ErrorKind::BadArgument, "native op " + op + ": " + message); }

bool OpArgs::has(const std::string& name) const {
  auto it = ptrs.find(name);
  return it != ptrs.end() && it->second != 0;
}

void* OpArgs::ptr(const std::string& name) const {
  if (!has(name)) bad("pointer argument '" + name + "' is missing");
  return reinterpret_cast<void*>(ptrs.at(name));
}

std::int64_t OpArgs::i(const std::string& name) const {
  auto it = ints.find(name);
  if (it == ints.end()) bad("integer parameter '" + name + "' is missing");
  return it->second;
}

std::int64_t OpArgs::i(const std::string& name, std::int64_t fallback) const {
  auto it = ints.find(name);
  return it == ints.end() ? fallback : it->second;
}

double OpArgs::f(const std::string& name) const {
  auto it = floats.find(name);
  if (it == floats.end()) bad("float parameter '" + name + "' is missing");
  return it->second;
}

double OpArgs::f(const std::string& name, double fallback) const {
  auto it = floats.find(name);
  return it == floats.end() ? fallback : it->second;
}

DT OpArgs::dt(const std::string& name) const {
  const std::int64_t code = i(name + "_dt");
  if (code < 0 || code >= kNumDT) {
    bad("dtype code of '" + name + "' is " + std::to_string(code) + ", expected 0.." + std::to_string(kNumDT - 1));
  }
  return static_cast<DT>(code);
}

DeviceBuffer::DeviceBuffer(std::size_t nbytes) {
  const cudaError_t error = cudaMalloc(&ptr_, nbytes == 0 ? 256 : nbytes);
  if (error != cudaSuccess) {
    ptr_ = nullptr;
    cuda::throw_error(error, "cudaMalloc of " + std::to_string(nbytes) + " bytes of op scratch");
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
  cudaGetLastError();
}

void check_launch(const char* what) {
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) cuda::throw_error(error, std::string("kernel launch ") + what);
}

namespace {

std::map<std::string, Factory>& table() {
  static std::map<std::string, Factory> factories;
  return factories;
}

}  // namespace

void register_factory(const std::string& name, Factory factory) {
  auto [it, inserted] = table().emplace(name, factory);
  if (!inserted && it->second != factory) fail(ErrorKind::Backend, "native op '" + name + "' registered twice");
}

void register_all_ops() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_activation_ops();
    register_bn_ops();
    register_bn_pool_ops();
    register_collective_ops();
    register_conv_ops();
    register_copy_ops();
    register_dropout_ops();
    register_augment_ops();
    register_extern_kernel_ops();
    register_fc_ops();
    register_image_ops();
    register_layernorm_ops();
    register_onehot_loss_ops();
    register_optimizer_ops();
    register_pool_ops();
    register_range_ops();
    register_resident_ops();
    register_scalar_ops();
    register_scale_ops();
    register_softmax_ce_ops();
    register_transfer_ops();
  });
}

std::unique_ptr<Op> make_op(Context& ctx, const OpArgs& args) {
  register_all_ops();
  auto it = table().find(args.op);
  if (it == table().end()) fail(ErrorKind::Backend, "no native op named '" + args.op + "' in this build");
  return it->second(ctx, args);
}

std::vector<std::string> factory_names() {
  register_all_ops();
  std::vector<std::string> names;
  for (const auto& [name, factory] : table()) names.push_back(name);
  return names;
}

}  // namespace tr::native
