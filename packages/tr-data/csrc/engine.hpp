// The Preprocessor's native half: a TransferStation (two host buffers A/B per device with
// condition-variable hand-off) and a persistent worker pool with static sample -> worker assignment.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pipeline.hpp"

namespace trd {

// In-memory samples: either one uniform (n, h, w, c) block, or ragged images given by byte
// offsets and (h, w, c) shapes inside one buffer.
struct Source {
  const uint8_t* base = nullptr;
  long long n = 0;
  Shape3 shape;                       // uniform
  const long long* offsets = nullptr;  // ragged, n entries
  const int32_t* shapes = nullptr;     // ragged, n * 3
  const int32_t* labels = nullptr;     // n
  const long long* sizes = nullptr;    // encoded (JPEG) samples: n byte counts at `offsets`
  // sample i as pixels: a view of the source, or (encoded) decoded into `scratch`
  ImgC get(long long i, std::vector<uint8_t>& scratch) const;
};

enum class ErrKind : int { None = 0, Data = 1, Shape = 2, Other = 3 };

// Where a worker's time went during one epoch (nanoseconds; written by that worker only).
struct alignas(64) WorkerTime {
  long long items = 0;
  long long work_ns = 0;   // reading/decoding and running the chain on samples
  long long wait_ns = 0;   // blocked until the zone of the next item's batch was free
};

// Two zones; zone s holds the batches k with k % 2 == s. Producers (workers) write samples of
// batch k once the zone is assigned to k; the consumer acquires k when all its samples are in and
// releases it, which assigns the zone to k + 2. Waiting is on condition variables only.
class Station {
 public:
  Station(int batch, size_t sample_bytes, uint8_t* data0, int32_t* labels0, uint8_t* data1, int32_t* labels1);

  int batch() const { return batch_; }
  size_t sample_bytes() const { return sample_bytes_; }
  uint8_t* data(int zone) const { return data_[zone]; }
  int32_t* labels(int zone) const { return labels_[zone]; }

  // ---- control (the Python thread, before the workers start) ----
  void begin_epoch(long long num_batches, int last_size);
  void abort();                                      // wakes every waiter; acquire raises
  void fail(ErrKind kind, const std::string& msg);   // a worker failed: acquire raises msg

  // ---- producers ----
  bool writable_now(long long k) const {  // the lock-free fast path of wait_writable
    return z_[k & 1].batch.load(std::memory_order_acquire) == k && !aborted_.load(std::memory_order_acquire);
  }
  bool wait_writable(long long k);  // false when the epoch was aborted or failed
  void done(long long k);           // one sample of batch k is written

  // ---- consumer ----
  // Blocks until batch k is complete; returns its sample count, or -1 on timeout (< 0: none).
  int acquire(long long k, double timeout_s);
  void release(long long k);
  // Nanoseconds the consumer spent blocked in acquire since the last begin_epoch.
  long long consumer_wait_ns() const { return consumer_wait_ns_.load(std::memory_order_relaxed); }

  long long num_batches() const;
  int batch_size_of(long long k) const;

 private:
  // `batch` is read by every worker per sample, `filled` written by every worker per sample: own
  // cache lines, so the counter's traffic does not evict the line every worker polls.
  struct alignas(64) Zone {
    alignas(64) std::atomic<long long> batch{-1};  // the batch this zone is assigned to (-1: none)
    alignas(64) std::atomic<int> filled{0};
    std::atomic<int> expected{0};
    bool ready = false;
    bool held = false;
    long long last_released = -1;
  };
  int size_locked(long long k) const { return k == nb_ - 1 ? last_ : batch_; }

