// Limits on what one HTTP client can hold: how many connections it keeps
// open at once, and how long each request may take to arrive (headers and
// body, from its first byte). A client that sends part of a request and
// stalls, or sends a byte now and then (a "slowloris"), would otherwise hold
// a server thread for as long as it likes. Torch-free; the HTTP front end
// asks it.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace fleet::deltazip {

class ConnectionGuard {
 public:
  using Clock = std::chrono::steady_clock;

  /// One admitted connection; closing it (destroying the ticket) frees its place.
  class Ticket {
   public:
    ~Ticket();
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    /// The first byte of a request is here: the whole request must follow
    /// within the timeout.
    void request_started();
    /// When the request under way must have arrived (Clock::time_point::max()
    /// once it has, or with no timeout).
    Clock::time_point deadline() const;

   private:
    friend class ConnectionGuard;
    Ticket(ConnectionGuard& guard, std::string key, std::string client);
    ConnectionGuard& guard_;
    const std::string key_, client_;
    std::shared_ptr<std::atomic<Clock::rep>> deadline_;
  };

  /// `max_per_client` 0: no limit; `request_timeout_s` 0: no deadline.
  ConnectionGuard(int max_per_client, double request_timeout_s);
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  /// A connection from `client` (its address), known as `key` (address and
  /// port); nullptr when the client already holds max_per_client.
  std::unique_ptr<Ticket> admit(const std::string& key, const std::string& client);
  /// The request on connection `key` has arrived whole: no deadline while it is served.
  void request_arrived(const std::string& key);
  /// Connections open from `client`.
  int open_from(const std::string& client) const;

 private:
  void release(const std::string& key, const std::string& client);

  const int max_per_client_;
  const Clock::duration timeout_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<std::atomic<Clock::rep>>> deadlines_;  ///< by connection key
  std::map<std::string, int> per_client_;
};

}  // namespace fleet::deltazip
