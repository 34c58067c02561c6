// Collectives over NCCL: range_allreduce_mean as one ncclAllReduce (ncclAvg, in place) on the op's stream,
// recorded into the CUDA graph like any other op. The communicator is passed as the pointer field comm (a
// tr.backend._native.NcclComm's handle); its owner keeps it alive as long as the graphs.
#include "cuda/nccl.hpp"
#include "ops/args/collective.hpp"
#include "ops/op.hpp"

namespace tr::native {

std::unique_ptr<Op> nccl_allreduce_mean(Context&, const NcclAllreduceMeanArgs& args) {
  const std::int64_t n = args.n;
  if (n < 0) bad(args, "n must be >= 0, got " + std::to_string(n));
  float* v = static_cast<float*>(args.span);
  auto comm = static_cast<cuda::nccl_abi::Comm>(args.comm);
  const cuda::Nccl& api = cuda::nccl();
  return fn_op(
      [=, &api](cudaStream_t s) {
        if (n > 0) {
          // a nonblocking communicator may answer ncclInProgress: wait until the call is enqueued
          cuda::nccl_settle(comm,
                            api.all_reduce(v, v, static_cast<std::size_t>(n), cuda::nccl_abi::kFloat32,
                                           cuda::nccl_abi::kAvg, comm, s),
                            "ncclAllReduce(avg)");
        }
      },
      "ncclAllReduce avg " + std::to_string(n) + " fp32");
}

}  // namespace tr::native
