// Fully connected layer through cuBLASLt: x [N, K] (row-major), w [O, K], y [N, O].
//
// Row-major matrices are column-major transposes, so with m, n, k in cuBLASLt's column-major terms:
//   fc_fwd  y^T[O,N]  = w^T^T... : D(O x N) = op(A = w stored K x O, T) * op(B = x stored K x N, N)
//   fc_bwd  dw^T[K,O] : D(K x O) = op(A = x stored K x N, N) * op(B = dy stored O x N, T); db = BGRADB (sum over N)
//           dx^T[K,N] : D(K x N) = op(A = w stored K x O, N) * op(B = dy stored O x N, N)
// Epilogues remove kernels where cuBLASLt offers them for the layout (BIAS, RELU_BIAS, RELU, BGRADB, and with a
// relu mask RELU_AUX(_BIAS) in the forward and DRELU in the dx GEMM of the next layer's backward); when its
// heuristics find no algorithm with the epilogue, the plain GEMM runs and our own kernels do the rest, with the
// mask in the same layout (tr/backend/rules/fc.py: bit f of sample n at bit n*ld + f, LSB first), so a fused
// forward and an unfused backward (or the reverse) agree.
// FP32 runs in FP32 (or TF32 when asked); FP16/BF16 inputs accumulate in FP32 and may write FP32 outputs.
#include <cublasLt.h>

#include <memory>
#include <string>

#include "cuda/context.hpp"
#include "cuda/cublaslt.hpp"
#include "ops/args/fc.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

// A: FcFwdArgs or FcBwdArgs (whose op a refusal names), as in the helpers below.
template <class A>
cudaDataType_t cuda_type(DT dt, const A& args, const char* what) {
  switch (dt) {
    case DT::F32:
      return CUDA_R_32F;
    case DT::F16:
      return CUDA_R_16F;
    case DT::BF16:
      return CUDA_R_16BF;
    default:
      bad(args, std::string(what) + " must be FP32, FP16 or BF16, got " + dtype_name(dt));
  }
}

struct GemmSpec {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  cudaDataType_t a_type = CUDA_R_32F, b_type = CUDA_R_32F, d_type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;  // bias (forward) or bias gradient (BGRADB, DRELU_BGRAD)
  cudaDataType_t bias_type = CUDA_R_32F;
  void* aux = nullptr;  // the relu bit mask (RELU_AUX written, DRELU read)
  std::int64_t aux_ld = 0;  // its bits per column of D
};

// One planned cuBLASLt matmul: descriptors and the algorithm chosen once.
class Gemm {
 public:
  ~Gemm() {
    const auto& api = cuda::lt();
    if (desc_ != nullptr) api.desc_destroy(desc_);
    for (auto* l : {a_, b_, d_}) {
      if (l != nullptr) api.layout_destroy(l);
    }
  }

