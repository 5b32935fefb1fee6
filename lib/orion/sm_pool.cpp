#include "orion/sm_pool.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "common/error.h"

namespace fleet::orion {

namespace {

// Fixed point, so that placing and releasing the same share leaves no
// rounding residue behind.
constexpr std::int32_t kFull = 1 << 20;

}  // namespace

SmPool::SmPool(int sms, int clients) : sms_(sms) {
  if (sms <= 0) throw InputError("a simulated GPU needs at least one SM, not " + std::to_string(sms));
  if (clients < 0 || clients > 64) {
    throw InputError("at most 64 clients can share one simulated GPU, not " + std::to_string(clients));
  }
  groups_.push_back(Group{0, sms, {}});
  client_need_.resize(static_cast<std::size_t>(clients));
  client_share_.resize(static_cast<std::size_t>(clients), SmShare{});
  for (std::size_t c = 0; c < client_need_.size(); ++c) client_need_[c] = to_fixed(client_share_[c]);
}

SmPool::Fixed SmPool::to_fixed(const SmShare& share) {
  Fixed out{};
  for (std::size_t r = 0; r < share.size(); ++r) {
    // Rounded to the nearest step (shares that add up to 1 fill the SM
    // exactly) and at least one step, so a unit never holds nothing.
    out[r] = static_cast<std::int32_t>(std::clamp(std::round(share[r] * kFull), 1.0, static_cast<double>(kFull)));
  }
  return out;
}

int SmPool::idle_sms() const { return groups_[0].count; }

void SmPool::move(std::size_t from, std::uint64_t to, const Fixed& used, int n) {
  groups_[from].count -= n;
  auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) { return g.clients == to; });
  if (it != groups_.end()) {
    it->count += n;
  } else {
    groups_.push_back(Group{to, n, used});
  }
}

void SmPool::drop_empty_groups() {
  // The idle group stays first, even when empty.
  groups_.erase(std::remove_if(groups_.begin() + 1, groups_.end(), [](const Group& g) { return g.count == 0; }),
                groups_.end());
}

int SmPool::place(int client, const SmShare& share, int units) {
  const auto c = static_cast<std::size_t>(client);
  if (share != client_share_[c]) {
    client_share_[c] = share;
    client_need_[c] = to_fixed(share);
  }
  const Fixed need = client_need_[c];
  const std::uint64_t bit = std::uint64_t{1} << client;
  int placed = 0;
  // Groups appended by move() hold this client already: only the first
  // `existing` groups are candidates.
  const std::size_t existing = groups_.size();
  for (std::size_t i = 0; i < existing && placed < units; ++i) {
    const Group g = groups_[i];
    if (g.count == 0 || (g.clients & bit) != 0) continue;
    Fixed used = g.used;
    bool fits = true;
    for (std::size_t r = 0; r < used.size(); ++r) {
      used[r] += need[r];
      fits = fits && used[r] <= kFull;
    }
    if (!fits) continue;
    const int n = std::min(g.count, units - placed);
    move(i, g.clients | bit, used, n);
    placed += n;
  }
  drop_empty_groups();
  return placed;
}

void SmPool::release(int client, int units) {
  if (units <= 0) return;
  const Fixed& need = client_need_[static_cast<std::size_t>(client)];
  const std::uint64_t bit = std::uint64_t{1} << client;
  int left = units;
  const std::size_t existing = groups_.size();
  for (std::size_t i = 1; i < existing && left > 0; ++i) {
    const Group g = groups_[i];
    if ((g.clients & bit) == 0 || g.count == 0) continue;
    Fixed used = g.used;
    for (std::size_t r = 0; r < used.size(); ++r) used[r] -= need[r];
    const int n = std::min(g.count, left);
    move(i, g.clients & ~bit, used, n);
    left -= n;
  }
  if (left != 0) throw std::logic_error("SmPool::release: more units than the client holds");
  drop_empty_groups();
  ++generation_;
}

}  // namespace fleet::orion
