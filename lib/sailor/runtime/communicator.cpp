#include "sailor/runtime/communicator.h"

#include <algorithm>
#include <cstdlib>

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

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

}  // namespace

Group::Group(c10::intrusive_ptr<GroupBackend> backend, std::vector<int> ranks, int my_rank)
    : backend_(std::move(backend)), ranks_(std::move(ranks)) {
  (void)local(my_rank);
}

int Group::local(int global_rank) const {
  auto it = std::find(ranks_.begin(), ranks_.end(), global_rank);
  if (it == ranks_.end()) throw std::logic_error(fmt::format("rank {} is not in this group", global_rank));
  return static_cast<int>(it - ranks_.begin());
}

void Group::all_reduce_sum(torch::Tensor& tensor) {
  if (size() > 1) all_reduce_sum_async(tensor)->wait();
}

void Group::all_reduce_max(torch::Tensor& tensor) {
  if (size() == 1) return;
  std::vector<torch::Tensor> tensors{tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  backend_->allreduce(tensors, options)->wait();
}

c10::intrusive_ptr<c10d::Work> Group::all_reduce_sum_async(torch::Tensor& tensor) {
  std::vector<torch::Tensor> tensors{tensor};
  return backend_->allreduce(tensors);
}

c10::intrusive_ptr<c10d::Work> Group::send(torch::Tensor& tensor, int to, int tag) {
  std::vector<torch::Tensor> tensors{tensor};
  return backend_->send(tensors, local(to), tag);
}

void Group::recv(torch::Tensor& tensor, int from, int tag) {
  std::vector<torch::Tensor> tensors{tensor};
  backend_->recv(tensors, local(from), tag)->wait();
}

void Group::barrier() {
  if (size() > 1) backend_->barrier()->wait();
}

Communicator::Communicator(const WorldInfo& world, std::chrono::milliseconds timeout)
    : world_(world), timeout_(timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(world.master_port);
  options.isServer = world.rank == 0;
  options.numWorkers = static_cast<std::size_t>(world.world_size);
  options.waitWorkers = true;
  options.timeout = timeout;
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(world.master_addr, options);
  } catch (const std::exception& e) {
    throw RuntimeFailure(fmt::format("rank {}: cannot join the rendezvous at {}:{} within {} s: {}", world.rank,
                                     world.master_addr, world.master_port, timeout.count() / 1000, first_line(e)));
  }
  // Gloo's transport: the interface GLOO_SOCKET_IFNAME names, loopback for a
  // job on one machine, else the address this host's name resolves to.
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0') {
    device_ = c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  } else if (is_loopback(world.master_addr)) {
    device_ = c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  } else {
    device_ = c10d::ProcessGroupGloo::createDefaultDevice();
  }
  std::vector<int> all(static_cast<std::size_t>(world.world_size));
  for (int r = 0; r < world.world_size; ++r) all[static_cast<std::size_t>(r)] = r;
  world_group_ = group("world", all);
}

std::unique_ptr<Group> Communicator::group(const std::string& name, std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  auto it = std::find(ranks.begin(), ranks.end(), world_.rank);
  if (it == ranks.end()) throw std::logic_error("group " + name + " does not hold this rank");
  const int local = static_cast<int>(it - ranks.begin());
  auto options = c10d::ProcessGroupGloo::Options::create(timeout_);
  options->devices.push_back(device_);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("group/" + name + "/", store_);
  try {
    auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, local, static_cast<int>(ranks.size()), options);
    return std::make_unique<Group>(std::move(backend), std::move(ranks), world_.rank);
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
    try {
      store_->wait({k}, timeout_);
    } catch (const std::exception&) {
      throw RuntimeFailure(fmt::format("rank {}: rank {} did not publish {} within {} s", world_.rank, r, key,
                                       timeout_.count() / 1000));
    }
    auto bytes = store_->get(k);
    out.emplace_back(bytes.begin(), bytes.end());
  }
  return out;
}

}  // namespace fleet::sailor::runtime
