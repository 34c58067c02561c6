#include "cuda/nccl.hpp"

#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "cuda/check.hpp"
#include "cuda/library_path.hpp"
#include "native/errors.hpp"

#ifndef TR_NCCL_BUILD_PATH
#define TR_NCCL_BUILD_PATH ""
#endif

#ifdef TR_HAVE_NCCL_H
// The build found NCCL's header: check the declarations of nccl.hpp against it (nothing else uses it).
#include <nccl.h>
static_assert(tr::native::cuda::nccl_abi::kUniqueIdBytes == NCCL_UNIQUE_ID_BYTES);
static_assert(sizeof(tr::native::cuda::nccl_abi::UniqueId) == sizeof(ncclUniqueId));
static_assert(tr::native::cuda::nccl_abi::kFloat32 == ncclFloat32);
static_assert(tr::native::cuda::nccl_abi::kUint8 == ncclUint8);
static_assert(tr::native::cuda::nccl_abi::kAvg == ncclAvg);
static_assert(ncclSuccess == 0);
#if NCCL_VERSION_CODE >= 23000  // the layout check needs a header that has every field of nccl_abi::Config
static_assert(tr::native::cuda::nccl_abi::kInProgress == ncclInProgress);
static_assert(tr::native::cuda::nccl_abi::kApiMagic == NCCL_API_MAGIC);
static_assert(tr::native::cuda::nccl_abi::kUndefInt == NCCL_CONFIG_UNDEF_INT);
#include <cstddef>
#define TR_SAME_FIELD(ours, theirs) \
  static_assert(offsetof(tr::native::cuda::nccl_abi::Config, ours) == offsetof(ncclConfig_t, theirs))
TR_SAME_FIELD(magic, magic);
TR_SAME_FIELD(version, version);
TR_SAME_FIELD(blocking, blocking);
TR_SAME_FIELD(cga_cluster_size, cgaClusterSize);
TR_SAME_FIELD(min_ctas, minCTAs);
TR_SAME_FIELD(max_ctas, maxCTAs);
TR_SAME_FIELD(net_name, netName);
TR_SAME_FIELD(split_share, splitShare);
TR_SAME_FIELD(traffic_class, trafficClass);
#undef TR_SAME_FIELD
#endif
#endif

namespace tr::native::cuda {

namespace {

std::mutex g_mutex;
std::vector<std::string> g_extra;
Nccl g_api;
bool g_loaded = false;

template <class F>
void bind(void* handle, F& slot, const char* symbol, std::string& missing) {
  slot = reinterpret_cast<F>(dlsym(handle, symbol));
  if (slot == nullptr) missing += std::string(missing.empty() ? "" : ", ") + symbol;
}

std::string version_text(int code) {
  // NCCL >= 2.9 encodes X*10000 + Y*100 + Z
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

// Opens and binds one candidate; on failure appends why to `tried` and returns false (handle closed).
bool open_one(const std::string& path, Nccl& api, void*& handle, std::string& tried) {
  handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    tried += "\n  " + path + ": " + (why != nullptr ? why : "not loadable");
    return false;
  }
  std::string missing;
  bind(handle, api.get_unique_id, "ncclGetUniqueId", missing);
  bind(handle, api.comm_init_rank, "ncclCommInitRank", missing);
  bind(handle, api.comm_init_rank_config, "ncclCommInitRankConfig", missing);
  bind(handle, api.comm_get_async_error, "ncclCommGetAsyncError", missing);
  bind(handle, api.all_reduce, "ncclAllReduce", missing);
  bind(handle, api.broadcast, "ncclBroadcast", missing);
  bind(handle, api.comm_destroy, "ncclCommDestroy", missing);
  bind(handle, api.comm_abort, "ncclCommAbort", missing);
  bind(handle, api.error_string, "ncclGetErrorString", missing);
  bind(handle, api.get_version, "ncclGetVersion", missing);
  if (missing.empty() && (api.get_version(&api.version) != 0 || api.version < nccl_abi::kMinVersion)) {
    missing = "NCCL >= 2.14 (nonblocking communicators, ncclAvg), found " + version_text(api.version);
  }
  if (!missing.empty()) {
    tried += "\n  " + path + ": lacks " + missing;
    dlclose(handle);
    handle = nullptr;
    return false;
  }
  api.path = path;
  return true;
}

[[noreturn]] void not_found(const std::string& tried) {
  fail(ErrorKind::DeviceUnavailable,
       "NCCL could not be loaded (install nvidia-nccl-cu13, or set TR_NCCL_PATH to libnccl.so.2); tried:" + tried);
}

}  // namespace

void add_nccl_candidates(const std::vector<std::string>& paths) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_extra.insert(g_extra.end(), paths.begin(), paths.end());
}

std::vector<std::string> nccl_candidates() {
  std::vector<std::string> added;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    added = g_extra;
  }
  return library_candidates("TR_NCCL_PATH", added, TR_NCCL_BUILD_PATH, {"libnccl.so.2"});
}

const Nccl& nccl() {
  const std::vector<std::string> paths = nccl_candidates();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_loaded) return g_api;
  std::string tried;
  for (const std::string& path : paths) {
    Nccl api;
    void* handle = nullptr;
    if (!open_one(path, api, handle, tried)) continue;
    g_api = api;
    g_loaded = true;  // the handle stays open for the life of the process
    return g_api;
  }
  not_found(tried);
}

