#include "sailor/runtime/retired_groups.h"

namespace fleet::sailor::runtime {

RetiredGroups::~RetiredGroups() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (destroyer_.joinable()) destroyer_.join();
}

std::size_t RetiredGroups::pending() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + in_progress_;
}

void RetiredGroups::add(std::shared_ptr<void> owned) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(owned));
    if (!destroyer_.joinable()) destroyer_ = std::thread([this] { destroy_all(); });
  }
  wake_.notify_all();
}

void RetiredGroups::destroy_all() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left
    std::vector<std::shared_ptr<void>> batch;
    batch.swap(queue_);
    in_progress_ = batch.size();
    lock.unlock();
    batch.clear();  // the destructors run here, outside the lock
    lock.lock();
    in_progress_ = 0;
  }
}

}  // namespace fleet::sailor::runtime
