// Dropout with a counter-based mask, bit-identical to the CPU backend (tr/backend/cpu/ops/dropout.py).
//
// The seed tensor holds one little-endian uint64. dropout_fwd first advances it on the device,
// seed <- splitmix64(seed) (a one-thread kernel, so no host involvement), then keeps element i (flat NHWC
// index) iff Philox4x32-10 uniform(seed, i) >= p; y = x / (1 - p) where kept, else 0; mask INT8 0/1.
// Backward: dx = mask ? dy / (1 - p) : 0 (dx may share dy's bytes).
#include "cuda/context.hpp"
#include "ops/args/dropout.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

__global__ void advance_seed_kernel(unsigned long long* seed) { *seed = kern::splitmix64(*seed); }

template <class TX, class TY>
__global__ void dropout_fwd_kernel(const TX* x, TY* y, signed char* mask, const unsigned long long* seed,
                                   std::int64_t n, float p, float q) {
  const unsigned long long key = *seed;
  TR_GRID_STRIDE(i, n) {
    const bool keep = kern::philox_uniform(key, static_cast<unsigned long long>(i)) >= p;
    mask[i] = keep ? 1 : 0;
    y[i] = kern::from_f<TY>(keep ? kern::to_f(x[i]) / q : 0.0f);
  }
}

template <class TD, class TX>
__global__ void dropout_bwd_kernel(const TD* dy, const signed char* mask, TX* dx, std::int64_t n, float q) {
  TR_GRID_STRIDE(i, n) { dx[i] = kern::from_f<TX>(mask[i] != 0 ? kern::to_f(dy[i]) / q : 0.0f); }
}

}  // namespace

std::unique_ptr<Op> dropout_fwd(Context&, const DropoutFwdArgs& args) {
  const std::int64_t n = args.n;
  const double pd = args.p;
  const float p = static_cast<float>(pd), q = static_cast<float>(1.0 - pd);
  const DT xdt = args.x.dt, ydt = args.y.dt;
  const void* x = args.x.ptr;
  void* y = args.y.ptr;
  auto* mask = static_cast<signed char*>(args.mask.ptr);
  auto* seed = static_cast<unsigned long long*>(args.seed.ptr);
  kern::dispatch_float(xdt, args, "x", [](auto) {});
  kern::dispatch_float(ydt, args, "y", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    advance_seed_kernel<<<1, 1, 0, s>>>(seed);
    check_launch("dropout seed");
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      kern::dispatch_float(ydt, args, "y", [&](auto ty) {
        using TY = typename decltype(ty)::type;
        dropout_fwd_kernel<TX, TY><<<kern::blocks_for(n), kern::kThreads, 0, s>>>(
            static_cast<const TX*>(x), static_cast<TY*>(y), mask, seed, n, p, q);
      });
    });
    check_launch("dropout_fwd");
  });
}

std::unique_ptr<Op> dropout_bwd(Context&, const DropoutBwdArgs& args) {
  const std::int64_t n = args.n;
  const float q = static_cast<float>(1.0 - args.p);
  const DT ddt = args.dy.dt, xdt = args.dx.dt;
  const void* dy = args.dy.ptr;
  const auto* mask = static_cast<const signed char*>(args.mask.ptr);
  void* dx = args.dx.ptr;
  kern::dispatch_float(ddt, args, "dy", [](auto) {});
  kern::dispatch_float(xdt, args, "dx", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(ddt, args, "dy", [&](auto td) {
      using TD = typename decltype(td)::type;
      kern::dispatch_float(xdt, args, "dx", [&](auto tx) {
        using TX = typename decltype(tx)::type;
        dropout_bwd_kernel<TD, TX><<<kern::blocks_for(n), kern::kThreads, 0, s>>>(
            static_cast<const TD*>(dy), mask, static_cast<TX*>(dx), n, q);
      });
    });
    check_launch("dropout_bwd");
  });
}

}  // namespace tr::native
