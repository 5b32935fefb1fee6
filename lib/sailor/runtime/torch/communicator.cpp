#include "sailor/runtime/torch/communicator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "common/error.h"

namespace fleet::sailor::runtime {
namespace {

// c10d reports failures as c10::Error or std::runtime_error with long
// backtraces; keep the first line.
std::string first_line(const std::exception& e) {
  std::string text = e.what();
  return text.substr(0, text.find('\n'));
}

// Starting a transfer or collective towards a peer that died can fail at
// once (Gloo throws the pair's read or write error when the work is
// enqueued), before there is any work to wait for: the same lost peer as a
// failed wait.
template <class Start>
c10::intrusive_ptr<c10d::Work> started(Start&& start) {
  try {
    return start();
  } catch (const PeerLost&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerLost("lost a peer: " + first_line(e));
  }
}

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1"; }

bool is_transfer(const c10::intrusive_ptr<c10d::Work>& work) {
  return dynamic_cast<c10d::ProcessGroupGloo::SendWork*>(work.get()) != nullptr ||
         dynamic_cast<c10d::ProcessGroupGloo::RecvWork*>(work.get()) != nullptr;
}

// True when this machine already has something listening on `port`: the
// server's bind would fail (after libtorch logged three lines about it).
bool port_in_use(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // as c10d binds: a TIME_WAIT port is free
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool in_use =
      ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return in_use;
}

// c10d's TCPStore client waits without a limit for a reply once connected:
// a port held by another program (not a store) accepts the connection and
// never answers. Build it on a helper thread and give up at the deadline;
// the helper, blocked in a read, ends with the process.
c10::intrusive_ptr<c10d::TCPStore> store_within(const std::string& host, const c10d::TCPStoreOptions& options,
                                                std::chrono::milliseconds timeout, const std::string& failure) {
  const auto port_taken = [&] {
    return RuntimeFailure(
        fmt::format("{}: port {} is in use (another job, or another program); choose a free "
                    "MASTER_PORT",
                    failure, options.port));
  };
  if (options.isServer && options.port != 0 && port_in_use(options.port)) throw port_taken();
  auto task = std::make_shared<std::packaged_task<c10::intrusive_ptr<c10d::TCPStore>()>>(
      [host, options] { return c10::make_intrusive<c10d::TCPStore>(host, options); });
  auto result = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  // The store's own timeout bounds what it waits for; a little more covers its set-up.
  if (result.wait_for(timeout + std::chrono::seconds(2)) != std::future_status::ready)
    throw RuntimeFailure(fmt::format("{}: no answer within {} s (is another program listening on that port?)", failure,
                                     timeout.count() / 1000));
  try {
    return result.get();
  } catch (const std::exception& e) {
    const std::string why = first_line(e);
    // rank 0 could not listen: say so, not "cannot join".
    if (why.find("Address already in use") != std::string::npos || why.find("errno: 98") != std::string::npos)
      throw port_taken();
    throw RuntimeFailure(fmt::format("{}: {}", failure, why));
  }
}

}  // namespace

c10::intrusive_ptr<c10d::TCPStore> open_store(const std::string& what, const std::string& host, int port, bool server,
                                              std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = server;
  options.waitWorkers = false;
  options.timeout = timeout;
  return store_within(host, options, timeout,
                      fmt::format("{} {} at {}:{}", server ? "cannot serve" : "cannot reach", what, host, port));
}

void Interrupt::raise() {
  raised_ = true;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& w : transfers_) w->abort();  // their wait() returns at once
}

void Interrupt::wait(const c10::intrusive_ptr<c10d::Work>& work) {
  constexpr auto kSlice = std::chrono::milliseconds(20);
  if (is_transfer(work)) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      transfers_.push_back(work);
    }
    bool done = false;
    std::exception_ptr failure;
    // Raised before the wait began: abort() already ran, or runs now.
    if (raised_) work->abort();
    try {
      done = work->wait();
    } catch (const std::exception&) {
      failure = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      transfers_.erase(std::find(transfers_.begin(), transfers_.end(), work));
    }
    if (raised_ && !done) throw PeerLost("a new generation of the job started while waiting for a peer");
    if (failure) std::rethrow_exception(failure);
    return;
  }
  // A collective: its wait with a timeout can be repeated until it completes.
  for (;;) {
    if (raised_) throw PeerLost("a new generation of the job started while waiting for a collective");
    try {
      work->wait(kSlice);
      return;
    } catch (const std::exception&) {
      // A timeout, or a failure. The work may also have completed between
      // the timeout and now: a wait without a timeout tells which.
      if (work->isCompleted()) {
        work->wait();
        return;
      }
    }
  }
}

