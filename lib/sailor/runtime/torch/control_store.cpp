#include "sailor/runtime/torch/control_store.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "sailor/runtime/torch/communicator.h"

#include "common/error.h"

namespace fleet::sailor::runtime {

std::string control_keys::generation_prefix(int generation) { return fmt::format("gen/{}/", generation); }
std::string control_keys::heartbeat(int worker) { return fmt::format("elastic/heartbeat/{}", worker); }

int Membership::rank_of(int worker) const {
  auto it = std::find(training.begin(), training.end(), worker);
  return it == training.end() ? -1 : static_cast<int>(it - training.begin());
}

int Membership::member_rank_of(int worker) const {
  if (const int r = rank_of(worker); r >= 0) return r;
  auto it = std::find(others.begin(), others.end(), worker);
  return it == others.end() ? -1 : static_cast<int>(training.size() + (it - others.begin()));
}

Membership Membership::from_json(int generation, const std::string& text) {
  const auto j = nlohmann::json::parse(text);
  Membership m;
  m.generation = generation;
  m.training = j.at("training").get<std::vector<int>>();
  m.others = j.at("others").get<std::vector<int>>();
  m.leaving = j.at("leaving").get<std::vector<int>>();
  m.plan = j.at("plan");
  m.save_only = j.value("save_only", false);
  return m;
}

std::string Membership::to_json() const {
  return nlohmann::json{{"generation", generation}, {"training", training}, {"others", others},
                        {"leaving", leaving},       {"plan", plan},         {"save_only", save_only}}
      .dump();
}

struct ControlStore::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

ControlStore::ControlStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlStore::~ControlStore() = default;

namespace {}  // namespace

std::unique_ptr<ControlStore> ControlStore::serve(int port, std::chrono::milliseconds timeout) {
  auto impl = std::make_unique<Impl>();
  impl->store = open_store("the elastic controller's store", "127.0.0.1", port, true, timeout);
  return std::unique_ptr<ControlStore>(new ControlStore(std::move(impl)));
}

// Whether something accepts connections at host:port. c10d's client retries
// a refused connection until its timeout and logs each failure; a plain
// probe first gives a quick, single-line answer for a job that is not there.
bool accepts_connections(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool ok = false;
  for (addrinfo* a = found; a != nullptr && !ok; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return ok;
}

std::unique_ptr<ControlStore> ControlStore::connect(const std::string& host, int port,
                                                    std::chrono::milliseconds timeout) {
  if (!accepts_connections(host, port))
    throw RuntimeFailure(
        fmt::format("cannot reach the elastic controller's store at {}:{}: nothing accepts "
                    "connections there (has the job ended?)",
                    host, port));
  auto impl = std::make_unique<Impl>();
  impl->store = open_store("the elastic controller's store", host, port, false, timeout);
  return std::unique_ptr<ControlStore>(new ControlStore(std::move(impl)));
}

void ControlStore::set(const std::string& key, const std::string& value) {
  impl_->store->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
}

std::optional<std::string> ControlStore::get(const std::string& key) {
  if (!impl_->store->check({key})) return std::nullopt;
  const auto bytes = impl_->store->get(key);
  return std::string(bytes.begin(), bytes.end());
}

std::int64_t ControlStore::add(const std::string& key, std::int64_t delta) { return impl_->store->add(key, delta); }

int ControlStore::port() const { return impl_->store->getPort(); }

std::pair<std::string, int> parse_host_port(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    throw UsageError(fmt::format("'{}' is not HOST:PORT", address));
  int port = 0;
  try {
    std::size_t used = 0;
    port = std::stoi(address.substr(colon + 1), &used);
    if (used != address.size() - colon - 1) port = 0;
  } catch (const std::exception&) {
    port = 0;
  }
  if (port < 1 || port > 65535) throw UsageError(fmt::format("'{}': the port must be 1-65535", address));
  return {address.substr(0, colon), port};
}

}  // namespace fleet::sailor::runtime
