// Gradient accumulation (task.accumulate; tr/backend/cpu/ops/accum.py): the window's place, the gradients' sum over
// a window of micro-steps and the window's mean result. Every decision is read on the device (pos, hold, first), so
// one captured step serves every micro-step. Each sum is one float32 add an element (--fmad=false: a product is
// rounded before it is added), the CPU backend's bytes.
#include <cstdint>
#include <string>

#include "cuda/context.hpp"
#include "ops/args/accum.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

// One thread: rules/accum.py's Window.at, in 64-bit integers; div is exact (the factory checks k * m < 2^24).
__global__ void window_kernel(int* pos, int* hold, int* first, float* div, std::int64_t k, std::int64_t steps,
                              std::int64_t m, std::int64_t last) {
  const std::int64_t p = *pos;
  const std::int64_t w0 = p - p % k;
  const std::int64_t n = k < steps - w0 ? k : steps - w0;
  *hold = p != w0 + n - 1 ? 1 : 0;
  *first = p == w0 ? 1 : 0;
  *div = static_cast<float>((n - 1) * m + (w0 + n == steps ? last : m));
  *pos = p + 1 == steps ? 0 : static_cast<int>(p + 1);
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// hold: acc = first ? src : acc + src; closing: src = first ? src : acc + src (a window of one: src is its sum).
// Vec: src and acc are 16-byte aligned, so n4 = n / 4 float4s go first and the tail element by element.
template <bool Vec>
__global__ void accumulate_kernel(float* src, float* acc, std::int64_t n, const int* hold, const int* first) {
  const bool h = *hold != 0, f = *first != 0;
  if (!h && f) return;
  float* dst = h ? acc : src;
  std::int64_t done = 0;
  if (Vec) {
    const std::int64_t n4 = n / 4;
    const float4* s4 = reinterpret_cast<const float4*>(src);
    const float4* a4 = reinterpret_cast<const float4*>(acc);
    float4* d4 = reinterpret_cast<float4*>(dst);
    TR_GRID_STRIDE(i, n4) { d4[i] = f ? s4[i] : add4(a4[i], s4[i]); }
    done = n4 * 4;
  }
  TR_GRID_STRIDE(j, n - done) {
    const std::int64_t i = done + j;
    dst[i] = f ? src[i] : acc[i] + src[i];
  }
}

// One thread, in float32: first: window = 0; window[:n] += result * b; window[n] += b; not hold: result = the mean.
__global__ void window_result_kernel(float* result, float* window, const float* batch, const int* hold,
                                     const int* first, int n) {
  const float b = *batch;
  const bool f = *first != 0;
  for (int i = 0; i < n; ++i) window[i] = (f ? 0.0f : window[i]) + result[i] * b;
  window[n] = (f ? 0.0f : window[n]) + b;
  if (*hold != 0) return;
  const float samples = window[n];
  for (int i = 0; i < n; ++i) result[i] = window[i] / samples;
}

}  // namespace

std::unique_ptr<Op> accum_window(Context&, const AccumWindowArgs& args) {
  const std::int64_t k = args.k, steps = args.steps, m = args.batch, last = args.last_batch;
  if (k < 2) bad(args, "k must be >= 2");
  if (steps < 1 || steps > INT32_MAX) bad(args, "steps must be in [1, 2^31)");
  if (m < 1 || last < 1 || last > m) bad(args, "batch must be >= 1 and last_batch in [1, batch]");
  if (k * m >= (std::int64_t{1} << 24)) bad(args, "k * batch must be < 2^24 (div is FP32)");
  int* pos = static_cast<int*>(args.pos.ptr);
  int* hold = static_cast<int*>(args.hold.ptr);
  int* first = static_cast<int*>(args.first.ptr);
  float* div = static_cast<float*>(args.div.ptr);
  return fn_op([=](cudaStream_t s) {
    window_kernel<<<1, 1, 0, s>>>(pos, hold, first, div, k, steps, m, last);
    check_launch("accum_window");
  });
}

std::unique_ptr<Op> range_accumulate(Context&, const RangeAccumulateArgs& args) {
  const std::int64_t n = args.n;
  if (n < 1) bad(args, "n must be >= 1");
  float* src = static_cast<float*>(args.src);
  float* acc = static_cast<float*>(args.acc);
  const int* hold = static_cast<const int*>(args.hold.ptr);
  const int* first = static_cast<const int*>(args.first.ptr);
  const bool vec = (reinterpret_cast<std::uintptr_t>(src) | reinterpret_cast<std::uintptr_t>(acc)) % 16 == 0;
  return fn_op([=](cudaStream_t s) {
    if (vec) {
      accumulate_kernel<true><<<kern::blocks_for((n + 3) / 4), kern::kThreads, 0, s>>>(src, acc, n, hold, first);
    } else {
      accumulate_kernel<false><<<kern::blocks_for(n), kern::kThreads, 0, s>>>(src, acc, n, hold, first);
    }
    check_launch("range_accumulate");
  });
}

std::unique_ptr<Op> window_result(Context&, const WindowResultArgs& args) {
  if (args.n < 1 || args.n > INT32_MAX) bad(args, "n must be in [1, 2^31)");
  const int n = static_cast<int>(args.n);
  float* result = static_cast<float*>(args.result.ptr);
  float* window = static_cast<float*>(args.window.ptr);
  const float* batch = static_cast<const float*>(args.batch.ptr);
  const int* hold = static_cast<const int*>(args.hold.ptr);
  const int* first = static_cast<const int*>(args.first.ptr);
  return fn_op([=](cudaStream_t s) {
    window_result_kernel<<<1, 1, 0, s>>>(result, window, batch, hold, first, n);
    check_launch("window_result");
  });
}

}  // namespace tr::native