void wait_for(const c10::intrusive_ptr<c10d::Work>& work, Interrupt* interrupt) {
  try {
    if (interrupt != nullptr)
      interrupt->wait(work);
    else
      work->wait();
  } catch (const PeerLost&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerLost("lost a peer: " + first_line(e));
  }
}

Group::Group(c10::intrusive_ptr<GroupBackend> backend, std::vector<int> ranks, int my_rank, Interrupt* interrupt)
    : backend_(std::move(backend)), ranks_(std::move(ranks)), interrupt_(interrupt) {
  (void)local(my_rank);
}

int Group::local(int global_rank) const {
  auto it = std::find(ranks_.begin(), ranks_.end(), global_rank);
  if (it == ranks_.end()) throw std::logic_error(fmt::format("rank {} is not in this group", global_rank));
  return static_cast<int>(it - ranks_.begin());
}

void Group::all_reduce_sum(torch::Tensor& tensor) {
  if (size() > 1) wait(all_reduce_sum_async(tensor));
}

void Group::all_reduce_max(torch::Tensor& tensor) {
  if (size() == 1) return;
  std::vector<torch::Tensor> tensors{tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  wait(started([&] { return backend_->allreduce(tensors, options); }));
}

c10::intrusive_ptr<c10d::Work> Group::all_reduce_sum_async(torch::Tensor& tensor) {
  std::vector<torch::Tensor> tensors{tensor};
  return started([&] { return backend_->allreduce(tensors); });
}

c10::intrusive_ptr<c10d::Work> Group::send(torch::Tensor& tensor, int to, int tag) {
  std::vector<torch::Tensor> tensors{tensor};
  const int peer = local(to);
  return started([&] { return backend_->send(tensors, peer, tag); });
}

void Group::recv(torch::Tensor& tensor, int from, int tag) {
  std::vector<torch::Tensor> tensors{tensor};
  const int peer = local(from);
  wait(started([&] { return backend_->recv(tensors, peer, tag); }));
}

void Group::barrier() {
  if (size() > 1) wait(started([&] { return backend_->barrier(); }));
}

Communicator::Communicator(const WorldInfo& world, std::chrono::milliseconds timeout)
    : world_(world), timeout_(timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(world.master_port);
  options.isServer = world.rank == 0;
  options.numWorkers = static_cast<std::size_t>(world.world_size);
  options.waitWorkers = true;
  options.timeout = timeout;
  store_ = store_within(world.master_addr, options, timeout,
                        fmt::format("rank {}: cannot {} the rendezvous at {}:{}", world.rank,
                                    world.rank == 0 ? "serve" : "join", world.master_addr, world.master_port));
  open_device_and_world();
}

Communicator::Communicator(const WorldInfo& world, const std::string& prefix, std::chrono::milliseconds timeout,
                           Interrupt* interrupt)
    : world_(world), timeout_(timeout), interrupt_(interrupt) {
  store_ = c10::make_intrusive<c10d::PrefixStore>(
      prefix, open_store("the elastic controller's store", world.master_addr, world.master_port, false, timeout));
  // Everyone arrives before any group is built: building a Gloo group waits
  // for every member without looking at the interrupt, so a member lost
  // before it arrived must end the generation here instead.
  store_->add("arrived", 1);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (store_->add("arrived", 0) < world.world_size) {
    if (interrupt_ != nullptr && interrupt_->raised())
      throw PeerLost("a new generation of the job started before every member arrived");
    if (std::chrono::steady_clock::now() > deadline)
      throw RuntimeFailure(fmt::format("rank {}: not every member of the generation arrived within {} s", world.rank,
                                       timeout.count() / 1000));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  open_device_and_world();
}

void ignore_broken_pipes() {
  // Gloo writes to its peers with writev, which raises SIGPIPE when a peer
  // has died: a worker must see that as a failed transfer (and, in an
  // elastic job, carry on), not be killed by it.
  ::signal(SIGPIPE, SIG_IGN);
}

void Communicator::open_device_and_world() {
  ignore_broken_pipes();
  // Gloo's transport: the interface GLOO_SOCKET_IFNAME names, loopback for a
  // job on one machine, else the address this host's name resolves to.
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0') {
    device_ = c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  } else if (is_loopback(world_.master_addr)) {
    device_ = c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  } else {
    device_ = c10d::ProcessGroupGloo::createDefaultDevice();
  }
  std::vector<int> all(static_cast<std::size_t>(world_.world_size));
  for (int r = 0; r < world_.world_size; ++r) all[static_cast<std::size_t>(r)] = r;
  world_group_ = group("world", all);
}

namespace {

// Connecting a Gloo group waits for every member's address and connection
// and looks at no interrupt: a member lost after it arrived would hold the
// others for the whole timeout. The group is built on a thread of its own;
// when the interrupt comes first that thread is left to time out on its own
// (its store connection is this communicator's, which nobody else uses).
c10::intrusive_ptr<GroupBackend> build_interruptibly(std::function<c10::intrusive_ptr<GroupBackend>()> build,
                                                     const Interrupt& interrupt) {
  auto result = std::make_shared<std::promise<c10::intrusive_ptr<GroupBackend>>>();
  auto built = result->get_future();
  std::thread([result, build = std::move(build)] {
    try {
      result->set_value(build());
    } catch (...) {
      result->set_exception(std::current_exception());
    }
  }).detach();
  while (built.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready)
    if (interrupt.raised()) throw PeerLost("a new generation of the job started while its groups were being connected");
  return built.get();
}

}  // namespace

std::unique_ptr<Group> Communicator::group(const std::string& name, std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  auto it = std::find(ranks.begin(), ranks.end(), world_.rank);
  if (it == ranks.end()) throw std::logic_error("group " + name + " does not hold this rank");
  const int local = static_cast<int>(it - ranks.begin());
  auto options = c10d::ProcessGroupGloo::Options::create(timeout_);
  options->devices.push_back(device_);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("group/" + name + "/", store_);
  const int size = static_cast<int>(ranks.size());
  auto build = [prefixed, local, size, options]() -> c10::intrusive_ptr<GroupBackend> {
    return c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, local, size, options);
  };
  try {
    auto backend = interrupt_ != nullptr ? build_interruptibly(build, *interrupt_) : build();
    return std::make_unique<Group>(std::move(backend), std::move(ranks), world_.rank, interrupt_);
  } catch (const PeerLost&) {
    throw;
  } catch (const std::exception& e) {
    throw RuntimeFailure(fmt::format("rank {}: cannot build process group {}: {}", world_.rank, name, first_line(e)));
  }
}

