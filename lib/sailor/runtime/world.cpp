#include "sailor/runtime/world.h"

#include <cstdlib>

#include "common/error.h"

namespace fleet::sailor::runtime {
namespace {

int parse_int(const char* name, const char* text, int min, int max) {
  std::string s(text);
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (s.empty() || used != s.size() || value < min || value > max)
    throw UsageError(std::string("environment variable ") + name + "='" + s + "' must be an integer in [" +
                     std::to_string(min) + ", " + std::to_string(max) + "]");
  return static_cast<int>(value);
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // Slurm's host list: entries separated by commas outside brackets; an
  // entry is text with any number of bracketed range lists
  // ("rack[1-2]-n[01-02]"). The first host takes the first number of each
  // range list, zero padding kept ("rack1-n01").
  auto refuse = [&] { throw UsageError("SLURM_JOB_NODELIST='" + nodelist + "' is not a node list"); };
  if (nodelist.empty() || nodelist[0] == '[') refuse();  // a host name starts with a name
  std::string host;
  for (std::size_t i = 0; i < nodelist.size() && nodelist[i] != ','; ++i) {
    if (nodelist[i] == ']') refuse();
    if (nodelist[i] != '[') {
      host += nodelist[i];
      continue;
    }
    const auto close = nodelist.find(']', i);
    if (close == std::string::npos) refuse();
    const std::string ranges = nodelist.substr(i + 1, close - i - 1);
    if (ranges.empty() || ranges.find_first_not_of("0123456789,-") != std::string::npos) refuse();
    const std::string first = ranges.substr(0, ranges.find_first_of(",-"));
    if (first.empty()) refuse();
    host += first;
    i = close;
  }
  if (host.empty() || host.find_first_of(" \t") != std::string::npos) refuse();
  return host;
}

WorldInfo world_from_environment(const std::function<const char*(const char*)>& getenv_fn) {
  auto get = [&](const char* name) -> const char* {
    const char* v = getenv_fn ? getenv_fn(name) : std::getenv(name);
    return (v != nullptr && *v != '\0') ? v : nullptr;
  };
  WorldInfo w;
  const char* rank = get("RANK");
  const char* size = get("WORLD_SIZE");
  if (rank != nullptr || size != nullptr) {
    if (rank == nullptr || size == nullptr) throw UsageError("RANK and WORLD_SIZE must be set together");
    w.source = "torchrun";
    w.world_size = parse_int("WORLD_SIZE", size, 1, 1 << 20);
    w.rank = parse_int("RANK", rank, 0, w.world_size - 1);
    if (const char* local = get("LOCAL_RANK")) w.local_rank = parse_int("LOCAL_RANK", local, 0, 1 << 20);
  } else if (const char* procid = get("SLURM_PROCID")) {
    const char* ntasks = get("SLURM_NTASKS");
    if (ntasks == nullptr) ntasks = get("SLURM_NPROCS");
    if (ntasks == nullptr) throw UsageError("SLURM_PROCID is set but SLURM_NTASKS is not");
    w.source = "slurm";
    w.world_size = parse_int("SLURM_NTASKS", ntasks, 1, 1 << 20);
    w.rank = parse_int("SLURM_PROCID", procid, 0, w.world_size - 1);
    if (const char* local = get("SLURM_LOCALID")) w.local_rank = parse_int("SLURM_LOCALID", local, 0, 1 << 20);
    const char* nodes = get("SLURM_JOB_NODELIST");
    if (nodes == nullptr) nodes = get("SLURM_NODELIST");
    if (nodes != nullptr) w.master_addr = first_slurm_host(nodes);
    // One port per job, so two jobs sharing a node do not meet.
    if (const char* job = get("SLURM_JOB_ID"))
      w.master_port = 20000 + parse_int("SLURM_JOB_ID", job, 0, 1 << 30) % 20000;
  } else {
    return w;
  }
  if (const char* addr = get("MASTER_ADDR")) w.master_addr = addr;
  if (const char* port = get("MASTER_PORT")) w.master_port = parse_int("MASTER_PORT", port, 1, 65535);
  return w;
}

}  // namespace fleet::sailor::runtime
