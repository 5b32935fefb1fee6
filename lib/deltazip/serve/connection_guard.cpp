#include "deltazip/serve/connection_guard.h"

namespace fleet::deltazip {
namespace {

constexpr auto kNoDeadline = ConnectionGuard::Clock::time_point::max().time_since_epoch().count();

}  // namespace

ConnectionGuard::Ticket::Ticket(ConnectionGuard& guard, std::string key, std::string client)
    : guard_(guard),
      key_(std::move(key)),
      client_(std::move(client)),
      deadline_(std::make_shared<std::atomic<Clock::rep>>(kNoDeadline)) {}

ConnectionGuard::Ticket::~Ticket() { guard_.release(key_, client_); }

void ConnectionGuard::Ticket::request_started() {
  if (guard_.timeout_ == Clock::duration::zero()) return;
  deadline_->store((Clock::now() + guard_.timeout_).time_since_epoch().count());
}

ConnectionGuard::Clock::time_point ConnectionGuard::Ticket::deadline() const {
  return Clock::time_point(Clock::duration(deadline_->load()));
}

ConnectionGuard::ConnectionGuard(int max_per_client, double request_timeout_s)
    : max_per_client_(max_per_client),
      timeout_(request_timeout_s > 0
                   ? std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(request_timeout_s))
                   : Clock::duration::zero()) {}

std::unique_ptr<ConnectionGuard::Ticket> ConnectionGuard::admit(const std::string& key, const std::string& client) {
  std::lock_guard lock(mutex_);
  int& open = per_client_[client];
  if (max_per_client_ > 0 && open >= max_per_client_) return nullptr;
  ++open;
  std::unique_ptr<Ticket> ticket(new Ticket(*this, key, client));
  deadlines_[key] = ticket->deadline_;
  return ticket;
}

void ConnectionGuard::request_arrived(const std::string& key) {
  std::lock_guard lock(mutex_);
  if (auto it = deadlines_.find(key); it != deadlines_.end()) it->second->store(kNoDeadline);
}

int ConnectionGuard::open_from(const std::string& client) const {
  std::lock_guard lock(mutex_);
  const auto it = per_client_.find(client);
  return it == per_client_.end() ? 0 : it->second;
}

void ConnectionGuard::release(const std::string& key, const std::string& client) {
  std::lock_guard lock(mutex_);
  deadlines_.erase(key);
  if (auto it = per_client_.find(client); it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
}

}  // namespace fleet::deltazip
