// Range ops over byte ranges of whole regions (one launch however many layers): clear (memset), cast,
// finite check (+clip), scale, EMA, and the metric accumulation. range_copy is the memcpy op (copy.cu) and a
// one-rank all-reduce records nothing. Semantics: tr/backend/cpu/ops/range/basic.py.
#include <cmath>

#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "ops/args/range.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

template <class TS, class TD>
__global__ void cast_kernel(const TS* src, TD* dst, std::int64_t n) {
  TR_GRID_STRIDE(i, n) { dst[i] = kern::from_f<TD>(kern::to_f(src[i])); }
}

// flag = 1 if any element is not finite (a plain store: every writer writes the same value, no atomics);
// with clip > 0, finite and infinite elements are clamped to [-clip, clip] and NaN stays NaN (numpy's clip).
// A set hold (gradient accumulation's, may be null) reads nothing: flag_kernel has set the flag already.
__global__ void check_finite_kernel(float* v, std::int64_t n, int* flag, float clip, const int* hold) {
  if (hold != nullptr && *hold != 0) return;
  bool bad = false;
  TR_GRID_STRIDE(i, n) {
    const float x = v[i];
    if (!isfinite(x)) bad = true;
    if (clip > 0.0f && x == x) v[i] = fminf(fmaxf(x, -clip), clip);
  }
  if (bad) *flag = 1;
}

// The flag's start with a hold: set (every flagged op skips a micro-step inside its window) or cleared.
__global__ void flag_kernel(int* flag, const int* hold) { *flag = *hold != 0 ? 1 : 0; }

__global__ void scale_kernel(float* v, std::int64_t n, const float* factor) {
  const float f = *factor;
  TR_GRID_STRIDE(i, n) { v[i] = v[i] * f; }
}

// A set flag (a skipped step) leaves dst as it is; flag may be null. With a step counter (a warmup), the decay
// is decay * (1 - exp(-step / warmup)) in float64, it and 1 minus it rounded to float32 (rules/range.py's Ema),
// computed once a block.
__global__ void ema_kernel(const float* src, float* dst, std::int64_t n, double decay, const int* flag,
                           const int* step, double warmup) {
  if (flag != nullptr && *flag != 0) return;
  __shared__ float coef[2];
  if (threadIdx.x == 0) {
    const double dd = step != nullptr ? decay * -expm1(-static_cast<double>(*step) / warmup) : decay;
    coef[0] = static_cast<float>(dd);
    coef[1] = static_cast<float>(1.0 - dd);
  }
  __syncthreads();
  const float d = coef[0], keep = coef[1];
  TR_GRID_STRIDE(i, n) { dst[i] = dst[i] * d + src[i] * keep; }
}

// accum += result * batch[0] as the CPU backend's numpy does it (NEP 50): the product in float32 (the batch
// is a weak Python float), the sum in float64, rounded once to float32; samples += batch[0] in float32. A set
// flag (a skipped step) leaves both as they are. flag and samples may be null.
template <class TB>
__global__ void accum_kernel(const float* result, float* accum, const TB* batch, int n, const int* flag,
                             float* samples) {
  if (flag != nullptr && *flag != 0) return;
  const float b = static_cast<float>(static_cast<double>(batch[0]));
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    accum[i] = static_cast<float>(static_cast<double>(accum[i]) + static_cast<double>(result[i] * b));
  }
  if (samples != nullptr && threadIdx.x == 0) *samples = *samples + b;
}

}  // namespace

std::unique_ptr<Op> memset(Context&, const MemsetArgs& args) {
  void* dst = args.dst;
  const auto nbytes = static_cast<std::size_t>(args.nbytes);
  return fn_op([=](cudaStream_t s) {
    if (nbytes > 0) cuda::check(cudaMemsetAsync(dst, 0, nbytes, s), "cudaMemsetAsync");
  });
}

