// Where this process sits in a distributed job: its rank, the world size and
// the rendezvous address, from the environment conventions users launch
// with — sailor-run launch and torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT) or a SLURM step (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_JOB_NODELIST). No libtorch.
#pragma once

#include <functional>
#include <string>

namespace fleet::sailor::runtime {

struct WorldInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single";  ///< single, torchrun (also sailor-run launch) or slurm

  bool distributed() const { return world_size > 1; }
};

/// Reads the environment through `getenv` (the process's by default).
/// torchrun's variables win over SLURM's; without either this is one
/// process. UsageError naming the variable for a malformed or inconsistent value.
WorldInfo world_from_environment(const std::function<const char*(const char*)>& getenv = nullptr);

/// The first host of a SLURM node list ("gpu[03-05,09],cpu1" -> "gpu03").
/// UsageError for an empty or malformed list.
std::string first_slurm_host(const std::string& nodelist);

}  // namespace fleet::sailor::runtime