  // nullptr when cuBLASLt has no algorithm for this spec (e.g. an epilogue it cannot fuse here).
  static std::unique_ptr<Gemm> plan(Context& ctx, const GemmSpec& s) {
    const auto& api = cuda::lt();
    auto g = std::make_unique<Gemm>();
    g->spec_ = s;
    g->ctx_ = &ctx;
    cuda::lt_check(api.desc_create(&g->desc_, s.compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t ta = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cuda::lt_check(api.desc_set(g->desc_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "set TRANSA");
    cuda::lt_check(api.desc_set(g->desc_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "set TRANSB");
    if (s.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      cuda::lt_check(api.desc_set(g->desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &s.epilogue, sizeof(s.epilogue)),
                     "set EPILOGUE");
    }
    if (s.bias != nullptr) {
      cuda::lt_check(api.desc_set(g->desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &s.bias, sizeof(s.bias)),
                     "set BIAS_POINTER");
      const std::int32_t bt = s.bias_type;
      cuda::lt_check(api.desc_set(g->desc_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)),
                     "set BIAS_DATA_TYPE");
    }
    if (s.aux != nullptr) {
      cuda::lt_check(api.desc_set(g->desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &s.aux, sizeof(s.aux)),
                     "set EPILOGUE_AUX_POINTER");
      cuda::lt_check(api.desc_set(g->desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &s.aux_ld, sizeof(s.aux_ld)),
                     "set EPILOGUE_AUX_LD");
    }
    // Stored shapes (column-major rows x cols, leading dimension = rows).
    const std::uint64_t a_rows = s.trans_a ? s.k : s.m, a_cols = s.trans_a ? s.m : s.k;
    const std::uint64_t b_rows = s.trans_b ? s.n : s.k, b_cols = s.trans_b ? s.k : s.n;
    cuda::lt_check(api.layout_create(&g->a_, s.a_type, a_rows, a_cols, a_rows), "cublasLtMatrixLayoutCreate(A)");
    cuda::lt_check(api.layout_create(&g->b_, s.b_type, b_rows, b_cols, b_rows), "cublasLtMatrixLayoutCreate(B)");
    cuda::lt_check(api.layout_create(&g->d_, s.d_type, s.m, s.n, s.m), "cublasLtMatrixLayoutCreate(D)");

    cublasLtMatmulPreference_t pref = nullptr;
    cuda::lt_check(api.pref_create(&pref), "cublasLtMatmulPreferenceCreate");
    std::size_t ws = ctx.workspace_size();
    cublasStatus_t st = api.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = api.heuristic(ctx.lt_handle(), g->desc_, g->a_, g->b_, g->d_, g->d_, pref, 1, &result, &found);
    }
    api.pref_destroy(pref);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || found < 1 || result.state != CUBLAS_STATUS_SUCCESS) return nullptr;
    cuda::lt_check(st, "cublasLtMatmulAlgoGetHeuristic");
    g->algo_ = result.algo;
    g->ws_ = result.workspaceSize;
    return g;
  }

  void run(const void* a, const void* b, void* d, cudaStream_t stream) const {
    const float alpha = 1.0f, beta = 0.0f;
    cuda::lt_check(cuda::lt().matmul(ctx_->lt_handle(), desc_, &alpha, a, a_, b, b_, &beta, d, d_, d, d_, &algo_,
                                     ctx_->workspace(), ws_, stream),
                   "cublasLtMatmul");
  }

 private:
  GemmSpec spec_;
  Context* ctx_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algo_ = {};
  std::size_t ws_ = 0;
};

// A GEMM with the wanted epilogue, else the plain one (then `fused` is false); throws when neither exists. The
// op's `epilogues` (false from TR_CUBLASLT_EPILOGUES=0) runs our own kernels instead, to test them where
// cuBLASLt would fuse.
template <class A>
std::unique_ptr<Gemm> plan_with_fallback(Context& ctx, GemmSpec spec, const A& args, bool& fused) {
  fused = false;
  if (spec.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    if (args.epilogues) {
      if (auto g = Gemm::plan(ctx, spec)) {
        fused = true;
        return g;
      }
    }
    spec.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    spec.bias = nullptr;
    spec.aux = nullptr;
  }
  if (auto g = Gemm::plan(ctx, spec)) return g;
  bad(args, "cuBLASLt has no algorithm for a " + std::to_string(spec.m) + "x" + std::to_string(spec.n) + "x" +
                std::to_string(spec.k) + " GEMM with these types");
}

template <class A>
cublasComputeType_t compute_for(DT input, const A& args) {
  if (input == DT::F32 && args.tf32) return CUBLAS_COMPUTE_32F_FAST_TF32;
  return CUBLAS_COMPUTE_32F;
}

// y[r, c] = relu?(y[r, c] + bias[c]) over rows x cols (row-major), computed in float.
template <class TY, class TB>
__global__ void bias_act_kernel(TY* y, const TB* bias, std::int64_t rows, std::int64_t cols, int relu) {
  TR_GRID_STRIDE(i, rows * cols) {
    float v = kern::to_f(y[i]);
    if (bias != nullptr) v = v + kern::to_f(bias[i % cols]);
    if (relu && v < 0.0f) v = 0.0f;  // NaN stays NaN, as numpy's maximum(y, 0)
    y[i] = kern::from_f<TY>(v);
  }
}

// db[c] = sum over rows of dy[r, c], summed in row order in float (numpy's sum over axis 0).
template <class TD, class TB>
__global__ void column_sum_kernel(const TD* dy, TB* db, std::int64_t rows, std::int64_t cols) {
  TR_GRID_STRIDE(c, cols) {
    float acc = 0.0f;
    for (std::int64_t r = 0; r < rows; ++r) acc = acc + kern::to_f(dy[r * cols + c]);
    db[c] = kern::from_f<TB>(acc);
  }
}

constexpr int kMaskWord = 32;  // the kernels read and write the relu mask a 32-bit word (32 features) at a time

// The forward's tail with a relu mask: y[r, c] = relu(y[r, c] + bias[c]) and the mask's bits (pre-activation
// > 0), one thread per mask word of one row; the padding bits past `cols` are 0. The pre-activation here is the
// GEMM's output as stored (rounded to y's dtype) plus the bias, as in the plain bias/relu tail; the fused
// epilogue and the CPU take the float sum. A bit can differ only where that sum is within one rounding of 0.
template <class TY, class TB>
__global__ void bias_relu_mask_kernel(TY* y, const TB* bias, std::uint32_t* mask, std::int64_t rows,
                                      std::int64_t cols, std::int64_t words) {
  TR_GRID_STRIDE(i, rows * words) {
    const std::int64_t r = i / words, c0 = (i % words) * kMaskWord;
    std::uint32_t bits = 0;
    for (int j = 0; j < kMaskWord && c0 + j < cols; ++j) {
      float v = kern::to_f(y[r * cols + c0 + j]);
      if (bias != nullptr) v = v + kern::to_f(bias[c0 + j]);
      if (v > 0.0f) bits |= 1u << j;
      y[r * cols + c0 + j] = kern::from_f<TY>(v > 0.0f || v != v ? v : 0.0f);
    }
    mask[i] = bits;
  }
}

// The backward's relu (DRELU's fallback): dx[r, c] = 0 where the mask's bit is clear (a select, as cuBLASLt).
template <class TX>
__global__ void drelu_kernel(TX* dx, const std::uint32_t* mask, std::int64_t rows, std::int64_t cols,
                             std::int64_t words) {
  TR_GRID_STRIDE(i, rows * cols) {
    const std::int64_t r = i / cols, c = i % cols;
    if (((mask[r * words + c / kMaskWord] >> (c % kMaskWord)) & 1u) == 0u) dx[i] = kern::from_f<TX>(0.0f);
  }
}

std::int64_t mask_ld(std::int64_t features) { return (features + 127) / 128 * 128; }

template <class TY, class A>
void launch_bias_act(DT bias_dt, void* y, const void* bias, std::int64_t rows, std::int64_t cols, bool relu,
                     cudaStream_t s, const A& args) {
  const unsigned blocks = kern::blocks_for(rows * cols);
  auto go = [&](auto tb) {
    using TB = typename decltype(tb)::type;
    bias_act_kernel<TY, TB><<<blocks, kern::kThreads, 0, s>>>(static_cast<TY*>(y), static_cast<const TB*>(bias),
                                                               rows, cols, relu ? 1 : 0);
  };
  kern::dispatch_float(bias_dt, args, "bias", go);
  check_launch("fc bias/relu");
}

}  // namespace

