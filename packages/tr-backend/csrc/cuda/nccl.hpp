// NCCL, loaded at run time (dlopen) rather than linked, like cuBLASLt: the extension builds without NCCL's
// header or library and imports where it is missing; the CUDA backend reports a missing library as
// DeviceUnavailableError naming every path tried. The few types used are declared here (NCCL keeps their
// ABI stable); when the build finds nccl.h, nccl.cpp checks these declarations against it.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

namespace tr::native::cuda {

namespace nccl_abi {
constexpr int kUniqueIdBytes = 128;
struct UniqueId {
  char internal[kUniqueIdBytes];
};
struct CommOpaque;
using Comm = CommOpaque*;
using Result = int;                  // ncclResult_t: ncclSuccess == 0
constexpr int kFloat32 = 7;          // ncclFloat32
constexpr int kUint8 = 1;            // ncclUint8
constexpr int kAvg = 4;              // ncclAvg (NCCL >= 2.10)
constexpr Result kInProgress = 7;    // ncclInProgress: a nonblocking communicator is still working
constexpr int kMinVersion = 21400;   // ncclGetVersion's code for 2.14.0 (nonblocking communicators)
constexpr unsigned kApiMagic = 0xcafebeefu;
constexpr int kUndefInt = -2147483647 - 1;  // NCCL_CONFIG_UNDEF_INT: NCCL's default

// The leading fields of ncclConfig_t, in NCCL's order (it reads `size` bytes and defaults the rest).
// Ten fields, so the struct has no padding that NCCL would read as a field.
struct Config {
  std::size_t size = sizeof(Config);
  unsigned magic = kApiMagic;
  unsigned version = 22000;
  int blocking = kUndefInt;
  int cga_cluster_size = kUndefInt;
  int min_ctas = kUndefInt;
  int max_ctas = kUndefInt;
  const char* net_name = nullptr;
  int split_share = kUndefInt;
  int traffic_class = kUndefInt;
};
static_assert(sizeof(Config) == 48, "ncclConfig_t prefix must have no padding");

using GetUniqueIdFn = Result (*)(UniqueId*);
using CommInitRankFn = Result (*)(Comm*, int, UniqueId, int);
using CommInitRankConfigFn = Result (*)(Comm*, int, UniqueId, int, Config*);
using CommGetAsyncErrorFn = Result (*)(Comm, Result*);
using AllReduceFn = Result (*)(const void*, void*, std::size_t, int, int, Comm, cudaStream_t);
using BroadcastFn = Result (*)(const void*, void*, std::size_t, int, int, Comm, cudaStream_t);
using CommDestroyFn = Result (*)(Comm);
using CommAbortFn = Result (*)(Comm);
using GetErrorStringFn = const char* (*)(Result);
using GetVersionFn = Result (*)(int*);
}  // namespace nccl_abi

struct Nccl {
  nccl_abi::GetUniqueIdFn get_unique_id = nullptr;
  nccl_abi::CommInitRankFn comm_init_rank = nullptr;
  nccl_abi::CommInitRankConfigFn comm_init_rank_config = nullptr;
  nccl_abi::CommGetAsyncErrorFn comm_get_async_error = nullptr;
  nccl_abi::AllReduceFn all_reduce = nullptr;
  nccl_abi::BroadcastFn broadcast = nullptr;
  nccl_abi::CommDestroyFn comm_destroy = nullptr;
  nccl_abi::CommAbortFn comm_abort = nullptr;
  nccl_abi::GetErrorStringFn error_string = nullptr;
  nccl_abi::GetVersionFn get_version = nullptr;
  int version = 0;   // ncclGetVersion's code, e.g. 23007 for 2.30.7
  std::string path;  // the file that was loaded
};

// Paths tried before the built-in ones (e.g. the nvidia-nccl wheel found by Python). Call before nccl().
void add_nccl_candidates(const std::vector<std::string>& paths);

// Every path the loader would try, in order: TR_NCCL_PATH, the added ones, the build's, the system's.
std::vector<std::string> nccl_candidates();

// Loads NCCL once (thread-safe) from nccl_candidates(); throws DeviceUnavailable listing every path tried.
const Nccl& nccl();

// Loads NCCL from exactly `paths` (not cached, the handle is closed again): what nccl() does, for tests.
// Returns the path that loaded; throws DeviceUnavailable listing every path tried.
std::string probe_nccl(const std::vector<std::string>& paths);

// Throws Backend "<what> failed: <ncclGetErrorString> (<code>)" unless result is ncclSuccess.
void nccl_check(nccl_abi::Result result, const char* what);

// ncclGetErrorString's text of a result code ("ncclResult" before NCCL is loaded).
std::string nccl_error_text(nccl_abi::Result result);

// For a call on a nonblocking communicator: while `result` is ncclInProgress, polls ncclCommGetAsyncError
// until the communicator settles; then nccl_check(result, what).
void nccl_settle(nccl_abi::Comm comm, nccl_abi::Result result, const char* what);

// One NCCL communicator of `nranks` ranks on `device`. Destroyed (or aborted) with the object; the ops that
// captured it hold its raw handle, so it must outlive their graphs (the Python backend keeps it).
// The communicator is nonblocking: joining it waits at most `timeout_s` for the other ranks (a rank that
// died or never started), then aborts and throws Backend instead of hanging; timeout_s <= 0 waits forever.
// async_error() lets a watchdog notice a failed peer while a captured step waits in a collective.
class NcclComm {
 public:
  NcclComm(const std::string& unique_id, int nranks, int rank, int device, double timeout_s = 0.0);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  static std::string new_unique_id();  // ncclGetUniqueId's 128 bytes
  nccl_abi::Comm get() const;          // throws Backend once destroyed or aborted
  void destroy();                      // ncclCommDestroy (waits for pending work)
  void abort();                        // ncclCommAbort (does not wait); thread-safe against async_error()
  // ncclCommGetAsyncError: 0 while healthy, ncclInProgress while busy, an error code once it failed; -1 once
  // destroyed or aborted.
  int async_error() const;
  int nranks() const { return nranks_; }
  int rank() const { return rank_; }
  int device() const { return device_; }
  bool alive() const { return comm_ != nullptr; }

 private:
  std::atomic<nccl_abi::Comm> comm_{nullptr};
  int nranks_, rank_, device_;
};

}  // namespace tr::native::cuda
