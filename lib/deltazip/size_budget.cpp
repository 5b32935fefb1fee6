#include "deltazip/size_budget.h"

#include <algorithm>
#include <limits>

#include <zstd.h>

#include "common/error.h"

namespace fleet::deltazip {
namespace {

std::uint64_t zstd_bytes(const void* data, std::size_t size, int level) {
  if (size == 0) return 0;
  std::vector<char> out(ZSTD_compressBound(size));
  const std::size_t written = ZSTD_compress(out.data(), out.size(), data, size, level);
  // An error leaves the array as it is: the container would store it raw.
  return ZSTD_isError(written) ? size : std::min<std::uint64_t>(written, size);
}

struct Totals {
  std::uint64_t bytes = 0;
  double error = 0;
};

Totals totals_of(const std::vector<std::vector<FormCost>>& candidates, const std::vector<std::size_t>& choice) {
  Totals t;
  for (std::size_t l = 0; l < candidates.size(); ++l) {
    t.bytes += candidates[l][choice[l]].bytes;
    t.error += candidates[l][choice[l]].error;
  }
  return t;
}

// Each layer's form minimising error + lambda * bytes (ties: fewer bytes).
std::vector<std::size_t> lagrangian_choice(const std::vector<std::vector<FormCost>>& candidates, double lambda) {
  std::vector<std::size_t> choice(candidates.size(), 0);
  for (std::size_t l = 0; l < candidates.size(); ++l) {
    double best = std::numeric_limits<double>::infinity();
    for (std::size_t f = 0; f < candidates[l].size(); ++f) {
      const auto& c = candidates[l][f];
      const double cost = c.error + lambda * static_cast<double>(c.bytes);
      if (cost < best || (cost == best && c.bytes < candidates[l][choice[l]].bytes)) {
        best = cost;
        choice[l] = f;
      }
    }
  }
  return choice;
}

}  // namespace

std::uint64_t estimated_container_bytes(const PackedMatrix& m, int zstd_level, std::uint64_t overhead_per_array) {
  std::uint64_t total = 0;
  auto add = [&](const void* data, std::size_t size) {
    if (size == 0) return;
    total += zstd_bytes(data, size, zstd_level) + overhead_per_array;
  };
  add(m.codes.data(), m.codes.size());
  add(m.indices.data(), m.indices.size());
  add(m.scales.data(), m.scales.size() * 2);
  add(m.zeros.data(), m.zeros.size());
  add(m.codebook.data(), m.codebook.size() * 2);
  return total;
}

void weigh_errors_by_loss(std::vector<std::vector<FormCost>>& candidates, const std::vector<double>& loss_added,
                          std::size_t probe) {
  if (loss_added.size() != candidates.size())
    throw InputError("loss measured for " + std::to_string(loss_added.size()) + " layers, forms for " +
                     std::to_string(candidates.size()));
  double positive = 0;
  int count = 0;
  for (double added : loss_added)
    if (added > 0) positive += added, ++count;
  const double floor = count > 0 ? 0.1 * positive / count : 1.0;
  for (std::size_t l = 0; l < candidates.size(); ++l) {
    if (probe >= candidates[l].size()) throw InputError("the probe form is not a form of every layer");
    const double per_error = std::max(loss_added[l], floor) / std::max(candidates[l][probe].error, 1e-30);
    for (auto& cost : candidates[l]) cost.error *= per_error;
  }
}

std::vector<std::size_t> allocate_forms(const std::vector<std::vector<FormCost>>& candidates, std::uint64_t budget) {
  std::vector<std::size_t> smallest(candidates.size(), 0);
  for (std::size_t l = 0; l < candidates.size(); ++l) {
    if (candidates[l].empty()) throw UsageError("a layer has no candidate form");
    for (std::size_t f = 1; f < candidates[l].size(); ++f)
      if (candidates[l][f].bytes < candidates[l][smallest[l]].bytes) smallest[l] = f;
  }
  const Totals floor = totals_of(candidates, smallest);
  if (floor.bytes > budget)
    throw UsageError("the smallest form of every linear layer takes " + std::to_string(floor.bytes) +
                     " bytes, more than the " + std::to_string(budget) + " bytes the budget leaves them");
  // Bisect lambda (error per byte) between "bytes are free" and "bytes are
  // all that count"; keep the least-error choice that fits.
  std::vector<std::size_t> best = smallest;
  double best_error = floor.error;
  double low = 0, high = 1;
  while (totals_of(candidates, lagrangian_choice(candidates, high)).bytes > budget && high < 1e300) high *= 4;
  for (int step = 0; step < 200; ++step) {
    const double lambda = step == 0 ? 0 : (low + high) / 2;
    const auto choice = lagrangian_choice(candidates, lambda);
    const Totals t = totals_of(candidates, choice);
    if (t.bytes <= budget) {
      if (t.error < best_error) {
        best = choice;
        best_error = t.error;
      }
      if (step == 0) break;  // everything at its least error fits
      high = lambda;
    } else if (step > 0) {
      low = lambda;
    }
    if (step > 0 && high - low <= high * 1e-12) break;
  }
  // The same form everywhere (the same index in every layer's list) is a
  // choice too, and may lie off the Lagrangian's convex hull.
  for (std::size_t f = 0;; ++f) {
    std::vector<std::size_t> uniform(candidates.size(), f);
    bool everywhere = true;
    for (const auto& layer : candidates) everywhere = everywhere && f < layer.size();
    if (!everywhere) break;
    const Totals t = totals_of(candidates, uniform);
    if (t.bytes <= budget && t.error < best_error) {
      best = uniform;
      best_error = t.error;
    }
  }
  // Spend what is left: the change with the most error removed per extra
  // byte that still fits, until none does.
  std::uint64_t used = totals_of(candidates, best).bytes;
  for (;;) {
    double best_gain = 0;
    std::size_t layer = candidates.size(), form = 0;
    for (std::size_t l = 0; l < candidates.size(); ++l) {
      const auto& now = candidates[l][best[l]];
      for (std::size_t f = 0; f < candidates[l].size(); ++f) {
        const auto& c = candidates[l][f];
        if (c.error >= now.error || used - now.bytes + c.bytes > budget) continue;
        const double extra = static_cast<double>(c.bytes) - static_cast<double>(now.bytes);
        const double gain = (now.error - c.error) / std::max(extra, 1.0);
        if (gain > best_gain) {
          best_gain = gain;
          layer = l;
          form = f;
        }
      }
    }
    if (layer == candidates.size()) break;
    used = used - candidates[layer][best[layer]].bytes + candidates[layer][form].bytes;
    best[layer] = form;
  }
  return best;
}

}  // namespace fleet::deltazip
