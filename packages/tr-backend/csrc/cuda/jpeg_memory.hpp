// nvJPEG's device and pinned memory, kept for reuse (issue [13]). nvJPEG allocates its buffers through callbacks
// (nvjpegDevAllocator_t, nvjpegPinnedAllocator_t; cudaMalloc/cudaFree and cudaHostAlloc/cudaFreeHost without them)
// and frees and re-allocates them as batches change. cudaFree and cudaFreeHost synchronise the whole device: a
// decode enqueued beside a running training step would wait for that step, and the next step for the decode. So a
// block nvJPEG frees goes to a cache and serves a later request of a similar size; blocks go back to CUDA only when
// the last decoder using the cache is gone.
#pragma once

#include <cstddef>

namespace tr::native::cuda::jpeg_memory {

// The callbacks (nvJPEG's prototypes: 0 on success).
int dev_malloc(void** p, std::size_t n);
int dev_free(void* p);
int pinned_malloc(void** p, std::size_t n, unsigned flags);
int pinned_free(void* p);

// A decoder starts / stops using the cache; the last release returns every cached block to CUDA.
void acquire();
void release();

struct Stats {
  std::size_t device_bytes = 0, pinned_bytes = 0;  // held from CUDA now
  std::size_t allocations = 0;                     // requests CUDA served (the cache had no block)
  std::size_t reuses = 0;                          // requests a cached block served
};
Stats stats();

}  // namespace tr::native::cuda::jpeg_memory
