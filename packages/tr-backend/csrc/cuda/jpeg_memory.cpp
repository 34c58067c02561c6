#include "cuda/jpeg_memory.hpp"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <unordered_map>

namespace tr::native::cuda::jpeg_memory {

namespace {

constexpr std::size_t kGrain = std::size_t(1) << 20;  // blocks are whole MiB: near sizes share one block

// One kind of memory: blocks by size, free ones ready for reuse.
struct Pool {
  std::multimap<std::size_t, void*> free;    // size -> block
  std::unordered_map<void*, std::size_t> size;  // every block held, by address
  std::size_t bytes = 0;

  // A free block of at least n bytes and at most twice that (a much larger one stays for a larger request).
  void* take(std::size_t n) {
    auto it = free.lower_bound(n);
    if (it == free.end() || it->first > 2 * n + kGrain) return nullptr;
    void* p = it->second;
    free.erase(it);
    return p;
  }
};

std::mutex g_mutex;
Pool g_dev, g_pinned;
int g_users = 0;
std::size_t g_allocations = 0, g_reuses = 0;

std::size_t rounded(std::size_t n) { return (n + kGrain - 1) / kGrain * kGrain; }

template <class Alloc>
int get(Pool& pool, void** p, std::size_t n, Alloc alloc) {
  if (p == nullptr) return 1;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (void* hit = pool.take(n)) {
    *p = hit;
    ++g_reuses;
    return 0;
  }
  const std::size_t m = rounded(n == 0 ? 1 : n);
  if (alloc(p, m) != cudaSuccess) {
    cudaGetLastError();  // (nvJPEG reports an allocator failure; the error must not stick to later calls)
    *p = nullptr;
    return 1;
  }
  pool.size[*p] = m;
  pool.bytes += m;
  ++g_allocations;
  return 0;
}

int put(Pool& pool, void* p) {
  if (p == nullptr) return 0;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = pool.size.find(p);
  if (it == pool.size.end()) return 1;  // not ours
  pool.free.emplace(it->second, p);
  return 0;
}

template <class Free>
void drain(Pool& pool, Free release_block) {
  for (auto& [size, p] : pool.free) {
    release_block(p);
    pool.size.erase(p);
    pool.bytes -= size;
  }
  pool.free.clear();
}

}  // namespace

int dev_malloc(void** p, std::size_t n) {
  return get(g_dev, p, n, [](void** q, std::size_t m) { return cudaMalloc(q, m); });
}
int dev_free(void* p) { return put(g_dev, p); }
int pinned_malloc(void** p, std::size_t n, unsigned flags) {
  return get(g_pinned, p, n, [flags](void** q, std::size_t m) { return cudaHostAlloc(q, m, flags); });
}
int pinned_free(void* p) { return put(g_pinned, p); }

void acquire() {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_users;
}

void release() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_users > 0) return;
  g_users = 0;
  drain(g_dev, [](void* p) { cudaFree(p); });
  drain(g_pinned, [](void* p) { cudaFreeHost(p); });
}

Stats stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return Stats{g_dev.bytes, g_pinned.bytes, g_allocations, g_reuses};
}

}  // namespace tr::native::cuda::jpeg_memory
