// Stochastic depth (drop path) with a counter-based keep decision a sample, bit-identical to the CPU backend
// (tr/backend/cpu/ops/drop_path.py).
//
// drop_path_fwd: one block advances the seed (one little-endian uint64), seed <- splitmix64(seed), and stores it
// back, then decides every sample: mask[s] = Philox4x32-10 uniform(seed, s) >= p; a second kernel writes
// y[s] = x[s] / (1 - p) where kept, else 0 (also for inf or NaN: the branch is dropped). A block row per sample
// (blockIdx.y), so no element divides its index by the sample size. drop_path_bwd: dx[s] = mask[s] ? dy[s] / (1 - p)
// : 0 (dx may share dy's bytes: each element is read, then written, by one thread).
#include <algorithm>
#include <string>

#include "cuda/context.hpp"
#include "ops/args/drop_path.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

constexpr unsigned kMaxGridY = 65535;

// One block: the draw's key is the advanced seed, read by every thread from shared memory.
__global__ void drop_path_mask_kernel(unsigned long long* seed, signed char* mask, std::int64_t n, float p) {
  __shared__ unsigned long long key;
  if (threadIdx.x == 0) {
    key = kern::splitmix64(*seed);
    *seed = key;
  }
  __syncthreads();
  for (std::int64_t s = threadIdx.x; s < n; s += blockDim.x) {
    mask[s] = kern::philox_uniform(key, static_cast<unsigned long long>(s)) >= p ? 1 : 0;
  }
}

// y[s, i] = mask[s] ? x[s, i] / q : 0 for the per-sample elements i (x and y may be one buffer).
template <class TX, class TY>
__global__ void drop_path_apply_kernel(const TX* x, TY* y, const signed char* mask, std::int64_t n,
                                       std::int64_t per, float q) {
  for (std::int64_t s = blockIdx.y; s < n; s += gridDim.y) {  // uniform across the block
    const bool keep = mask[s] != 0;
    const TX* xs = x + s * per;
    TY* ys = y + s * per;
    TR_GRID_STRIDE(i, per) { ys[i] = kern::from_f<TY>(keep ? kern::to_f(xs[i]) / q : 0.0f); }
  }
}

template <class A>
void check_sizes(const A& args) {
  if (args.n < 1 || args.per_sample < 1) {
    bad(args, "sizes n=" + std::to_string(args.n) + " per_sample=" + std::to_string(args.per_sample) +
                  " must be positive");
  }
  if (!(args.p >= 0.0 && args.p < 1.0)) bad(args, "p=" + std::to_string(args.p) + " must be in [0, 1)");
}

// Blocks along a sample's elements: together with the sample rows, about as many blocks as one grid-stride launch
// over every element would take.
dim3 apply_grid(std::int64_t n, std::int64_t per) {
  const unsigned rows = static_cast<unsigned>(std::min<std::int64_t>(n, kMaxGridY));
  const std::int64_t total = kern::blocks_for(n * per);
  const std::int64_t cols = std::max<std::int64_t>(1, std::min<std::int64_t>(kern::blocks_for(per), total / rows));
  return dim3(static_cast<unsigned>(cols), rows);
}

}  // namespace

std::unique_ptr<Op> drop_path_fwd(Context&, const DropPathFwdArgs& args) {
  check_sizes(args);
  const std::int64_t n = args.n, per = args.per_sample;
  const float p = static_cast<float>(args.p), q = static_cast<float>(1.0 - args.p);
  const DT xdt = args.x.dt, ydt = args.y.dt;
  const void* x = args.x.ptr;
  void* y = args.y.ptr;
  auto* mask = static_cast<signed char*>(args.mask.ptr);
  auto* seed = static_cast<unsigned long long*>(args.seed.ptr);
  kern::dispatch_float(xdt, args, "x", [](auto) {});
  kern::dispatch_float(ydt, args, "y", [](auto) {});
  const dim3 grid = apply_grid(n, per);
  return fn_op([=](cudaStream_t s) {
    drop_path_mask_kernel<<<1, kern::kThreads, 0, s>>>(seed, mask, n, p);
    check_launch("drop_path mask");
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      kern::dispatch_float(ydt, args, "y", [&](auto ty) {
        using TY = typename decltype(ty)::type;
        drop_path_apply_kernel<TX, TY><<<grid, kern::kThreads, 0, s>>>(static_cast<const TX*>(x),
                                                                        static_cast<TY*>(y), mask, n, per, q);
      });
    });
    check_launch("drop_path_fwd");
  });
}

std::unique_ptr<Op> drop_path_bwd(Context&, const DropPathBwdArgs& args) {
  check_sizes(args);
  const std::int64_t n = args.n, per = args.per_sample;
  const float q = static_cast<float>(1.0 - args.p);
  const DT ddt = args.dy.dt, xdt = args.dx.dt;
  const void* dy = args.dy.ptr;
  const auto* mask = static_cast<const signed char*>(args.mask.ptr);
  void* dx = args.dx.ptr;
  kern::dispatch_float(ddt, args, "dy", [](auto) {});
  kern::dispatch_float(xdt, args, "dx", [](auto) {});
  const dim3 grid = apply_grid(n, per);
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(ddt, args, "dy", [&](auto td) {
      using TD = typename decltype(td)::type;
      kern::dispatch_float(xdt, args, "dx", [&](auto tx) {
        using TX = typename decltype(tx)::type;
        drop_path_apply_kernel<TD, TX><<<grid, kern::kThreads, 0, s>>>(static_cast<const TD*>(dy),
                                                                        static_cast<TX*>(dx), mask, n, per, q);
      });
    });
    check_launch("drop_path_bwd");
  });
}

}  // namespace tr::native