std::unique_ptr<Op> fc_fwd(Context& ctx, const FcFwdArgs& args) {
  const std::int64_t n = args.n, k = args.k, o = args.o;
  const DT xdt = args.x.dt, ydt = args.y.dt;
  if (args.w.dt != xdt) bad(args, "w and x must have one dtype");
  const bool relu = args.relu;
  const bool has_bias = static_cast<bool>(args.b), has_mask = static_cast<bool>(args.mask);
  // RELU_AUX applies the relu (tr.backend.rules.fc refuses this call too)
  if (has_mask && !relu) bad(args, "a mask is the relu's: fc_fwd writes one only with relu");
  const DT bdt = has_bias ? args.b.dt : DT::F32;
  GemmSpec spec;
  spec.trans_a = true;
  spec.m = o;
  spec.n = n;
  spec.k = k;
  spec.a_type = spec.b_type = cuda_type(xdt, args, "x");
  spec.d_type = cuda_type(ydt, args, "y");
  spec.compute = compute_for(xdt, args);
  if (has_bias) {
    spec.epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    spec.bias = args.b.ptr;
    spec.bias_type = cuda_type(bdt, args, "b");
  } else if (relu) {
    spec.epilogue = CUBLASLT_EPILOGUE_RELU;
  }
  std::uint32_t* mask = has_mask ? static_cast<std::uint32_t*>(args.mask.ptr) : nullptr;
  const std::int64_t words = mask_ld(o) / kMaskWord;
  if (has_mask) {
    spec.epilogue = has_bias ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_AUX;
    spec.aux = mask;
    spec.aux_ld = mask_ld(o);
  }
  bool fused = false;
  std::shared_ptr<Gemm> gemm = plan_with_fallback(ctx, spec, args, fused);
  const void* x = args.x.ptr;
  const void* w = args.w.ptr;
  void* y = args.y.ptr;
  const void* bias = has_bias ? args.b.ptr : nullptr;
  const bool tail = !fused && (has_bias || relu);
  const FcFwdArgs copy = args;
  return fn_op([=](cudaStream_t s) {
    gemm->run(w, x, y, s);
    if (tail) {
      auto go = [&](auto ty) {
        using TY = typename decltype(ty)::type;
        if (mask != nullptr) {
          auto go_b = [&](auto tb) {
            using TB = typename decltype(tb)::type;
            bias_relu_mask_kernel<TY, TB><<<kern::blocks_for(n * words), kern::kThreads, 0, s>>>(
                static_cast<TY*>(y), static_cast<const TB*>(bias), mask, n, o, words);
          };
          kern::dispatch_float(bdt, copy, "bias", go_b);
          check_launch("fc bias/relu/mask");
        } else {
          launch_bias_act<TY>(bdt, y, bias, n, o, relu, s, copy);
        }
      };
      kern::dispatch_float(ydt, copy, "y", go);
    }
  }, !has_bias && !relu ? "gemm"
     : fused ? (has_mask ? "gemm with fused epilogue and relu mask" : "gemm with fused epilogue")
             : (has_mask ? "gemm + bias/relu/mask kernel" : "gemm + bias/relu kernel"));
}

