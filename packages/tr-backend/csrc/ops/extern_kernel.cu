// A kernel compiled outside tr (CuPy's RawKernel: NVRTC at run time) launched as one node of a captured graph
// (tr/backend/cuda/extern_kernel.py builds the arguments; tr.task.extension is the user's side).
//
// The op holds a CUfunction handle, the launch geometry and the kernel's parameter values, packed once when the
// op is made; record() is one cuLaunchKernel on the recording stream, so inside a stream capture the kernel
// becomes a kernel node of the graph like tr's own, and a graph launch runs it with no Python and no host work.
// The handle's module must stay loaded as long as the graph: the Python side keeps CuPy's function object alive
// with the backend.
//
// The driver API is reached through the runtime's entry-point query (cudaGetDriverEntryPointByVersion): the
// extension links no libcuda, and imports where there is no driver. What the driver can say about the function is
// checked when the op is made, naming the problem: the parameter count and each parameter's size
// (cuFuncGetParamInfo, drivers of CUDA 12.4 and later), the threads per block and the dynamic shared memory the
// function allows.
//
// ExternKernelArgs (ops/args/extern_kernel.hpp): the CUfunction, grid_x..block_z, shared (dynamic shared memory
// bytes) and three lists of one entry a parameter: param_types (ExternParam), param_ints (a pointer's address or an
// integer's value) and param_floats (a float's value).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "ops/args/extern_kernel.hpp"
#include "ops/op.hpp"

namespace tr::native {

namespace {

// By codes.hpp's ExternParam (tr.core.ops.EXTERN_PARAM_CODES): pointer, int32, int64, float32, float64.
constexpr std::array<const char*, kNumExternParams> kTypeNames = {"a pointer", "an int32", "an int64", "a float32",
                                                                  "a float64"};
constexpr std::array<std::size_t, kNumExternParams> kTypeSizes = {sizeof(void*), 4, 8, 4, 8};

// ---- the driver entry points -----------------------------------------------------------------------------------
// The two queries of CUDA 12.3 / 12.4, declared here for older headers (the driver's ABI, as cudaTypedefs.h has it).
using FuncGetName = CUresult(CUDAAPI*)(const char** name, CUfunction hfunc);
using FuncGetParamInfo = CUresult(CUDAAPI*)(CUfunction func, std::size_t index, std::size_t* offset,
                                             std::size_t* size);
#if CUDA_VERSION >= 12040
static_assert(std::is_same_v<FuncGetName, PFN_cuFuncGetName_v12030>, "cuFuncGetName's signature");
static_assert(std::is_same_v<FuncGetParamInfo, PFN_cuFuncGetParamInfo_v12040>, "cuFuncGetParamInfo's signature");
#endif

struct Driver {
  PFN_cuLaunchKernel_v4000 launch = nullptr;
  PFN_cuFuncGetAttribute_v2020 attribute = nullptr;
  FuncGetParamInfo param_info = nullptr;  // null: the driver predates CUDA 12.4
  PFN_cuGetErrorName_v6000 error_name = nullptr;
  FuncGetName function_name = nullptr;  // null: the driver predates CUDA 12.3
};

void* entry_point(const char* symbol, unsigned int version, bool required) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t error = cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &found);
#else
  (void)version;
  const cudaError_t error = cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &found);
#endif
  if (error != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr) {
    cudaGetLastError();
    if (required) {
      fail(ErrorKind::DeviceUnavailable,
           std::string("the CUDA driver provides no ") + symbol + " (" +
               (error != cudaSuccess ? cuda::describe(error) : "entry point not found or version too old") +
               "): kernels compiled outside tr cannot be launched");
    }
    return nullptr;
  }
  return fn;
}

const Driver& driver() {
  static const Driver d = [] {
    Driver r;
    r.launch = reinterpret_cast<PFN_cuLaunchKernel_v4000>(entry_point("cuLaunchKernel", 12000, true));
    r.attribute = reinterpret_cast<PFN_cuFuncGetAttribute_v2020>(entry_point("cuFuncGetAttribute", 12000, true));
    r.param_info = reinterpret_cast<FuncGetParamInfo>(entry_point("cuFuncGetParamInfo", 12040, false));
    r.error_name = reinterpret_cast<PFN_cuGetErrorName_v6000>(entry_point("cuGetErrorName", 12000, false));
    r.function_name = reinterpret_cast<FuncGetName>(entry_point("cuFuncGetName", 12030, false));
    return r;
  }();
  return d;
}

