// A resident data set's order and batches (tr/backend/cpu/ops/resident.py): the epoch's shuffle and the batch
// selection run on the device, so no batch index crosses PCIe.
//
// shuffle_order: tr.core.philox.shuffle_indices' Fisher-Yates permutation (for i = n-1 .. 1 swap positions i
// and j = r0(seed, i) % (i + 1)) by deterministic reservations in one block: each round every pending swap
// reserves its two positions with priority i (atomicMax), a swap holding both runs (the swaps that run touch
// disjoint positions), the rest wait; every position then sees its swaps in the sequential order, so the
// permutation is the sequential one, in O(log n) rounds. One block: its __syncthreads orders the rounds; the
// reservations are read past L1 (__ldcg), since the atomics update L2 only.
#include <cstddef>
#include <memory>
#include <string>

#include "cuda/context.hpp"
#include "ops/args/resident.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

constexpr int kShuffleThreads = 1024;

__global__ void __launch_bounds__(kShuffleThreads)
    shuffle_kernel(const unsigned long long* key, int* order, int* pos, int* owner, int* js, int* pending_a,
                   int* pending_b, int n, int shuffle) {
  __shared__ int count, next;
  const int t0 = threadIdx.x, nt = blockDim.x;
  const unsigned long long seed = *key;
  for (int i = t0; i < n; i += nt) {
    order[i] = i;
    owner[i] = -1;
    if (shuffle && i > 0) {
      js[i] = static_cast<int>(static_cast<unsigned long long>(kern::philox_r0(seed, i)) %
                               static_cast<unsigned long long>(i + 1));
      pending_a[n - 1 - i] = i;  // n-1 first: the order does not matter, the priorities decide
    }
  }
  if (t0 == 0) {
    count = shuffle ? n - 1 : 0;
    *pos = 0;
  }
  __syncthreads();
  int* pending = pending_a;
  int* later = pending_b;
  while (count > 0) {
    const int c = count;
    for (int k = t0; k < c; k += nt) {
      const int i = pending[k];
      atomicMax(&owner[i], i);
      atomicMax(&owner[js[i]], i);
    }
    if (t0 == 0) next = 0;
    __syncthreads();
    for (int k = t0; k < c; k += nt) {
      const int i = pending[k], j = js[i];
      if (__ldcg(&owner[i]) == i && __ldcg(&owner[j]) == i) {
        const int a = order[i];
        order[i] = order[j];
        order[j] = a;
      } else {
        later[atomicAdd(&next, 1)] = i;
      }
    }
    __syncthreads();
    for (int k = t0; k < c; k += nt) {
      const int i = pending[k];
      __stcg(&owner[i], -1);
      __stcg(&owner[js[i]], -1);
    }
    int* swap = pending;
    pending = later;
    later = swap;
    __syncthreads();
    if (t0 == 0) count = next;
    __syncthreads();
  }
}

// Rank r of `world` takes epoch positions r, r + world, ... (tr.data.sharding; padded: the order repeats from its
// start, ceil(n / world) each): index[i] = order[(r + world * (pos + i)) % n] (or the position), labels[i] =
// labels_all[index[i]] for i < min(rows, share - pos); pos += rows. One block: every thread reads pos before
// thread 0 advances it.
__global__ void batch_select_kernel(const int* order, const int* labels_all, const int* rank, int* pos, int* index,
                                    int* labels, int n, int rows, int world, int pad) {
  const int p = *pos, r = *rank;
  const long long w = world, share = pad ? (n + w - 1) / w : (r < n ? (n - r + w - 1) / w : 0);  // (no overflow)
  const int count = static_cast<int>(max(0LL, min(static_cast<long long>(rows), share - p)));
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const int at = static_cast<int>((static_cast<long long>(p + i) * world + r) % n);
    const int s = order != nullptr ? order[at] : at;
    index[i] = s;
    labels[i] = labels_all[s];
  }
  __syncthreads();
  if (threadIdx.x == 0) *pos = p + rows;
}

__global__ void restart_kernel(int* pos) { *pos = 0; }

}  // namespace

std::unique_ptr<Op> shuffle_order(Context&, const ShuffleOrderArgs& args) {
  const int n = static_cast<int>(args.n);
  const int shuffle = args.shuffle ? 1 : 0;
  if (n < 1) bad(args, "order has no elements");
  const auto* key = static_cast<const unsigned long long*>(args.key.ptr);
  int* order = static_cast<int*>(args.order.ptr);
  int* pos = static_cast<int*>(args.pos.ptr);
  // owner, j and the two pending lists: 16 bytes a sample, the op's own (4.8 MB for ImageNet's 1.28 M)
  auto scratch = std::make_shared<DeviceBuffer>(static_cast<std::size_t>(n) * 4 * sizeof(int));
  int* base = scratch->as<int>();
  return fn_op([=](cudaStream_t s) {
    (void)scratch;
    shuffle_kernel<<<1, kShuffleThreads, 0, s>>>(key, order, pos, base, base + n, base + 2 * n, base + 3 * n, n,
                                                 shuffle);
    check_launch("shuffle_order");
  }, shuffle ? "fisher-yates by reservations, one block" : "identity order");
}

std::unique_ptr<Op> batch_select(Context&, const BatchSelectArgs& args) {
  const int n = static_cast<int>(args.n), rows = static_cast<int>(args.rows);
  const int world = static_cast<int>(args.world), pad = args.pad ? 1 : 0;
  if (n < 1 || world < 1) bad(args, "batch_select needs n >= 1 samples and world >= 1");
  const int* rank = static_cast<const int*>(args.rank.ptr);
  const int* order = static_cast<const int*>(args.order.ptr);  // null: the positions themselves
  const int* labels_all = static_cast<const int*>(args.labels_all.ptr);
  int* pos = static_cast<int*>(args.pos.ptr);
  int* index = static_cast<int*>(args.index.ptr);
  int* labels = static_cast<int*>(args.labels.ptr);
  return fn_op([=](cudaStream_t s) {
    batch_select_kernel<<<1, 256, 0, s>>>(order, labels_all, rank, pos, index, labels, n, rows, world, pad);
    check_launch("batch_select");
  });
}

std::unique_ptr<Op> batch_restart(Context&, const BatchRestartArgs& args) {
  int* pos = static_cast<int*>(args.pos.ptr);
  return fn_op([=](cudaStream_t s) {
    restart_kernel<<<1, 1, 0, s>>>(pos);
    check_launch("batch_restart");
  });
}

}  // namespace tr::native