std::unique_ptr<Op> fc_bwd(Context& ctx, const FcBwdArgs& args) {
  const std::int64_t n = args.n, k = args.k, o = args.o;
  const DT xdt = args.x.dt, dydt = args.dy.dt, dwdt = args.dw.dt;
  if (args.w.dt != xdt || dydt != xdt) bad(args, "x, w and dy must have one dtype");
  const bool has_db = static_cast<bool>(args.db), has_dx = static_cast<bool>(args.dx);
  // the relu kernel would write dx (tr.backend.rules.fc refuses this call too)
  if (args.mask && !has_dx) bad(args, "a mask applies the input's relu to dx; fc_bwd has no dx here");
  const DT dbdt = has_db ? args.db.dt : DT::F32;
  GemmSpec wspec;
  wspec.trans_b = true;
  wspec.m = k;
  wspec.n = o;
  wspec.k = n;
  wspec.a_type = wspec.b_type = cuda_type(xdt, args, "x");
  wspec.d_type = cuda_type(dwdt, args, "dw");
  wspec.compute = compute_for(xdt, args);
  if (has_db) {
    wspec.epilogue = CUBLASLT_EPILOGUE_BGRADB;
    wspec.bias = args.db.ptr;
    wspec.bias_type = cuda_type(dbdt, args, "db");
  }
  bool fused = false;
  std::shared_ptr<Gemm> wgemm = plan_with_fallback(ctx, wspec, args, fused);
  std::shared_ptr<Gemm> xgemm;
  const std::uint32_t* mask = args.mask ? static_cast<const std::uint32_t*>(args.mask.ptr) : nullptr;
  const std::int64_t words = mask_ld(k) / kMaskWord;
  bool drelu_fused = false;
  std::shared_ptr<DeviceBuffer> bgrad_sink;  // DRELU_BGRAD's bias gradient, unused (BGRADB below computes db)
  if (has_dx) {
    GemmSpec xspec;
    xspec.m = k;
    xspec.n = n;
    xspec.k = o;
    xspec.a_type = xspec.b_type = wspec.a_type;
    xspec.d_type = cuda_type(args.dx.dt, args, "dx");
    xspec.compute = wspec.compute;
    if (mask != nullptr && args.epilogues) {
      xspec.aux = const_cast<std::uint32_t*>(mask);
      xspec.aux_ld = mask_ld(k);
      xspec.epilogue = CUBLASLT_EPILOGUE_DRELU;
      if (auto g = Gemm::plan(ctx, xspec)) {
        xgemm = std::move(g);
        drelu_fused = true;
      } else {  // some cuBLASLt versions fuse the relu's gradient only together with a bias gradient
        bgrad_sink = std::make_shared<DeviceBuffer>(static_cast<std::size_t>(k) * 4);
        xspec.epilogue = CUBLASLT_EPILOGUE_DRELU_BGRAD;
        xspec.bias = bgrad_sink->get();
        xspec.bias_type = xspec.d_type;
      }
    }
    if (!xgemm) xgemm = plan_with_fallback(ctx, xspec, args, drelu_fused);
    if (mask == nullptr) drelu_fused = false;
  }
  const DT dxdt = has_dx ? args.dx.dt : DT::F32;
  const bool drelu_kernel_needed = mask != nullptr && !drelu_fused;
  const void* x = args.x.ptr;
  const void* w = args.w.ptr;
  const void* dy = args.dy.ptr;
  void* dw = args.dw.ptr;
  void* db = has_db ? args.db.ptr : nullptr;
  void* dx = has_dx ? args.dx.ptr : nullptr;
  const bool db_kernel = has_db && !fused;
  const FcBwdArgs copy = args;
  return fn_op([=](cudaStream_t s) {
    (void)bgrad_sink;  // owned by the op
    wgemm->run(x, dy, dw, s);
    if (db_kernel) {
      const unsigned blocks = kern::blocks_for(o);
      auto go_dy = [&](auto td) {
        using TD = typename decltype(td)::type;
        auto go_db = [&](auto tb) {
          using TB = typename decltype(tb)::type;
          column_sum_kernel<TD, TB><<<blocks, kern::kThreads, 0, s>>>(static_cast<const TD*>(dy),
                                                                      static_cast<TB*>(db), n, o);
        };
        kern::dispatch_float(dbdt, copy, "db", go_db);
      };
      kern::dispatch_float(dydt, copy, "dy", go_dy);
      check_launch("fc bias gradient");
    }
    if (xgemm) xgemm->run(w, dy, dx, s);
    if (drelu_kernel_needed) {
      auto go_x = [&](auto tx) {
        using TX = typename decltype(tx)::type;
        drelu_kernel<TX><<<kern::blocks_for(n * k), kern::kThreads, 0, s>>>(static_cast<TX*>(dx), mask, n, k, words);
      };
      kern::dispatch_float(dxdt, copy, "dx", go_x);
      check_launch("fc relu gradient");
    }
  }, std::string(!has_db ? "dw gemm" : fused ? "dw gemm with fused BGRADB" : "dw gemm + bias-gradient kernel") +
         (!has_dx ? "" : mask == nullptr ? ", dx gemm" : drelu_fused ? ", dx gemm with fused DRELU"
                                                                      : ", dx gemm + relu-gradient kernel"));
}

}  // namespace tr::native
