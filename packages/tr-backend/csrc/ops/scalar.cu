// Device-side scalars: step counters, the skipped-step counter, the learning-rate table lookup, the loss scale
// (static or dynamic) (tr/backend/cpu/ops/scalar.py). One tiny kernel each, so a step needs no host involvement.
// The counters and the loss scale take gradient accumulation's hold (null when absent): set, they do nothing.
#include "cuda/context.hpp"
#include "ops/args/scalar.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

__device__ __forceinline__ bool held(const int* hold) { return hold != nullptr && *hold != 0; }

template <class T>
__global__ void increment_kernel(T* x, int n, const int* hold) {
  if (held(hold)) return;
  for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = x[i] + static_cast<T>(1);
}

__global__ void lr_lookup_kernel(const float* table, int len, const int* step, float* lr) {
  const int s = *step;
  const int last = len - 1;
  *lr = table[s < 0 ? 0 : (s < last ? s : last)];
}

// The seed's static rule: halve on overflow, never below 1, never grow.
__global__ void loss_scale_kernel(const int* flag, float* scale, const int* hold) {
  if (held(hold)) return;
  if (*flag != 0) {
    const double half = static_cast<double>(*scale) * 0.5;
    *scale = static_cast<float>(half > 1.0 ? half : 1.0);
  }
}

// torch.amp.GradScaler's rule (_amp_update_scale_, backoff 0.5, growth 2), in float32: an overflow halves the
// scale and restarts the count of clean steps; the growth_interval-th clean step in a row doubles it (kept only
// when finite).
__global__ void dynamic_loss_scale_kernel(const int* flag, float* scale, int* tracker, int growth_interval,
                                          const int* hold) {
  if (held(hold)) return;
  if (*flag != 0) {
    *scale = *scale * 0.5f;
    *tracker = 0;
    return;
  }
  const int clean = *tracker + 1;
  if (clean == growth_interval) {
    const float grown = *scale * 2.0f;
    if (isfinite(grown)) *scale = grown;
    *tracker = 0;
  } else {
    *tracker = clean;
  }
}

__global__ void count_flag_kernel(const int* flag, int* count, const int* hold) {
  if (held(hold)) return;
  if (*flag != 0) *count += 1;
}

}  // namespace

std::unique_ptr<Op> scalar_increment(Context&, const ScalarIncrementArgs& args) {
  const int n = static_cast<int>(args.n);
  const DT dt = args.x.dt;
  void* x = args.x.ptr;
  const int* hold = static_cast<const int*>(args.hold.ptr);
  if (dt != DT::I32 && dt != DT::F32) bad(args, std::string("x must be INT32 or FP32, got ") + dtype_name(dt));
  return fn_op([=](cudaStream_t s) {
    if (dt == DT::I32) {
      increment_kernel<int><<<1, 32, 0, s>>>(static_cast<int*>(x), n, hold);
    } else {
      increment_kernel<float><<<1, 32, 0, s>>>(static_cast<float*>(x), n, hold);
    }
    check_launch("scalar_increment");
  });
}

std::unique_ptr<Op> lr_lookup(Context&, const LrLookupArgs& args) {
  const int len = static_cast<int>(args.len);
  if (len < 1) bad(args, "the learning-rate table is empty");
  const float* table = static_cast<const float*>(args.table.ptr);
  const int* step = static_cast<const int*>(args.step.ptr);
  float* lr = static_cast<float*>(args.lr.ptr);
  return fn_op([=](cudaStream_t s) {
    lr_lookup_kernel<<<1, 1, 0, s>>>(table, len, step, lr);
    check_launch("lr_lookup");
  });
}

std::unique_ptr<Op> loss_scale_update(Context&, const LossScaleUpdateArgs& args) {
  const int* flag = static_cast<const int*>(args.flag.ptr);
  float* scale = static_cast<float*>(args.scale.ptr);
  const int* hold = static_cast<const int*>(args.hold.ptr);
  if (!args.dynamic) {
    return fn_op([=](cudaStream_t s) {
      loss_scale_kernel<<<1, 1, 0, s>>>(flag, scale, hold);
      check_launch("loss_scale_update");
    });
  }
  if (!args.tracker) bad(args, "pointer argument 'tracker' is missing (the dynamic rule needs it)");
  int* tracker = static_cast<int*>(args.tracker.ptr);
  const std::int64_t interval = args.growth_interval;
  if (interval < 1 || interval > INT32_MAX) bad(args, "growth_interval must be in [1, 2^31)");
  const int growth_interval = static_cast<int>(interval);
  return fn_op([=](cudaStream_t s) {
    dynamic_loss_scale_kernel<<<1, 1, 0, s>>>(flag, scale, tracker, growth_interval, hold);
    check_launch("loss_scale_update");
  });
}

std::unique_ptr<Op> count_flag(Context&, const CountFlagArgs& args) {
  const int* flag = static_cast<const int*>(args.flag.ptr);
  int* count = static_cast<int*>(args.count.ptr);
  const int* hold = static_cast<const int*>(args.hold.ptr);
  return fn_op([=](cudaStream_t s) {
    count_flag_kernel<<<1, 1, 0, s>>>(flag, count, hold);
    check_launch("count_flag");
  });
}

}  // namespace tr::native