std::string result_text(CUresult result) {
  const char* name = nullptr;
  if (driver().error_name != nullptr && driver().error_name(result, &name) == CUDA_SUCCESS && name != nullptr) {
    return std::string(name) + " (" + std::to_string(static_cast<int>(result)) + ")";
  }
  return "CUresult " + std::to_string(static_cast<int>(result));
}

// "kernel 'name'" for messages (the name the module gives it), or "the kernel" where the driver cannot say.
std::string kernel_name(CUfunction fn) {
  const char* name = nullptr;
  if (driver().function_name != nullptr && driver().function_name(&name, fn) == CUDA_SUCCESS && name != nullptr) {
    return std::string("kernel '") + name + "'";
  }
  return "the kernel";
}

int function_attribute(CUfunction fn, CUfunction_attribute attribute, const char* what,
                       const ExternKernelArgs& args) {
  int value = 0;
  const CUresult result = driver().attribute(&value, attribute, fn);
  if (result != CUDA_SUCCESS) {
    bad(args, std::string("cuFuncGetAttribute(") + what + ") failed: " + result_text(result) +
              "; is 'function' a CUfunction loaded on this device?");
  }
  return value;
}

// ---- the op ------------------------------------------------------------------------------------------------------
class ExternKernelOp final : public Op {
 public:
  ExternKernelOp(CUfunction fn, std::string name, std::array<unsigned, 3> grid, std::array<unsigned, 3> block,
                 unsigned shared, std::vector<std::uint64_t> values)
      : fn_(fn), name_(std::move(name)), grid_(grid), block_(block), shared_(shared), values_(std::move(values)),
        params_(values_.size()) {
    // every parameter's bytes sit at the start of its own 8-byte slot (little-endian: an int32 in the low half)
    for (std::size_t i = 0; i < values_.size(); ++i) params_[i] = &values_[i];
  }
  ExternKernelOp(const ExternKernelOp&) = delete;
  ExternKernelOp& operator=(const ExternKernelOp&) = delete;

  void record(cudaStream_t stream) override {
    const CUresult result =
        driver().launch(fn_, grid_[0], grid_[1], grid_[2], block_[0], block_[1], block_[2], shared_,
                        reinterpret_cast<CUstream>(stream), params_.empty() ? nullptr : params_.data(), nullptr);
    if (result != CUDA_SUCCESS) {
      fail(ErrorKind::Backend, "cuLaunchKernel of " + name_ + " failed: " + result_text(result));
    }
  }

 private:
  CUfunction fn_;
  std::string name_;
  std::array<unsigned, 3> grid_;
  std::array<unsigned, 3> block_;
  unsigned shared_;
  std::vector<std::uint64_t> values_;
  std::vector<void*> params_;
};

// grid or block: its three extents, each checked against its limit.
std::array<unsigned, 3> dims(const ExternKernelArgs& args, const char* what, const std::array<std::int64_t, 3>& v,
                             const std::array<std::int64_t, 3>& limits) {
  std::array<unsigned, 3> out{};
  const char* axes[3] = {"_x", "_y", "_z"};
  for (int k = 0; k < 3; ++k) {
    if (v[k] < 1 || v[k] > limits[k]) {
      bad(args, std::string(what) + axes[k] + " is " + std::to_string(v[k]) + ", expected 1.." +
                std::to_string(limits[k]));
    }
    out[k] = static_cast<unsigned>(v[k]);
  }
  return out;
}

