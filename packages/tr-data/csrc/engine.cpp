#include "engine.hpp"

#include "jpeg.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <system_error>

namespace trd {

namespace {
constexpr int kSpinUs = 50;  // how long a producer spins on its zone before it blocks

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

long long ns_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

ImgC Source::get(long long i, std::vector<uint8_t>& scratch) const {
  if (sizes) return decode_jpeg(base + offsets[i], size_t(sizes[i]), scratch);
  if (offsets) {
    const int32_t* s = shapes + 3 * i;
    return ImgC{base + offsets[i], s[0], s[1], s[2]};
  }
  return ImgC{base + size_t(i) * shape.bytes(), shape.h, shape.w, shape.c};
}

// ------------------------------------------------------------------------------------------------
// Station
// ------------------------------------------------------------------------------------------------
Station::Station(int batch, size_t sample_bytes, uint8_t* data0, int32_t* labels0, uint8_t* data1, int32_t* labels1)
    : batch_(batch), sample_bytes_(sample_bytes), data_{data0, data1}, labels_{labels0, labels1} {
  if (batch < 1) throw ConfigErr("batch size must be >= 1, got " + std::to_string(batch));
}

void Station::begin_epoch(long long num_batches, int last_size) {
  std::lock_guard<std::mutex> lk(m_);
  for (int s = 0; s < 2; ++s)
    if (z_[s].held)
      throw PhaseErr("batch " + std::to_string(z_[s].batch.load()) +
                     " of the previous epoch is still acquired; release it before starting an epoch");
  nb_ = num_batches;
  last_ = last_size;
  aborted_ = false;
  err_ = ErrKind::None;
  msg_.clear();
  consumer_wait_ns_.store(0);
  for (int s = 0; s < 2; ++s) {
    Zone& z = z_[s];
    z.filled.store(0);
    z.expected.store(s < nb_ ? size_locked(s) : 0);
    z.ready = false;
    z.held = false;
    z.last_released = -1;
    z.batch.store(s < nb_ ? s : -1, std::memory_order_release);
  }
  cv_prod_.notify_all();
}

void Station::abort() {
  std::lock_guard<std::mutex> lk(m_);
  aborted_ = true;
  cv_prod_.notify_all();
  cv_cons_.notify_all();
}

void Station::fail(ErrKind kind, const std::string& msg) {
  std::lock_guard<std::mutex> lk(m_);
  if (err_ == ErrKind::None) {
    err_ = kind;
    msg_ = msg;
  }
  aborted_ = true;
  cv_prod_.notify_all();
  cv_cons_.notify_all();
}

bool Station::wait_writable(long long k) {
  if (writable_now(k)) return true;
  Zone& z = z_[k & 1];
  // Spin a little first: the consumer usually releases within microseconds, and waking all waiters from a
  // condition variable makes them queue on its mutex one after the other.
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinUs);
  do {
    for (int i = 0; i < 64; ++i) {
      if (z.batch.load(std::memory_order_acquire) == k || aborted_.load(std::memory_order_relaxed))
        return !aborted_.load(std::memory_order_acquire);
      cpu_relax();
    }
  } while (std::chrono::steady_clock::now() < until);
  std::unique_lock<std::mutex> lk(m_);
  cv_prod_.wait(lk, [&] { return aborted_.load() || z.batch.load(std::memory_order_acquire) == k; });
  return !aborted_;
}

void Station::done(long long k) {
  Zone& z = z_[k & 1];
  // `expected` is read before the increment: the zone cannot move on to k + 2 before it.
  const int expected = z.expected.load(std::memory_order_relaxed);
  if (z.filled.fetch_add(1, std::memory_order_acq_rel) + 1 == expected) {
    std::lock_guard<std::mutex> lk(m_);
    z.ready = true;
    cv_cons_.notify_all();
  }
}

int Station::acquire(long long k, double timeout_s) {
  std::unique_lock<std::mutex> lk(m_);
  if (k < 0 || k >= nb_)
    throw ConfigErr("batch index " + std::to_string(k) + " is out of range: this epoch has " + std::to_string(nb_) +
                    " batches");
  Zone& z = z_[k & 1];
  const long long cur = z.batch.load();
  if (cur == k && z.held) throw PhaseErr("batch " + std::to_string(k) + " is already acquired");
  if (k <= z.last_released) throw PhaseErr("batch " + std::to_string(k) + " was already released");
  if (cur != k && cur >= 0 && cur < k)
    throw PhaseErr("batch " + std::to_string(k) + " uses buffer " + std::to_string(k & 1) + ", which still holds batch " +
                   std::to_string(cur) + ": acquire and release batch " + std::to_string(cur) + " first");
  auto ready = [&] { return aborted_.load() || (z.batch.load() == k && z.ready); };
  if (!ready()) {
    const auto t0 = std::chrono::steady_clock::now();
    bool got = true;
    if (timeout_s < 0) {
      cv_cons_.wait(lk, ready);
    } else {
      got = cv_cons_.wait_for(lk, std::chrono::duration<double>(timeout_s), ready);
    }
    consumer_wait_ns_.fetch_add(ns_since(t0), std::memory_order_relaxed);
    if (!got) return -1;
  }
  if (err_ == ErrKind::Data) throw DataErr(msg_);
  if (err_ == ErrKind::Shape) throw ShapeErr(msg_);
  if (err_ == ErrKind::Other) throw std::runtime_error(msg_);
  if (aborted_) throw Cancelled("the epoch was cancelled before batch " + std::to_string(k) + " was complete");
  z.held = true;
  return size_locked(k);
}

void Station::release(long long k) {
  std::lock_guard<std::mutex> lk(m_);
  Zone& z = z_[k & 1];
  if (k < 0 || z.batch.load() != k || !z.held) throw PhaseErr("batch " + std::to_string(k) + " is not acquired");
  z.held = false;
  z.ready = false;
  z.last_released = k;
  z.filled.store(0);
  const long long next = k + 2;
  if (next < nb_) {
    z.expected.store(size_locked(next));
    z.batch.store(next, std::memory_order_release);
  } else {
    z.expected.store(0);
    z.batch.store(-1, std::memory_order_release);
  }
  cv_prod_.notify_all();
}

long long Station::num_batches() const {
  std::lock_guard<std::mutex> lk(m_);
  return nb_;
}

int Station::batch_size_of(long long k) const {
  std::lock_guard<std::mutex> lk(m_);
  if (k < 0 || k >= nb_) return 0;
  return size_locked(k);
}

// ------------------------------------------------------------------------------------------------
// Engine
// ------------------------------------------------------------------------------------------------
namespace {
void fail_all(Job& job, ErrKind kind, const std::string& msg) {
  job.abort.store(true);
  for (Station* s : job.stations) s->fail(kind, msg);
}

std::atomic<int> g_fail_thread_at{-1};
std::atomic<bool> g_static_assignment{false};
}  // namespace

void fail_thread_start_at(int k) { g_fail_thread_at.store(k); }
void set_static_assignment(bool on) { g_static_assignment.store(on); }
bool static_assignment() { return g_static_assignment.load(); }

Engine::Engine(int workers) {
  if (workers < 1) throw ConfigErr("preprocess_workers must be >= 1, got " + std::to_string(workers));
  try {
    threads_.reserve(size_t(workers));
    for (int w = 0; w < workers; ++w) {
      if (w == g_fail_thread_at.load())  // test hook: what the system does under a memory or thread limit
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
      threads_.emplace_back([this, w] { loop(w); });
    }
  } catch (const std::system_error& e) {
    // A constructor that throws runs no destructor: stop and join the workers already started here
    // (a joinable std::thread destroyed unjoined would terminate the process).
    const size_t started = threads_.size();
    stop_workers();
    throw ConfigErr("preprocess_workers=" + std::to_string(workers) + ": could not start worker thread " +
                    std::to_string(started + 1) + " (" + e.what() + "); use fewer workers");
  } catch (const std::bad_alloc&) {
    stop_workers();
    throw ConfigErr("preprocess_workers=" + std::to_string(workers) + ": out of memory starting the worker threads");
  }
}

void Engine::stop_workers() {
  {
    std::lock_guard<std::mutex> lk(m_);
    stop_ = true;
  }
  cv_job_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

Engine::~Engine() {
  cancel();
  stop_workers();
}

void Engine::start(std::shared_ptr<Job> job) {
  std::lock_guard<std::mutex> lk(m_);
  if (active_ > 0) throw PhaseErr("the previous epoch is still running; finish or cancel it first");
  job_ = std::move(job);
  live_ = job_.get();
  const int M = int(threads_.size());
  live_->times.assign(size_t(M), WorkerTime{});
  // A few items per claim: one cursor update per chunk, and a batch still spread over every worker.
  live_->chunk = std::max(1, std::min(8, live_->batch / (4 * M)));
  live_->cursor.store(0);
  active_ = int(threads_.size());
  ++gen_;
  cv_job_.notify_all();
}

void Engine::cancel() {
  std::shared_ptr<Job> j;
  {
    std::lock_guard<std::mutex> lk(m_);
    j = job_;
  }
  if (j && busy()) {
    j->abort.store(true);
    for (Station* s : j->stations) s->abort();
  }
  wait_idle(-1);
}

bool Engine::wait_idle(double timeout_s) {
  std::unique_lock<std::mutex> lk(m_);
  auto idle = [&] { return active_ == 0; };
  if (timeout_s < 0) {
    cv_idle_.wait(lk, idle);
    return true;
  }
  return cv_idle_.wait_for(lk, std::chrono::duration<double>(timeout_s), idle);
}

bool Engine::busy() const {
  std::lock_guard<std::mutex> lk(m_);
  return active_ > 0;
}

std::shared_ptr<Job> Engine::current() const {
  std::lock_guard<std::mutex> lk(m_);
  return job_;
}

void Engine::loop(int w) {
  Workspace ws;
  unsigned long long seen = 0;
  for (;;) {
    Job* job;
    {
      std::unique_lock<std::mutex> lk(m_);
      cv_job_.wait(lk, [&] { return stop_ || gen_ != seen; });
      if (stop_) return;
      seen = gen_;
      job = live_;
    }
    run_items(*job, w, ws);
    {
      std::lock_guard<std::mutex> lk(m_);
      if (--active_ == 0) cv_idle_.notify_all();
    }
  }
}

void Engine::run_items(Job& job, int w, Workspace& ws) {
  const long long M = (long long)threads_.size();
  const long long total = (long long)job.world * job.per_rank;
  WorkerTime& t = job.times[size_t(w)];
  // Work item g is rank g % world's sample at position g / world of its share. Items are claimed in
  // increasing order, so batch k is filled before k + 1 (the zones hold two batches at a time).
  // samples_done is bumped per batch (static) or per chunk (dynamic), not per sample: a shared counter.
  if (static_assignment()) {
    long long pending = 0;
    for (long long g = w; g < total; g += M) {
      if (!run_item(job, g, ws, t)) break;
      ++pending;
      if (g + M >= total || (g + M) / job.world / job.batch != g / job.world / job.batch) {
        job.samples_done.fetch_add(pending, std::memory_order_relaxed);
        pending = 0;
      }
    }
  } else {
    const long long chunk = job.chunk;
    for (;;) {
      const long long g0 = job.cursor.fetch_add(chunk, std::memory_order_relaxed);
      if (g0 >= total) break;
      const long long g1 = std::min(total, g0 + chunk);
      long long g = g0;
      while (g < g1 && run_item(job, g, ws, t)) ++g;
      job.samples_done.fetch_add(g - g0, std::memory_order_relaxed);
      if (g < g1) break;
    }
  }
}

bool Engine::run_item(Job& job, long long g, Workspace& ws, WorkerTime& t) {
  const long long world = job.world;
  const long long n = job.src.n;
  if (job.abort.load(std::memory_order_relaxed)) return false;
  const int r = int(g % world);
  const long long p = g / world;
  const long long k = p / job.batch;
  const int pos = int(p % job.batch);
  const long long q = (long long)r + world * p;  // position in the (wrapped) epoch order
  const long long idx = job.order[size_t(q % n)];
  Station* st = job.stations[size_t(r)];
  if (!st->writable_now(k)) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = st->wait_writable(k);
    t.wait_ns += ns_since(t0);
    if (!ok) return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  uint8_t* dst = st->data(int(k & 1)) + size_t(pos) * job.sample_bytes;
  try {
    const size_t slot_bytes = size_t(n) * job.sample_bytes;
    if (job.cache_mode == 2) {
      std::memcpy(dst, job.cache + size_t(idx) * job.sample_bytes, job.sample_bytes);
    } else if (job.sdmp_mode == 2 && job.sdmp_filled[size_t(job.sdmp_slot) * size_t(n) + size_t(idx)]) {
      std::memcpy(dst, job.sdmp + size_t(job.sdmp_slot) * slot_bytes + size_t(idx) * job.sample_bytes,
                  job.sample_bytes);
    } else if (job.sdmp_mode == 1) {  // one decode, this epoch's sample and every slot's
      const ImgC img = job.src.get(idx, ws.jpeg);
      job.pipe->run(img, derive_step(job.seed_prefix, uint64_t(idx)), ws, dst, job.out_shape);
      for (size_t s = 0; s < job.sdmp_prefix.size(); ++s) {
        job.pipe->run(img, derive_step(job.sdmp_prefix[s], uint64_t(idx)), ws,
                      job.sdmp + s * slot_bytes + size_t(idx) * job.sample_bytes, job.out_shape);
        job.sdmp_filled[s * size_t(n) + size_t(idx)] = 1;
      }
    } else {
      const uint64_t seed = derive_step(job.seed_prefix, uint64_t(idx));
      const uint8_t* jpeg = job.src.sizes ? job.src.base + job.src.offsets[idx] : nullptr;
      const size_t jpeg_bytes = job.src.sizes ? size_t(job.src.sizes[idx]) : 0;
      bool ran = false;
      if (jpeg != nullptr && (window_decode() || job.dct_scaling)) {
        // A first RandomResizedCrop or Resize: decode only its box (and a margin), the same bytes as a full
        // decode; with DCT scaling, at the smallest eighth of the size that keeps the box >= its output.
        Roi roi;
        roi.full = jpeg_shape(jpeg, jpeg_bytes);
        int box[4], out[2];
        if (job.pipe->first_resample(roi.full, seed, box, out)) {
          const bool crop = job.pipe->ops()[0].kind == OpKind::RandomResizedCrop;
          const int m = job.dct_scaling ? jpeg_scale_for(box[2], box[3], out[0], out[1]) : 8;
          if (m < 8 || (crop && window_decode())) {
            long long y = box[0], x = box[1], h = box[2], w = box[3];
            if (m < 8) {
              scale_span(y, h, m);
              scale_span(x, w, m);
            }
            const ImgC win = decode_jpeg_window(jpeg, jpeg_bytes, jpeg_scaled_shape(roi.full, m), int(y), int(x),
                                                int(h), int(w), ws.jpeg, roi.y0, roi.x0, m);
            roi.scale = m;
            job.pipe->run(win, seed, ws, dst, job.out_shape, &roi);
            ran = true;
          }
        }
      }
      if (!ran) job.pipe->run(job.src.get(idx, ws.jpeg), seed, ws, dst, job.out_shape);
      if (job.cache_mode == 1 && q < n) std::memcpy(job.cache + size_t(idx) * job.sample_bytes, dst, job.sample_bytes);
    }
    st->labels(int(k & 1))[pos] = job.src.labels ? job.src.labels[idx] : 0;
  } catch (const DataErr& e) {
    fail_all(job, ErrKind::Data, "sample " + std::to_string(idx) + ": " + e.what());
    return false;
  } catch (const ShapeErr& e) {
    fail_all(job, ErrKind::Shape, "sample " + std::to_string(idx) + ": " + e.what());
    return false;
  } catch (const std::exception& e) {
    fail_all(job, ErrKind::Other, "sample " + std::to_string(idx) + ": " + e.what());
    return false;
  }
  t.work_ns += ns_since(t0);
  ++t.items;
  st->done(k);
  return true;
}

}  // namespace trd
