// Copies and shape ops: memcpy (copy, flatten_fwd/bwd: equal bytes), accumulate (y += x), channel padding
// (strided row copy with a zeroed tail), and the residual add (y = a + b, optional relu).
#include <cstring>

#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "ops/args/copy.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

// dst = src unless *flag != 0 (a skipped step keeps the destination); 16-byte words when both are aligned.
template <class W>
__global__ void copy_unless_flagged_kernel(const W* src, W* dst, std::int64_t n, const int* flag) {
  if (*flag != 0) return;
  TR_GRID_STRIDE(i, n) { dst[i] = src[i]; }
}

template <class TX, class TY>
__global__ void accumulate_kernel(const TX* x, TY* y, std::int64_t n) {
  TR_GRID_STRIDE(i, n) { y[i] = kern::from_f<TY>(kern::to_f(y[i]) + kern::to_f(x[i])); }
}

// dst[r, j] = src[r, j] for j < cols, 0 for cols <= j < dst_cols (elements of E bytes).
template <class E>
__global__ void row_copy_kernel(const E* src, E* dst, std::int64_t rows, std::int64_t src_cols,
                                std::int64_t dst_cols, std::int64_t cols) {
  TR_GRID_STRIDE(i, rows * dst_cols) {
    const std::int64_t r = i / dst_cols, j = i - r * dst_cols;
    if (j < cols) {
      dst[i] = src[r * src_cols + j];
    } else {
      E zero;
      memset(&zero, 0, sizeof(E));
      dst[i] = zero;
    }
  }
}

template <class TA, class TB, class TY>
__global__ void add_kernel(const TA* a, const TB* b, TY* y, std::int64_t n, int relu) {
  TR_GRID_STRIDE(i, n) {
    float v = kern::to_f(a[i]) + kern::to_f(b[i]);
    if (relu) v = kern::nan_max(v, 0.0f);
    y[i] = kern::from_f<TY>(v);
  }
}

__global__ void never_kernel() {}

}  // namespace

std::unique_ptr<Op> memcpy(Context&, const MemcpyArgs& args) {
  const void* src = args.src;
  void* dst = args.dst;
  const auto nbytes = static_cast<std::size_t>(args.nbytes);
  return fn_op([=](cudaStream_t s) {
    if (nbytes > 0) cuda::check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
  });
}

std::unique_ptr<Op> copy_unless_flagged(Context&, const CopyUnlessFlaggedArgs& args) {
  const void* src = args.src;
  void* dst = args.dst;
  const int* flag = static_cast<const int*>(args.flag.ptr);
  const std::int64_t nbytes = args.nbytes;
  const bool wide = nbytes % 16 == 0 && reinterpret_cast<std::uintptr_t>(src) % 16 == 0 &&
                    reinterpret_cast<std::uintptr_t>(dst) % 16 == 0;
  return fn_op([=](cudaStream_t s) {
    if (wide) {
      copy_unless_flagged_kernel<uint4><<<kern::blocks_for(nbytes / 16), kern::kThreads, 0, s>>>(
          static_cast<const uint4*>(src), static_cast<uint4*>(dst), nbytes / 16, flag);
    } else {
      copy_unless_flagged_kernel<std::uint8_t><<<kern::blocks_for(nbytes), kern::kThreads, 0, s>>>(
          static_cast<const std::uint8_t*>(src), static_cast<std::uint8_t*>(dst), nbytes, flag);
    }
    check_launch("range_copy (flagged)");
  });
}

std::unique_ptr<Op> accumulate(Context&, const AccumulateArgs& args) {
  const std::int64_t n = args.n;
  const DT xdt = args.x.dt, ydt = args.y.dt;
  const void* x = args.x.ptr;
  void* y = args.y.ptr;
  kern::dispatch_float(xdt, args, "x", [](auto) {});
  kern::dispatch_float(ydt, args, "y", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      kern::dispatch_float(ydt, args, "y", [&](auto ty) {
        using TY = typename decltype(ty)::type;
        accumulate_kernel<TX, TY>
            <<<kern::blocks_for(n), kern::kThreads, 0, s>>>(static_cast<const TX*>(x), static_cast<TY*>(y), n);
      });
    });
    check_launch("accumulate");
  });
}

std::unique_ptr<Op> row_copy(Context&, const RowCopyArgs& args) {
  const std::int64_t rows = args.rows, src_cols = args.src_cols, dst_cols = args.dst_cols;
  const std::int64_t cols = args.cols;
  const int esize = static_cast<int>(args.esize);
  if (esize != 1 && esize != 2 && esize != 4) bad(args, "element size must be 1, 2 or 4, got " + std::to_string(esize));
  const void* src = args.src;
  void* dst = args.dst;
  return fn_op([=](cudaStream_t s) {
    const unsigned blocks = kern::blocks_for(rows * dst_cols);
    if (esize == 1) {
      row_copy_kernel<std::uint8_t><<<blocks, kern::kThreads, 0, s>>>(
          static_cast<const std::uint8_t*>(src), static_cast<std::uint8_t*>(dst), rows, src_cols, dst_cols, cols);
    } else if (esize == 2) {
      row_copy_kernel<std::uint16_t><<<blocks, kern::kThreads, 0, s>>>(
          static_cast<const std::uint16_t*>(src), static_cast<std::uint16_t*>(dst), rows, src_cols, dst_cols, cols);
    } else {
      row_copy_kernel<std::uint32_t><<<blocks, kern::kThreads, 0, s>>>(
          static_cast<const std::uint32_t*>(src), static_cast<std::uint32_t*>(dst), rows, src_cols, dst_cols, cols);
    }
    check_launch("row copy");
  });
}

std::unique_ptr<Op> add_fwd(Context&, const AddFwdArgs& args) {
  const std::int64_t n = args.n;
  const int relu = args.relu ? 1 : 0;
  const DT adt = args.a.dt, bdt = args.b.dt, ydt = args.y.dt;
  const void* a = args.a.ptr;
  const void* b = args.b.ptr;
  void* y = args.y.ptr;
  for (DT dt : {adt, bdt, ydt}) kern::dispatch_float(dt, args, "a, b, y", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(adt, args, "a", [&](auto ta) {
      using TA = typename decltype(ta)::type;
      kern::dispatch_float(bdt, args, "b", [&](auto tb) {
        using TB = typename decltype(tb)::type;
        kern::dispatch_float(ydt, args, "y", [&](auto ty) {
          using TY = typename decltype(ty)::type;
          add_kernel<TA, TB, TY><<<kern::blocks_for(n), kern::kThreads, 0, s>>>(
              static_cast<const TA*>(a), static_cast<const TB*>(b), static_cast<TY*>(y), n, relu);
        });
      });
    });
    check_launch("add_fwd");
  });
}

// For tests of capture-failure reporting: a launch with an empty grid fails with "invalid configuration".
std::unique_ptr<Op> debug_invalid_launch(Context&, const DebugInvalidLaunchArgs&) {
  return fn_op([](cudaStream_t s) {
    never_kernel<<<0, 1, 0, s>>>();
    check_launch("debug_invalid_launch");
  });
}

}  // namespace tr::native