// Each parameter packed into an 8-byte slot, checked against what the driver says the kernel takes.
std::vector<std::uint64_t> pack(const ExternKernelArgs& args, CUfunction fn, const std::string& name) {
  const auto n = static_cast<std::int64_t>(args.param_types.size());
  if (n > 4096) bad(args, "param_types lists " + std::to_string(n) + " parameters, expected 0..4096");
  if (args.param_ints.size() != args.param_types.size() || args.param_floats.size() != args.param_types.size()) {
    bad(args, "param_ints and param_floats need one entry a parameter (" + std::to_string(n) + "), got " +
              std::to_string(args.param_ints.size()) + " and " + std::to_string(args.param_floats.size()));
  }
  std::vector<std::uint64_t> values(static_cast<std::size_t>(n), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto at = static_cast<std::size_t>(i);
    const ExternParam type = args.param_types[at];  // a code of ExternParam: the record checked each
    void* slot = &values[at];
    if (type == ExternParam::POINTER) {
      const auto address = static_cast<std::uintptr_t>(args.param_ints[at]);  // the address's 64 bits
      std::memcpy(slot, &address, sizeof(void*));
    } else if (type == ExternParam::INT32) {
      const std::int64_t v = args.param_ints[at];
      if (v < INT32_MIN || v > INT32_MAX) {
        bad(args, "int32 parameter " + std::to_string(i) + " = " + std::to_string(v) + " is out of range");
      }
      const auto v32 = static_cast<std::int32_t>(v);
      std::memcpy(slot, &v32, 4);
    } else if (type == ExternParam::INT64) {
      const std::int64_t v = args.param_ints[at];
      std::memcpy(slot, &v, 8);
    } else if (type == ExternParam::FLOAT32) {
      const auto v = static_cast<float>(args.param_floats[at]);
      std::memcpy(slot, &v, 4);
    } else {
      const double v = args.param_floats[at];
      std::memcpy(slot, &v, 8);
    }
  }
  if (driver().param_info == nullptr) return values;  // an older driver: the caller's types are taken as given
  // Index i exists iff the query succeeds; CUDA_ERROR_INVALID_VALUE past the last one. Any other answer means the
  // driver cannot tell for this function, and the caller's types are taken as given.
  for (std::int64_t i = 0; i <= n; ++i) {
    std::size_t offset = 0;
    std::size_t size = 0;
    const CUresult result = driver().param_info(fn, static_cast<std::size_t>(i), &offset, &size);
    if (result != CUDA_SUCCESS && result != CUDA_ERROR_INVALID_VALUE) break;
    if (i == n) {
      if (result == CUDA_SUCCESS) bad(args, name + " takes more than the " + std::to_string(n) + " parameters given");
      break;
    }
    if (result != CUDA_SUCCESS) {
      bad(args, name + " takes " + std::to_string(i) + " parameters, " + std::to_string(n) + " were given");
    }
    const auto code = static_cast<std::size_t>(args.param_types[static_cast<std::size_t>(i)]);
    if (size != kTypeSizes[code]) {
      bad(args, "parameter " + std::to_string(i) + " of " + name + " is " + std::to_string(size) + " bytes but " +
                kTypeNames[code] + " (" + std::to_string(kTypeSizes[code]) + " bytes) was given");
    }
  }
  return values;
}

}  // namespace

std::unique_ptr<Op> extern_kernel(Context& ctx, const ExternKernelArgs& args) {
  auto fn = reinterpret_cast<CUfunction>(args.function);
  cuda::DeviceGuard guard(ctx.device());  // the function's queries run in the device's (primary) context
  const std::string name = kernel_name(fn);
  const auto grid = dims(args, "grid", {args.grid_x, args.grid_y, args.grid_z}, {2147483647, 65535, 65535});
  const auto block = dims(args, "block", {args.block_x, args.block_y, args.block_z}, {1024, 1024, 64});
  const std::int64_t threads = std::int64_t{block[0]} * block[1] * block[2];
  const int max_threads =
      function_attribute(fn, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max threads per block", args);
  if (threads > max_threads) {
    bad(args, "a block of " + std::to_string(threads) + " threads; " + name + " takes at most " +
              std::to_string(max_threads));
  }
  const std::int64_t shared = args.shared;
  const int max_shared =
      function_attribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, "max dynamic shared memory", args);
  if (shared < 0 || shared > max_shared) {
    bad(args, "shared is " + std::to_string(shared) + " bytes, expected 0.." + std::to_string(max_shared) + " for " +
              name + " (raise its max_dynamic_shared_size_bytes for more)");
  }
  auto op = std::make_unique<ExternKernelOp>(fn, name, grid, block, static_cast<unsigned>(shared),
                                            pack(args, fn, name));
  op->info = name + ", grid " + std::to_string(grid[0]) + "x" + std::to_string(grid[1]) + "x" +
             std::to_string(grid[2]) + ", block " + std::to_string(block[0]) + "x" + std::to_string(block[1]) + "x" +
             std::to_string(block[2]) + ", " + std::to_string(shared) + " B shared, " +
             std::to_string(args.param_types.size()) + " parameters";
  return op;
}

}  // namespace tr::native