  int batch_;
  size_t sample_bytes_;
  uint8_t* data_[2];
  int32_t* labels_[2];
  mutable std::mutex m_;
  std::condition_variable cv_cons_, cv_prod_;
  Zone z_[2];
  long long nb_ = 0;
  int last_ = 0;
  std::atomic<bool> aborted_{false};  // written under m_, read lock-free on the fast path
  std::atomic<long long> consumer_wait_ns_{0};
  ErrKind err_ = ErrKind::None;
  std::string msg_;
};

// What one epoch runs, fixed when it is described (tr.data._native.EpochJob builds it by field name).
struct JobSpec {
  std::shared_ptr<Pipeline> pipe_hold;
  std::vector<std::shared_ptr<Station>> station_hold;
  const Pipeline* pipe = nullptr;
  Source src;
  std::vector<long long> order;  // dataset indices in epoch order (length src.n)
  std::vector<Station*> stations;
  int world = 1;
  long long per_rank = 0;  // samples each rank delivers (ceil(n / world), or fewer with drop_last)
  int batch = 1;
  long long num_batches = 0;
  int last_size = 0;         // samples in the last batch
  uint64_t seed_prefix = 0;  // derive_seed state after (seed, tag, epoch); sample seed adds index
  Shape3 out_shape;
  size_t sample_bytes = 0;
  uint8_t* cache = nullptr;  // CPVS: (src.n, sample_bytes)
  int cache_mode = 0;        // 0 off, 1 fill (first pass), 2 replay
  // SDMP: a busy epoch decodes each sample once and also writes the samples of the next epochs (their own
  // seeds) into slots (slot s: (src.n, sample_bytes) at sdmp + s * src.n * sample_bytes, filled[s * n + i]
  // set when written); a lazy epoch copies its slot (a sample not filled is computed as usual).
  uint8_t* sdmp = nullptr;
  uint8_t* sdmp_filled = nullptr;
  std::vector<uint64_t> sdmp_prefix;  // busy: the seed prefix of each slot's epoch
  int sdmp_mode = 0;                  // 0 off, 1 busy (fill every slot), 2 lazy (replay sdmp_slot)
  int sdmp_slot = 0;
  bool dct_scaling = false;  // JPEG samples decoded DCT-scaled where the first resample allows it
};

// A running epoch: its description and the workers' shared state.
struct Job : JobSpec {
  explicit Job(const JobSpec& spec) : JobSpec(spec) {}
  int chunk = 1;                   // work items a worker claims at once (dynamic claiming)
  std::vector<WorkerTime> times;   // one per worker
  // Polled by every worker per sample / bumped once per worker per batch / claimed from per chunk:
  // separate cache lines.
  alignas(64) std::atomic<bool> abort{false};
  alignas(64) std::atomic<long long> samples_done{0};
  alignas(64) std::atomic<long long> cursor{0};  // the next unclaimed work item
};

// How workers share an epoch's items: "dynamic" (the default) claims the next `chunk` items from a shared
// cursor, so a worker that is descheduled or draws slow samples holds up nobody; "static" gives item g to
// worker g % workers (what tr did before; kept to measure the difference). Both visit items in increasing
// order and write the same bytes: a sample's result depends on its index and seed only.
void set_static_assignment(bool on);
bool static_assignment();

// Test hook: make the k-th worker thread (0-based) of the next Engines fail to start, as
// std::thread does under a memory or thread limit; -1 (the default) turns it off.
void fail_thread_start_at(int k);

class Engine {
 public:
  explicit Engine(int workers);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int workers() const { return int(threads_.size()); }
  // Starts `job` (stations must have had begin_epoch). Throws PhaseErr if one is still running.
  void start(std::shared_ptr<Job> job);
  // Stops the running job (if any) and waits for the workers to go idle.
  void cancel();
  // Waits until the workers are idle; false on timeout (timeout < 0: forever).
  bool wait_idle(double timeout_s);
  bool busy() const;
  std::shared_ptr<Job> current() const;

 private:
  void loop(int w);
  void stop_workers();  // stop, join and forget every started thread
  void run_items(Job& job, int w, Workspace& ws);
  bool run_item(Job& job, long long g, Workspace& ws, WorkerTime& t);  // false: stop (abort or failure)

  std::vector<std::thread> threads_;
  mutable std::mutex m_;
  std::condition_variable cv_job_, cv_idle_;
  std::shared_ptr<Job> job_;
  Job* live_ = nullptr;  // what the workers run (owned by job_)
  unsigned long long gen_ = 0;
  int active_ = 0;
  bool stop_ = false;
};

}  // namespace trd
