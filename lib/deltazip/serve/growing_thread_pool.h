// The HTTP server's connection threads: a few to start with, one more
// whenever a connection arrives and every thread is busy, up to a cap.
// cpp-httplib holds a thread for as long as a connection sends its request,
// so with a fixed pool a handful of clients that open connections and stall
// (or a burst of slow streams) leave /health and everyone else waiting for a
// read timeout; grown on demand, the pool keeps a thread free until the cap.
// Include only from the HTTP front end (it pulls in httplib.h).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <httplib.h>

namespace fleet::deltazip {

class GrowingThreadPool final : public httplib::TaskQueue {
 public:
  /// `initial` threads at once, at most `max` (>= initial, >= 1).
  GrowingThreadPool(std::size_t initial, std::size_t max) : max_(std::max<std::size_t>(1, max)) {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < std::min(initial, max_); ++i) spawn();
  }
  ~GrowingThreadPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(fn));
      // Every thread busy with earlier connections: one more, if allowed.
      if (idle_ < jobs_.size() && threads_.size() < max_ && !stopping_) spawn();
    }
    wake_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  /// Threads started so far.
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return threads_.size();
  }

 private:
  // Under mutex_.
  void spawn() {
    threads_.emplace_back([this] { work(); });
  }

  void work() {
    std::unique_lock lock(mutex_);
    while (true) {
      ++idle_;
      wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // stopping, and nothing left to serve
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  const std::size_t max_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  std::size_t idle_ = 0;  // threads waiting for a job
  bool stopping_ = false;
};

}  // namespace fleet::deltazip