std::unique_ptr<Op> range_cast(Context&, const RangeCastArgs& args) {
  const std::int64_t n = args.n;
  const DT sdt = args.src.dt, ddt = args.dst.dt;
  const void* src = args.src.ptr;
  void* dst = args.dst.ptr;
  kern::dispatch_float(sdt, args, "src", [](auto) {});
  kern::dispatch_float(ddt, args, "dst", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(sdt, args, "src", [&](auto ts) {
      using TS = typename decltype(ts)::type;
      kern::dispatch_float(ddt, args, "dst", [&](auto td) {
        using TD = typename decltype(td)::type;
        cast_kernel<TS, TD>
            <<<kern::blocks_for(n), kern::kThreads, 0, s>>>(static_cast<const TS*>(src), static_cast<TD*>(dst), n);
      });
    });
    check_launch("range_cast");
  });
}

// accumulate: OR into the flag (the kernel only ever stores 1), so the flag is not cleared first. A hold (null
// when absent) is read on the device: without accumulate, flag_kernel replaces the memset (flag = hold != 0);
// the check kernel returns when it is set.
std::unique_ptr<Op> range_check_finite(Context&, const RangeCheckFiniteArgs& args) {
  const std::int64_t n = args.n;
  const float clip = static_cast<float>(args.clip);
  const bool accumulate = args.accumulate;
  float* v = n > 0 ? static_cast<float*>(args.span) : nullptr;
  int* flag = static_cast<int*>(args.flag.ptr);
  const int* hold = static_cast<const int*>(args.hold.ptr);
  return fn_op([=](cudaStream_t s) {
    if (!accumulate && hold == nullptr) {
      cuda::check(cudaMemsetAsync(flag, 0, sizeof(int), s), "cudaMemsetAsync(flag)");
    } else if (!accumulate) {
      flag_kernel<<<1, 1, 0, s>>>(flag, hold);
      check_launch("range_check_finite flag");
    }
    if (n > 0) {
      check_finite_kernel<<<kern::blocks_for(n), kern::kThreads, 0, s>>>(v, n, flag, clip, hold);
      check_launch("range_check_finite");
    }
  });
}

std::unique_ptr<Op> range_scale(Context&, const RangeScaleArgs& args) {
  const std::int64_t n = args.n;
  float* v = static_cast<float*>(args.span);
  const float* factor = static_cast<const float*>(args.factor.ptr);
  return fn_op([=](cudaStream_t s) {
    scale_kernel<<<kern::blocks_for(n), kern::kThreads, 0, s>>>(v, n, factor);
    check_launch("range_scale");
  });
}

std::unique_ptr<Op> range_ema(Context&, const RangeEmaArgs& args) {
  const std::int64_t n = args.n;
  const double decay = args.decay, warmup = args.warmup;
  if (!(warmup >= 0.0 && std::isfinite(warmup))) bad(args, "warmup must be a finite number >= 0");
  if (warmup > 0.0 && !args.step) bad(args, "a warmup needs the step counter");
  const float* src = static_cast<const float*>(args.src);
  float* dst = static_cast<float*>(args.dst);
  const int* flag = static_cast<const int*>(args.flag.ptr);  // null when absent
  const int* step = warmup > 0.0 ? static_cast<const int*>(args.step.ptr) : nullptr;
  return fn_op([=](cudaStream_t s) {
    ema_kernel<<<kern::blocks_for(n), kern::kThreads, 0, s>>>(src, dst, n, decay, flag, step, warmup);
    check_launch("range_ema");
  });
}

std::unique_ptr<Op> accum_metrics(Context&, const AccumMetricsArgs& args) {
  const int n = static_cast<int>(args.n);
  const float* result = static_cast<const float*>(args.result.ptr);
  float* accum = static_cast<float*>(args.accum.ptr);
  const void* batch = args.batch.ptr;
  const DT bdt = args.batch.dt;
  if (bdt != DT::F32 && bdt != DT::I32) bad(args, std::string("batch must be FP32 or INT32, got ") + dtype_name(bdt));
  const int* flag = static_cast<const int*>(args.flag.ptr);  // null when absent
  float* samples = static_cast<float*>(args.samples.ptr);    // null when absent
  return fn_op([=](cudaStream_t s) {
    if (bdt == DT::F32) {
      accum_kernel<float><<<1, 32, 0, s>>>(result, accum, static_cast<const float*>(batch), n, flag, samples);
    } else {
      accum_kernel<int><<<1, 32, 0, s>>>(result, accum, static_cast<const int*>(batch), n, flag, samples);
    }
    check_launch("accum_metrics");
  });
}

}  // namespace tr::native
