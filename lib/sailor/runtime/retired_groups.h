// Process groups and communicators of an elastic generation that ended
// because a peer was lost. Destroying a Gloo group waits for its work in
// flight, and work that involves a lost peer ends only when its transfer
// fails or times out; so these are destroyed on a thread of their own while
// the worker goes on to the next generation, instead of being kept alive
// (and piling up, sockets and threads, with every re-plan) or destroyed on
// the training thread. Needs no libtorch: it owns anything.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace fleet::sailor::runtime {

class RetiredGroups {
 public:
  RetiredGroups() = default;
  /// Waits until everything retired is destroyed: with a peer that vanished
  /// without closing its connections, up to the groups' own timeout.
  ~RetiredGroups();
  RetiredGroups(const RetiredGroups&) = delete;
  RetiredGroups& operator=(const RetiredGroups&) = delete;

  /// Takes `owned` (nothing when empty) and destroys it on the destroying thread.
  template <class T>
  void retire(std::unique_ptr<T> owned) {
    if (owned) add(std::shared_ptr<void>(std::move(owned)));
  }

  /// How many retired objects are not destroyed yet.
  std::size_t pending() const;

 private:
  void add(std::shared_ptr<void> owned);
  void destroy_all();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::shared_ptr<void>> queue_;
  std::size_t in_progress_ = 0;
  bool stopping_ = false;
  std::thread destroyer_;  ///< started with the first retired object
};

}  // namespace fleet::sailor::runtime
