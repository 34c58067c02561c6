// What a cuDNN-frontend op family (convolutions, SDPA attention) keeps per device for the life of the process: a
// cuDNN handle and one workspace shared by the family's ops. Each family holds its own instance under its own lock
// (it sets the handle's stream per execution), so the callers serialise; this only keeps the bookkeeping in one
// place. Included only where the build has the frontend (TR_HAVE_CUDNN_FRONTEND).
#pragma once

#include <cudnn_frontend.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "cuda/context.hpp"
#include "native/errors.hpp"
#include "ops/op.hpp"

namespace tr::native {

class CudnnPerDevice {
 public:
  // The device's handle, created on first use (through the frontend's dynamic loading).
  cudnnHandle_t handle(int device) {
    auto it = handles_.find(device);
    if (it != handles_.end()) return it->second;
    cuda::DeviceGuard guard(device);
    cudnnHandle_t h = nullptr;
    const cudnnStatus_t st = cudnn_frontend::detail::create_handle(&h);
    if (st != CUDNN_STATUS_SUCCESS) {
      fail(ErrorKind::Backend, std::string("cudnnCreate failed: ") + cudnn_frontend::detail::get_error_string(st));
    }
    handles_[device] = h;
    return h;
  }

  // The family's workspace on `device`, at least `bytes` (null for 0): grown by replacement, so graphs captured
  // with an older buffer keep it alive through the ops that hold it.
  std::shared_ptr<DeviceBuffer> workspace(int device, std::size_t bytes) {
    if (bytes == 0) return nullptr;
    auto& have = workspace_bytes_[device];
    if (have >= bytes) return workspaces_[device];
    cuda::DeviceGuard guard(device);
    auto buf = std::make_shared<DeviceBuffer>(bytes);
    workspaces_[device] = buf;
    have = bytes;
    return buf;
  }

 private:
  std::map<int, cudnnHandle_t> handles_;
  std::map<int, std::shared_ptr<DeviceBuffer>> workspaces_;
  std::map<int, std::size_t> workspace_bytes_;
};

}  // namespace tr::native
