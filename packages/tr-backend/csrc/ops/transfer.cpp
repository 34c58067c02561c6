// h2d_copy: cudaMemcpyAsync from a host staging buffer (pinned, or registered by the backend) into the device
// input tensors. In a captured graph the copies become memcpy nodes; when other host buffers are bound later,
// the backend re-points those nodes (Graph::set_memcpy_source) instead of capturing again.
#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "ops/args/transfer.hpp"
#include "ops/op.hpp"

namespace tr::native {

std::unique_ptr<Op> h2d_copy(Context&, const H2dCopyArgs& args) {
  const void* src_labels = args.src_labels;
  const void* src_data = args.src_data;
  void* labels = args.labels.ptr;
  void* data = args.data.ptr;
  const auto label_bytes = static_cast<std::size_t>(args.label_bytes);
  const auto data_bytes = static_cast<std::size_t>(args.data_bytes);
  return fn_op([=](cudaStream_t s) {
    if (label_bytes > 0) {
      cuda::check(cudaMemcpyAsync(labels, src_labels, label_bytes, cudaMemcpyHostToDevice, s),
                  "cudaMemcpyAsync(labels, host -> device)");
    }
    if (data_bytes > 0) {
      cuda::check(cudaMemcpyAsync(data, src_data, data_bytes, cudaMemcpyHostToDevice, s),
                  "cudaMemcpyAsync(data, host -> device)");
    }
  });
}

}  // namespace tr::native