std::string probe_nccl(const std::vector<std::string>& paths) {
  std::string tried;
  for (const std::string& path : paths) {
    Nccl api;
    void* handle = nullptr;
    if (!open_one(path, api, handle, tried)) continue;
    // a library nccl() already loaded stays loaded: dlclose only drops this probe's reference
    dlclose(handle);
    return path;
  }
  not_found(tried);
}

std::string nccl_error_text(nccl_abi::Result result) {
  return (g_loaded && g_api.error_string != nullptr) ? g_api.error_string(result) : "ncclResult";
}

void nccl_check(nccl_abi::Result result, const char* what) {
  if (result == 0) return;
  fail(ErrorKind::Backend, std::string(what) + " failed: " + nccl_error_text(result) + " (" + std::to_string(result) +
                               ")");
}

void nccl_settle(nccl_abi::Comm comm, nccl_abi::Result result, const char* what) {
  while (result == nccl_abi::kInProgress) {
    nccl_abi::Result state = 0;
    const nccl_abi::Result r = g_api.comm_get_async_error(comm, &state);
    result = r != 0 ? r : state;
    if (result == nccl_abi::kInProgress) std::this_thread::yield();
  }
  nccl_check(result, what);
}

NcclComm::NcclComm(const std::string& unique_id, int nranks, int rank, int device, double timeout_s)
    : nranks_(nranks), rank_(rank), device_(device) {
  if (unique_id.size() != static_cast<std::size_t>(nccl_abi::kUniqueIdBytes)) {
    fail(ErrorKind::BadArgument, "NCCL unique id must be " + std::to_string(nccl_abi::kUniqueIdBytes) +
                                     " bytes, got " + std::to_string(unique_id.size()));
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    fail(ErrorKind::BadArgument, "NCCL rank " + std::to_string(rank) + " is outside [0, " +
                                     std::to_string(nranks) + ") for " + std::to_string(nranks) + " ranks");
  }
  const Nccl& api = nccl();
  nccl_abi::UniqueId id;
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  DeviceGuard guard(device);  // the communicator belongs to the current device
  nccl_abi::Config config;
  config.blocking = 0;  // returns at once; we poll, so a missing rank costs a timeout, not a hang
  nccl_abi::Comm comm = nullptr;
  nccl_abi::Result result = api.comm_init_rank_config(&comm, nranks, id, rank, &config);
  const std::string who = "rank " + std::to_string(rank) + " of " + std::to_string(nranks);
  if (result != 0 && result != nccl_abi::kInProgress) {
    if (comm != nullptr) api.comm_abort(comm);
    nccl_check(result, ("ncclCommInitRankConfig (" + who + ")").c_str());
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  while (result == nccl_abi::kInProgress) {
    nccl_abi::Result state = 0;
    const nccl_abi::Result r = api.comm_get_async_error(comm, &state);
    result = r != 0 ? r : state;
    if (result != nccl_abi::kInProgress) break;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (timeout_s > 0 && waited > timeout_s) {
      api.comm_abort(comm);
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", timeout_s);
      fail(ErrorKind::Backend, "NCCL communicator: " + who + " timed out after " + secs +
                                   " s waiting for the other ranks to join (a rank failed to start, crashed or died); "
                                   "aborted");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(waited < 1.0 ? 1 : 10));
  }
  if (result != 0) {
    api.comm_abort(comm);
    nccl_check(result, ("ncclCommInitRankConfig (" + who + ")").c_str());
  }
  comm_.store(comm);
}

NcclComm::~NcclComm() {
  nccl_abi::Comm comm = comm_.exchange(nullptr);
  if (comm == nullptr) return;
  try {
    DeviceGuard guard(device_);
    nccl_abi::Result r = g_api.comm_destroy(comm);
    nccl_abi::Result state = r;
    while (state == nccl_abi::kInProgress && g_api.comm_get_async_error(comm, &state) == 0) std::this_thread::yield();
  } catch (...) {  // a destructor must not throw; the process is going down or the device is gone
  }
}

std::string NcclComm::new_unique_id() {
  const Nccl& api = nccl();
  nccl_abi::UniqueId id;
  nccl_check(api.get_unique_id(&id), "ncclGetUniqueId");
  return std::string(id.internal, sizeof(id.internal));
}

nccl_abi::Comm NcclComm::get() const {
  nccl_abi::Comm comm = comm_.load();
  if (comm == nullptr) fail(ErrorKind::Backend, "the NCCL communicator was destroyed or aborted");
  return comm;
}

void NcclComm::destroy() {
  nccl_abi::Comm comm = comm_.exchange(nullptr);
  if (comm == nullptr) return;
  DeviceGuard guard(device_);
  nccl_settle(comm, g_api.comm_destroy(comm), "ncclCommDestroy");
}

void NcclComm::abort() {
  nccl_abi::Comm comm = comm_.exchange(nullptr);
  if (comm == nullptr) return;
  DeviceGuard guard(device_);
  nccl_check(g_api.comm_abort(comm), "ncclCommAbort");
}

int NcclComm::async_error() const {
  nccl_abi::Comm comm = comm_.load();
  if (comm == nullptr) return -1;
  nccl_abi::Result state = 0;
  const nccl_abi::Result r = g_api.comm_get_async_error(comm, &state);
  return r != 0 ? r : state;
}

}  // namespace tr::native::cuda