std::vector<std::string> Communicator::all_gather_strings(const std::string& key, const std::string& value) {
  const std::string prefix = "gather/" + key + "/";
  store_->set(prefix + std::to_string(world_.rank), std::vector<std::uint8_t>(value.begin(), value.end()));
  std::vector<std::string> out;
  for (int r = 0; r < world_.world_size; ++r) {
    const std::string k = prefix + std::to_string(r);
    auto late = [&] {
      return RuntimeFailure(
          fmt::format("rank {}: rank {} did not publish {} within {} s", world_.rank, r, key, timeout_.count() / 1000));
    };
    if (interrupt_ == nullptr) {
      try {
        store_->wait({k}, timeout_);
      } catch (const std::exception&) {
        throw late();
      }
    } else {
      // Polled, so that a raised interrupt ends the wait. Not a store wait
      // with a short timeout: c10d's TCPStore answers such a wait after it
      // timed out, and that late answer desynchronises the connection.
      const auto deadline = std::chrono::steady_clock::now() + timeout_;
      while (!store_->check({k})) {
        if (interrupt_->raised())
          throw PeerLost("a new generation of the job started while waiting for rank " + std::to_string(r));
        if (std::chrono::steady_clock::now() > deadline) throw late();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    auto bytes = store_->get(k);
    out.emplace_back(bytes.begin(), bytes.end());
  }
  return out;
}

}  // namespace fleet::sailor::runtime
