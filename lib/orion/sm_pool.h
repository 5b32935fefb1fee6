// The SMs of one simulated GPU at block granularity: each SM holds the
// resident blocks of several kernels up to its warp, register, shared-memory
// and block-slot limits. A kernel is placed in "SM units": the blocks one SM
// holds of it at full occupancy (Orion's SM_usage counts these units), at
// most one unit of a client's kernel per SM.
//
// A client's stream runs one kernel at a time, so an SM's occupancy is fully
// given by which clients have a unit on it. SMs with the same set of clients
// are interchangeable and kept as one group with a count: placing and
// releasing cost the number of distinct groups, not the number of SMs.
#pragma once

#include <cstdint>
#include <vector>

#include "orion/occupancy.h"

namespace fleet::orion {

/// Per-SM occupancy of the resident kernels, grouped by resident clients.
class SmPool {
 public:
  /// A GPU of `sms` SMs shared by `clients` clients (at most 64).
  SmPool(int sms, int clients);

  /// Places up to `units` units of `client`'s kernel, each holding `share`
  /// of an SM, on SMs that have room and hold none of that client's blocks:
  /// idle SMs first (the hardware spreads blocks over idle SMs before it
  /// fills busy ones), then SMs that hold other kernels' blocks. Returns how
  /// many were placed. All units a client has resident share one `share`
  /// (its stream's current kernel).
  int place(int client, const SmShare& share, int units);
  /// Frees `units` of `client`'s units.
  void release(int client, int units);

  int sm_count() const { return sms_; }
  /// SMs holding at least one block.
  int busy_sms() const { return sms_ - idle_sms(); }
  /// Changes each time room is freed: a kernel that found no room since
  /// need not look again until it changes.
  std::uint64_t generation() const { return generation_; }

 private:
  using Fixed = std::array<std::int32_t, 4>;
  struct Group {
    std::uint64_t clients = 0;  // bit per client with a unit on each of these SMs
    int count = 0;              // SMs in this state
    Fixed used{};               // what those units hold of each SM
  };
  static Fixed to_fixed(const SmShare& share);
  int idle_sms() const;
  // Moves `n` SMs from groups_[from] to the group of mask `to` (created if new).
  void move(std::size_t from, std::uint64_t to, const Fixed& used, int n);
  // Removes groups left with no SMs (all but the idle group).
  void drop_empty_groups();

  int sms_;
  std::vector<Group> groups_;          // groups_[0]: idle SMs (clients == 0), always present
  std::vector<Fixed> client_need_;     // per client: what one of its units holds
  std::vector<SmShare> client_share_;  // ... and the share it came from (most kernels repeat the last one's)
  std::uint64_t generation_ = 0;
};

}  // namespace fleet::orion
