#include "sailor/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "common/error.h"

namespace fleet::sailor {

namespace {

// The value an objective minimises (throughput: its inverse, the iteration time).
double minimised(const Estimate& e, Objective objective) {
  switch (objective) {
    case Objective::kThroughput:
      return e.iteration_s;
    case Objective::kCost:
      return e.usd_per_iteration();
    case Objective::kEnergy:
      return e.energy_j;
  }
  return 0;
}

}  // namespace

bool better(const Estimate& a, const Estimate& b, Objective objective) {
  const double x = minimised(a, objective), y = minimised(b, objective);
  if (x != y) return x < y;
  // Ties: the faster plan, then the cheaper one.
  if (a.iterations_per_s != b.iterations_per_s) return a.iterations_per_s > b.iterations_per_s;
  return a.usd_per_iteration() < b.usd_per_iteration();
}

namespace {

// All GPUs of one type; a stage's data-parallel replicas stay inside one
// region of it (placement picks the region).
struct Pool {
  std::string gpu;
  std::vector<std::pair<std::string, int>> zones;  // zone, quota; largest first
  std::vector<int> zone_region;                    // region index of each zone
  int gpus_per_node = 1;
};

std::vector<Pool> make_pools(const ClusterSpec& cluster) {
  std::map<std::string, Pool> by_key;
  for (const auto& [gpu, zones] : cluster.quotas) {
    for (const auto& [zone, n] : zones) {
      Pool& p = by_key[gpu];
      p.gpu = gpu;
      p.gpus_per_node = cluster.gpu_types.at(gpu).gpus_per_node;
      p.zones.emplace_back(zone, n);
    }
  }
  std::map<std::string, int> region_ids;
  for (const auto& [zone, region] : cluster.zone_region)
    region_ids.emplace(region, static_cast<int>(region_ids.size()));
  std::vector<Pool> pools;
  for (auto& [key, p] : by_key) {
    std::stable_sort(p.zones.begin(), p.zones.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    for (const auto& [zone, quota] : p.zones) p.zone_region.push_back(region_ids.at(cluster.zone_region.at(zone)));
    pools.push_back(std::move(p));
  }
  return pools;
}

// TP groups of `tp` GPUs a zone can host: whole nodes first, then the partial one.
int groups_in_zone(int quota, int gpus_per_node, int tp) {
  return quota / gpus_per_node * (gpus_per_node / tp) + (quota % gpus_per_node) / tp;
}

int groups_in_pool(const Pool& pool, int tp) {
  int n = 0;
  for (const auto& [zone, quota] : pool.zones) n += groups_in_zone(quota, pool.gpus_per_node, tp);
  return n;
}

// Pipelines up to this deep also try a^i b^j a^k stage-to-pool sequences.
constexpr int kSandwichStages = 6;

class Searcher {
 public:
  Searcher(const PlannerInputs& in, const SearchOptions& opt, SearchStats& stats)
      : in_(in),
        opt_(opt),
        stats_(stats),
        pools_(make_pools(in.cluster)),
        layers_(static_cast<int>(in.model.layers.size())) {
    for (const Pool& p : pools_) {
      for (int r : p.zone_region) regions_ = std::max(regions_, r + 1);
    }
    std::vector<int> mbs;
    for (const auto& [gpu, entries] : in.profiles.gpus) {
      for (const auto& [key, times] : entries) mbs.push_back(key.first);
    }
    std::sort(mbs.begin(), mbs.end());
    mbs.erase(std::unique(mbs.begin(), mbs.end()), mbs.end());
    mbs_ = mbs;
  }

  std::vector<RankedPlan> run() {
    if (opt_.exhaustive) {
      if (full_space_size() > kExhaustiveLimit) {
        throw UsageError("--exhaustive would simulate about " +
                         std::to_string(static_cast<long long>(full_space_size())) +
                         " plans; use it on small clusters (or lower --max-stages)");
      }
      mode_ = Mode::kEnumerate;
    }
    if (opt_.objective == Objective::kEnergy || opt_.max_energy_per_iteration > 0) {
      for (const Pool& p : pools_) {
        if (!in_.cluster.gpu_types.at(p.gpu).power.known()) {
          throw InputError("cluster.json gives no power for GPU type '" + p.gpu +
                           "' (idle_watts and busy_watts) and it has no built-in figures; energy needs them");
        }
      }
    }
    visit_configurations();
    // Where the whole space is small, a second pass over all of it makes the
    // answer exact: branch and bound, pruning only by admissible bounds, with
    // the heuristic's plans as the incumbents to beat.
    if (mode_ == Mode::kHeuristic && opt_.exact_small_spaces && full_space_size() <= kCompletionLimit) {
      mode_ = Mode::kBranchAndBound;
      visit_configurations();
    }
    return top_;
  }

 private:
  // Heuristic: block-shaped stage-to-pool sequences, a balanced split refined
  // one layer at a time, a walk over D that stops past the best. Enumerate:
  // every plan (--exhaustive). Branch and bound: every plan whose optimistic
  // bounds can still meet the bounds and enter the top K.
  enum class Mode { kHeuristic, kEnumerate, kBranchAndBound };
  bool every_plan() const { return mode_ != Mode::kHeuristic; }

  void visit_configurations() {
    for (int mbs : mbs_) {
      // A global batch is a whole number of micro-batches (plan_from_json's rule).
      if (mbs > in_.job.global_batch || in_.job.global_batch % mbs != 0) continue;
      for (int stages = 1; stages <= std::min(layers_, opt_.max_stages); ++stages) {
        for (const std::vector<int>& config : stage_configs(stages)) {
          // Without a spill pool every stage's replicas share its pool; with
          // one, stages whose pool runs short take the rest of their
          // replicas from it (a stage mixing GPU types, as SAILOR's plans do).
          for (int spill = -1; spill < static_cast<int>(pools_.size()); ++spill) {
            if (spill >= 0 && std::all_of(config.begin(), config.end(), [&](int p) { return p == spill; })) continue;
            // Each pool the stages use gets its own TP degree (a fast GPU type
            // may run without TP beside a small one that needs it).
            std::vector<int> used;
            for (int p : config)
              if (std::find(used.begin(), used.end(), p) == used.end()) used.push_back(p);
            // A spill pool no stage owns: every TP degree when exhaustive; else
            // the smallest at which an even share of the model fits its GPUs.
            const bool spill_only = spill >= 0 && std::find(used.begin(), used.end(), spill) == used.end();
            if (spill_only && every_plan()) used.push_back(spill);
            std::vector<int> tps(pools_.size(), 0);
            for_each_tp_choice(used, 0, tps, [&] {
              if (spill_only && !every_plan()) {
                const int tp =
                    opt_.one_tp ? tps[static_cast<std::size_t>(used[0])] : smallest_fitting_tp(spill, mbs, stages);
                if (tp == 0) return;
                tps[static_cast<std::size_t>(spill)] = tp;
              }
              search_config(mbs, tps, config, spill);
            });
          }
        }
      }
    }
  }

  // Which pool each stage uses. Heuristic: one pool, or a block of stages on
  // one pool followed by a block on another. Exhaustive: every sequence.
  std::vector<std::vector<int>> stage_configs(int stages) const {
    std::vector<std::vector<int>> out;
    const int n = static_cast<int>(pools_.size());
    if (every_plan()) {
      std::vector<int> seq(static_cast<std::size_t>(stages), 0);
      while (true) {
        out.push_back(seq);
        int i = stages - 1;
        while (i >= 0 && seq[static_cast<std::size_t>(i)] == n - 1) seq[static_cast<std::size_t>(i--)] = 0;
        if (i < 0) break;
        ++seq[static_cast<std::size_t>(i)];
      }
      return out;
    }
    // One pool, or blocks of two pools: a^i b^j (any depth) and, for short
    // pipelines, a^i b^j a^k (a small-memory GPU type at both ends of the
    // pipeline, where 1F1B keeps the fewest or cheapest activations).
    for (int a = 0; a < n; ++a) {
      out.emplace_back(static_cast<std::size_t>(stages), a);
      for (int b = 0; b < n; ++b) {
        if (a == b) continue;
        for (int i = 1; i < stages; ++i) {
          const int tail_max = stages <= kSandwichStages ? stages - i - 1 : 0;
          for (int k = 0; k <= tail_max; ++k) {
            std::vector<int> seq(static_cast<std::size_t>(stages), b);
            std::fill(seq.begin(), seq.begin() + i, a);
            std::fill(seq.end() - k, seq.end(), a);
            out.push_back(std::move(seq));
          }
        }
      }
    }
    return out;
  }

  // Every assignment of a TP degree in {1, 2, 4, 8} to the pools in `used`.
  template <typename F>
  void for_each_tp_choice(const std::vector<int>& used, std::size_t next, std::vector<int>& tps, F&& visit) const {
    if (next == used.size()) {
      visit();
      return;
    }
    for (int tp : {1, 2, 4, 8}) {
      if (opt_.one_tp && next > 0 && tp != tps[static_cast<std::size_t>(used[0])]) continue;
      tps[static_cast<std::size_t>(used[next])] = tp;
      for_each_tp_choice(used, next + 1, tps, visit);
    }
  }

  static int tp_of(const std::vector<int>& tps, int pool) { return tps[static_cast<std::size_t>(pool)]; }

  // Pool p can run TP degree tp at this micro-batch size (asked per
  // configuration, so answered from a table).
  bool usable(int p, int mbs, int tp) {
    auto [it, fresh] = usable_cache_.try_emplace({p, mbs, tp}, false);
    if (fresh) {
      const Pool& pool = pools_[static_cast<std::size_t>(p)];
      it->second = tp <= pool.gpus_per_node && in_.profiles.has(pool.gpu, mbs, tp);
    }
    return it->second;
  }

  // Forward + backward of layers [a, b) on `gpu`, from prefix sums.
  static double stage_time(const std::vector<double>& prefix, int a, int b) {
    return prefix[static_cast<std::size_t>(b)] - prefix[static_cast<std::size_t>(a)];
  }

  // Their optimizer step (the second half of the prefix sums).
  static double stage_update(const std::vector<double>& prefix, int a, int b) {
    const std::size_t half = prefix.size() / 2;
    return prefix[half + static_cast<std::size_t>(b)] - prefix[half + static_cast<std::size_t>(a)];
  }

  // The GPU kinds a stage's replicas run on: its pool's and, when it spills,
  // the spill pool's; the slowest paces the stage.
  struct StageKinds {
    using Figure = double (*)(const std::vector<double>&, int, int);  // stage_time or stage_update
    const std::vector<double>* own = nullptr;
    const std::vector<double>* spill = nullptr;
    double own_w = 0, spill_w = 0;  // watts above idle of one replica of each kind while it computes
    // `of` layers [a, b) on each kind (in joules above idle with `joules`),
    // the larger of the two (`slowest`) or the smaller.
    double figure(Figure of, int a, int b, bool slowest, bool joules = false) const {
      const double x = (joules ? own_w : 1.0) * of(*own, a, b);
      if (spill == nullptr) return x;
      const double y = (joules ? spill_w : 1.0) * of(*spill, a, b);
      return slowest ? std::max(x, y) : std::min(x, y);
    }
    // Forward + backward, paced by the slower kind (the split's hot loop asks).
    double time(int a, int b) const { return figure(stage_time, a, b, true); }
  };

  // Prefix sums per layer of pool p, of forward + backward (entries
  // 0..layers) then of the optimizer step (the same again), computed once per
  // (pool, mbs, TP): the search asks for the same ones for many configurations.
  const std::vector<double>& prefix_times(int p, int mbs, int tp) {
    auto [it, fresh] = prefix_cache_.try_emplace({p, mbs, tp});
    std::vector<double>& prefix = it->second;
    if (!fresh) return prefix;
    const std::size_t half = static_cast<std::size_t>(layers_) + 1;
    prefix.assign(2 * half, 0.0);
    const std::string& gpu = pools_[static_cast<std::size_t>(p)].gpu;
    for (int l = 0; l < layers_; ++l) {
      const LayerTimes& t = in_.profiles.at(gpu, mbs, tp, l);
      const auto i = static_cast<std::size_t>(l);
      prefix[i + 1] = prefix[i] + t[0] + t[1];
      prefix[half + i + 1] = prefix[half + i] + t[2];
    }
    return prefix;
  }

  // Boundaries (stages + 1 values) minimising the slowest stage's compute:
  // stage times differ per GPU type, so the split follows the hardware.
  std::vector<int> balanced_split(const std::vector<StageKinds>& prefix) const {
    const int stages = static_cast<int>(prefix.size());
    const double inf = std::numeric_limits<double>::infinity();
    // best[i][l]: slowest stage when the first i stages hold layers [0, l).
    std::vector<std::vector<double>> best(static_cast<std::size_t>(stages) + 1,
                                          std::vector<double>(static_cast<std::size_t>(layers_) + 1, inf));
    std::vector<std::vector<int>> cut = std::vector<std::vector<int>>(
        static_cast<std::size_t>(stages) + 1, std::vector<int>(static_cast<std::size_t>(layers_) + 1, 0));
    best[0][0] = 0;
    for (int i = 1; i <= stages; ++i) {
      for (int l = i; l <= layers_ - (stages - i); ++l) {
        // Stage i holds [m, l): its time only grows as m falls, so the scan
        // from the right stops once it alone exceeds the best found. Ties go
        // to the smallest m.
        double& here = best[static_cast<std::size_t>(i)][static_cast<std::size_t>(l)];
        for (int m = l - 1; m >= i - 1; --m) {
          const double t = prefix[static_cast<std::size_t>(i) - 1].time(m, l);
          if (t > here) break;
          const double prev = best[static_cast<std::size_t>(i) - 1][static_cast<std::size_t>(m)];
          if (prev == inf) continue;
          const double v = std::max(prev, t);
          if (v <= here) {
            here = v;
            cut[static_cast<std::size_t>(i)][static_cast<std::size_t>(l)] = m;
          }
        }
      }
    }
    std::vector<int> bounds(static_cast<std::size_t>(stages) + 1);
    bounds[static_cast<std::size_t>(stages)] = layers_;
    for (int i = stages; i >= 1; --i) {
      bounds[static_cast<std::size_t>(i) - 1] =
          cut[static_cast<std::size_t>(i)][static_cast<std::size_t>(bounds[static_cast<std::size_t>(i)])];
    }
    return bounds;
  }

  // Places D replicas per stage so that traffic crosses the fewest slow
  // links: replica r of every stage (a row of the pipeline) in one zone
  // where the pools allow, so activations and gradients between stages stay
  // inside a zone; and a stage's replicas in blocks by zone, in row order,
  // so its gradient ring crosses a zone boundary once per zone rather than at
  // every replica (and pays egress once). All of a stage's replicas from one
  // pool stay in one region, preferably the previous stage's. Without a
  // spill pool nullopt when the pool runs out; with one, the stage's region
  // of its own pool gives what it has and one region of the spill pool the rest.
  std::optional<Plan> place(int mbs, const std::vector<int>& tps, int dp, const std::vector<int>& config,
                            const std::vector<int>& bounds, int spill = -1) const {
    // TP groups left per pool and zone (pools never share a (GPU type, zone)).
    std::vector<std::vector<int>> left(pools_.size());
    auto init = [&](int p) {
      auto& l = left[static_cast<std::size_t>(p)];
      if (!l.empty()) return;
      const Pool& pool = pools_[static_cast<std::size_t>(p)];
      for (const auto& [zone, quota] : pool.zones)
        l.push_back(groups_in_zone(quota, pool.gpus_per_node, tp_of(tps, p)));
    };
    for (int p : config) init(p);
    if (spill >= 0) init(spill);
    // Stages still to place per pool: a zone's room is shared among them.
    std::vector<int> stages_left(pools_.size(), 0);
    for (int p : config) ++stages_left[static_cast<std::size_t>(p)];
    Plan plan;
    plan.mbs = mbs;
    plan.global_batch = in_.job.global_batch;
    plan.stages.reserve(config.size());
    const Stage* previous = nullptr;
    for (std::size_t i = 0; i < config.size(); ++i) {
      Stage stage;
      stage.first_layer = bounds[i];
      stage.last_layer = bounds[i + 1];
      stage.tp = tp_of(tps, config[i]);
      stage.replicas.resize(static_cast<std::size_t>(dp));
      const int own = take_replicas(config[i], tps, 0, dp, spill < 0 ? dp : 1, left, stage, previous,
                                    stages_left[static_cast<std::size_t>(config[i])]);
      --stages_left[static_cast<std::size_t>(config[i])];
      if (own < dp && (spill < 0 || spill == config[i] ||
                       take_replicas(spill, tps, own, dp - own, dp - own, left, stage, previous, 1) < dp - own)) {
        return std::nullopt;
      }
      plan.stages.push_back(std::move(stage));
      previous = &plan.stages.back();
    }
    return plan;
  }

  // Fills up to `want` replica slots of `stage` from slot `first` on with
  // TP groups of pool p, from one region with at least `need` groups left
  // (the previous stage's region when it has them, else the roomiest);
  // returns how many. A slot goes to the zone of the previous stage's
  // replica in that slot when this pool has room there; the others fill
  // zones one at a time, each up to its share among the pool's `stages_left`
  // stages, then whatever room is left.
  int take_replicas(int p, const std::vector<int>& tps, int first, int want, int need,
                    std::vector<std::vector<int>>& left, Stage& stage, const Stage* previous, int stages_left) const {
    const Pool& pool = pools_[static_cast<std::size_t>(p)];
    auto& l = left[static_cast<std::size_t>(p)];
    const int tp = tp_of(tps, p);
    const std::size_t zones = l.size();
    std::vector<int>& wanted = wanted_;
    zones_of_previous(pool, first, want, previous, wanted);
    const int region = region_to_fill(pool, l, need, wanted);
    if (region < 0) return 0;
    const int n = std::min(want, room_[static_cast<std::size_t>(region)]);
    const int per_node = pool.gpus_per_node / tp;
    auto put = [&](int k, std::size_t z) {
      // Groups fill nodes in order, gpus_per_node / tp groups per node (what pack_nodes would do).
      const int used = groups_in_zone(pool.zones[z].second, pool.gpus_per_node, tp) - l[z];
      --l[z];
      stage.replicas[static_cast<std::size_t>(first + k)] = {pool.gpu, pool.zones[z].first, used / per_node,
                                                             tp == stage.tp ? 0 : tp};
      wanted[static_cast<std::size_t>(k)] = -2;  // placed
    };
    int placed = 0;
    for (int k = 0; k < n; ++k) {
      const int z = wanted[static_cast<std::size_t>(k)];
      if (z >= 0 && pool.zone_region[static_cast<std::size_t>(z)] == region && l[static_cast<std::size_t>(z)] > 0) {
        put(k, static_cast<std::size_t>(z));
        ++placed;
      }
    }
    // The rest in blocks: the zone with the most room first, up to its share, then the next.
    for (int pass = 0; pass < 2 && placed < n; ++pass) {
      share_.assign(zones, 0);
      for (std::size_t z = 0; z < zones; ++z) {
        if (pool.zone_region[z] == region) share_[z] = pass == 0 ? l[z] / std::max(1, stages_left) : l[z];
      }
      std::size_t z = zones;
      for (int k = 0; k < want && placed < n; ++k) {
        if (wanted[static_cast<std::size_t>(k)] == -2) continue;
        if (z == zones || share_[z] == 0) {
          z = zones;
          for (std::size_t y = 0; y < zones; ++y) {
            if (share_[y] > 0 && (z == zones || share_[y] > share_[z])) z = y;
          }
          if (z == zones) break;
        }
        --share_[z];
        put(k, z);
        ++placed;
      }
    }
    // Slots past what the region had stay for the spill pool: they must be the last ones.
    if (placed < want) compact_placed(stage, first, want, wanted);
    return placed;
  }

  // The zone index of `pool` where the previous stage put each of the
  // slots' replicas (-1: none there, or no previous stage).
  void zones_of_previous(const Pool& pool, int first, int want, const Stage* previous, std::vector<int>& wanted) const {
    wanted.assign(static_cast<std::size_t>(want), -1);
    if (previous == nullptr) return;
    for (int k = 0; k < want; ++k) {
      const std::string& zone = previous->replicas[static_cast<std::size_t>(first + k)].zone;
      for (std::size_t z = 0; z < pool.zones.size(); ++z) {
        if (pool.zones[z].first == zone) wanted[static_cast<std::size_t>(k)] = static_cast<int>(z);
      }
    }
  }

  // The region the slots are filled from: the previous stage's when it has
  // `need` groups left, else the roomiest with that many (-1: none). Leaves
  // each region's room in room_.
  int region_to_fill(const Pool& pool, const std::vector<int>& l, int need, const std::vector<int>& wanted) const {
    room_.assign(static_cast<std::size_t>(regions_), 0);
    for (std::size_t z = 0; z < l.size(); ++z) room_[static_cast<std::size_t>(pool.zone_region[z])] += l[z];
    int region = -1, best_room = 0;
    for (int r = 0; r < regions_; ++r) {
      const int n = room_[static_cast<std::size_t>(r)];
      if (n >= need && n > best_room) {
        region = r;
        best_room = n;
      }
    }
    if (region < 0) return -1;
    if (!wanted.empty() && wanted.front() >= 0) {
      const int r = pool.zone_region[static_cast<std::size_t>(wanted.front())];
      if (room_[static_cast<std::size_t>(r)] >= need) region = r;
    }
    return region;
  }

  // Moves the placed replicas of slots [first, first + want) to the front, keeping their order.
  static void compact_placed(Stage& stage, int first, int want, const std::vector<int>& wanted) {
    int k = 0;
    std::vector<Replica>& reps = stage.replicas;
    for (int j = 0; j < want; ++j) {
      if (wanted[static_cast<std::size_t>(j)] == -2)
        reps[static_cast<std::size_t>(first + k++)] = reps[static_cast<std::size_t>(first + j)];
    }
  }

  // Simulates a plan and keeps it if it fits, meets the bounds and ranks in the top K.
  std::optional<Estimate> consider(const Plan& plan) {
    ++stats_.candidates;
    Estimate e;
    try {
      e = estimate_plan(plan, in_);
    } catch (const InputError& error) {
      // A link the cluster has no bandwidth fit for: cannot be judged.
      if (stats_.unpriced_links++ == 0) stats_.first_unpriced_link = error.message();
      return std::nullopt;
    }
    if (!e.fits) {
      ++stats_.memory_rejected;
      return std::nullopt;
    }
    if (!within_bounds(e)) {
      ++stats_.constraint_rejected;
      return e;  // valid but outside the bounds: still tells the DP loop where the optimum is
    }
    keep(plan, e);
    return e;
  }

  bool within_bounds(const Estimate& e) const {
    return !(opt_.max_cost_per_iteration > 0 && e.usd_per_iteration() > opt_.max_cost_per_iteration) &&
           !(opt_.min_throughput > 0 && e.iterations_per_s < opt_.min_throughput) &&
           !(opt_.max_energy_per_iteration > 0 && e.energy_j > opt_.max_energy_per_iteration);
  }

  void keep(const Plan& plan, const Estimate& e) {
    const std::size_t k = static_cast<std::size_t>(std::max(1, opt_.top_k));
    if (top_.size() == k && !better(e, top_.back().estimate, opt_.objective)) return;
    auto at = std::find_if(top_.begin(), top_.end(),
                           [&](const RankedPlan& r) { return better(e, r.estimate, opt_.objective); });
    top_.insert(at, RankedPlan{plan, e});
    if (top_.size() > k) top_.pop_back();
  }

  // Moves single layers across stage boundaries while the estimate improves.
  void refine(int mbs, const std::vector<int>& tps, int dp, const std::vector<int>& config, int spill,
              std::vector<int> bounds, Estimate current) {
    bool improved = true;
    while (improved) {
      improved = false;
      for (std::size_t b = 1; b + 1 < bounds.size() && !improved; ++b) {
        for (int delta : {-1, 1}) {
          std::vector<int> trial = bounds;
          trial[b] += delta;
          if (trial[b] <= trial[b - 1] || trial[b] >= trial[b + 1]) continue;
          auto plan = place(mbs, tps, dp, config, trial, spill);
          if (!plan) continue;
          auto e = consider(*plan);
          if (e && within_bounds(*e) && better(*e, current, opt_.objective)) {
            bounds = trial;
            current = *e;
            improved = true;
            break;
          }
        }
      }
    }
  }

  // How many replicas a configuration may have: [lo, hi].
  struct ReplicaRange {
    int lo = 1, hi = 0;
  };

  // The replica counts worth trying for a configuration, or nothing when a
  // pool cannot hold its stages (memory, or another spill pool is roomier).
  std::optional<ReplicaRange> replica_range(int mbs, const std::vector<int>& tps, const std::vector<int>& config,
                                            int spill) {
    std::map<int, int> stages_on_pool;
    for (int p : config) {
      if (!usable(p, mbs, tp_of(tps, p))) return std::nullopt;
      ++stages_on_pool[p];
    }
    if (spill >= 0 && !usable(spill, mbs, tp_of(tps, spill))) return std::nullopt;
    // More replicas than micro-batches idle.
    const int batch_limit = (in_.job.global_batch + mbs - 1) / mbs;
    int dp_own = std::numeric_limits<int>::max();  // replicas every stage's own pool can host
    for (const auto& [p, n] : stages_on_pool)
      dp_own = std::min(dp_own, groups_in_pool(pools_[static_cast<std::size_t>(p)], tp_of(tps, p)) / n);
    ReplicaRange r{1, std::min(dp_own, batch_limit)};
    if (spill >= 0) {
      if (!every_plan() && !roomiest_spill_pool(mbs, tps, stages_on_pool, dp_own, spill)) return std::nullopt;
      // Spilling only adds plans with more replicas than the own pools host.
      r.lo = dp_own + 1;
      r.hi = std::min(spill_capacity(tps, config, spill), batch_limit);
    }
    if (opt_.max_gpus > 0) {
      // A row's GPUs: each stage at the fewer of its own and the spill pool's TP degrees.
      int fewest = 0;
      for (int p : config) fewest += spill >= 0 ? std::min(tp_of(tps, p), tp_of(tps, spill)) : tp_of(tps, p);
      r.hi = std::min(r.hi, opt_.max_gpus / fewest);
    }
    if (r.hi < r.lo) return std::nullopt;
    return r;
  }

  // The plan of `dp` replicas and these layer bounds, if it places within --max-gpus.
  std::optional<Plan> placed(int mbs, const std::vector<int>& tps, int dp, const std::vector<int>& config,
                             const std::vector<int>& bounds, int spill) {
    auto plan = place(mbs, tps, dp, config, bounds, spill);
    if (plan && opt_.max_gpus > 0 && plan->gpus() > opt_.max_gpus) return std::nullopt;
    return plan;
  }

  // A stage on pool p (and, spilling, on `spill_pool` too): its layer times and busy power.
  StageKinds kinds_of(int mbs, const std::vector<int>& tps, int p, int spill_pool) {
    auto prefix_for = [&](int q) { return &prefix_times(q, mbs, tp_of(tps, q)); };
    auto busy_w = [&](int q) {
      const GpuPower& power = in_.cluster.gpu_types.at(pools_[static_cast<std::size_t>(q)].gpu).power;
      return tp_of(tps, q) * (power.busy_watts - power.idle_watts);
    };
    return spill_pool < 0 ? StageKinds{prefix_for(p), nullptr, busy_w(p), 0}
                          : StageKinds{prefix_for(p), prefix_for(spill_pool), busy_w(p), busy_w(spill_pool)};
  }

  void search_config(int mbs, const std::vector<int>& tps, const std::vector<int>& config, int spill) {
    const auto range = replica_range(mbs, tps, config, spill);
    if (!range) return;
    if (mode_ == Mode::kEnumerate) {
      for_each_split(static_cast<int>(config.size()), [&](const std::vector<int>& bounds) {
        for (int dp = range->lo; dp <= range->hi; ++dp) {
          if (auto plan = placed(mbs, tps, dp, config, bounds, spill)) consider(*plan);
        }
      });
      return;
    }
    if (mode_ == Mode::kBranchAndBound) {
      branch_and_bound(mbs, tps, config, spill, *range);
      return;
    }
    search_balanced(mbs, tps, config, spill, *range);
  }

  // Every split, with the replica counts the bounds admit at it. Bounds that
  // hold at every D: with a spill pool a stage may run on either pool's GPUs
  // (even on the spill pool's alone), so it is taken at the quicker and
  // cheaper of the two, and its transfers are left out (a spilled replica's
  // link may be faster).
  void branch_and_bound(int mbs, const std::vector<int>& tps, const std::vector<int>& config, int spill,
                        ReplicaRange range) {
    std::vector<StageKinds> kinds;
    for (int p : config) kinds.push_back(kinds_of(mbs, tps, p, spill));
    const RateFloor rates = rate_floor(kinds, config, tps, spill);
    for_each_split(static_cast<int>(config.size()), [&](const std::vector<int>& bounds) {
      if (spill < 0 && !states_fit(tps, config, bounds)) return;
      int lo = range.lo, hi = range.hi;
      const PipelineBound b = bound_of_split(kinds, bounds, mbs, config, tps, /*optimistic=*/true);
      if (!admissible_replicas(mbs, b, rates, lo, hi)) return;
      for (int dp = lo; dp <= hi; ++dp) {
        int d_lo = dp, d_hi = dp;  // the incumbents improve as the walk goes: check again
        if (!admissible_replicas(mbs, b, rates, d_lo, d_hi)) continue;
        if (auto plan = placed(mbs, tps, dp, config, bounds, spill)) consider(*plan);
      }
    });
  }

  // The heuristic: the balanced split, its replica counts walked from the
  // objective's good end, then single layers moved across boundaries.
  void search_balanced(int mbs, const std::vector<int>& tps, const std::vector<int>& config, int spill,
                       ReplicaRange range) {
    // Which stages spill at the largest D (later stages of a pool run short first).
    const std::vector<bool> spills = spilling_stages(tps, config, spill, range.hi);
    std::vector<StageKinds> prefix;
    for (std::size_t i = 0; i < config.size(); ++i)
      prefix.push_back(kinds_of(mbs, tps, config[i], spills[i] ? spill : -1));
    const RateFloor rates = rate_floor(prefix, config, tps, spill);
    if (!admissible_replicas(mbs, bound_before_split(prefix), rates, range.lo, range.hi)) {
      ++stats_.bound_pruned;
      return;
    }
    const std::vector<int> bounds = balanced_split(prefix);
    if (!states_fit(tps, config, bounds)) {
      ++stats_.memory_rejected;
      return;
    }
    if (!admissible_replicas(mbs, bound_of_split(prefix, bounds, mbs, config, tps, spill >= 0), rates, range.lo,
                             range.hi)) {
      ++stats_.bound_pruned;
      return;
    }
    int best_dp = 0;
    const std::optional<Estimate> best = walk_replicas(mbs, tps, config, spill, bounds, range, best_dp);
    // Configurations that mix GPU types in a stage keep the balanced split:
    // refining them too costs 3x the search time and found no better plan
    // on the benchmark's clusters.
    if (best && config.size() > 1 && spill < 0) refine(mbs, tps, best_dp, config, spill, bounds, *best);
  }

  // Throughput: from many replicas to few; cost: from few to many. Plans
  // outside the bounds are passed over (a budget cuts the many-replica end,
  // a speed floor the few-replica end); the walk stops once a plan within
  // them ranks below the best within them (the objective is unimodal in D).
  // The best plan's estimate, its replica count in `best_dp`.
  std::optional<Estimate> walk_replicas(int mbs, const std::vector<int>& tps, const std::vector<int>& config, int spill,
                                        const std::vector<int>& bounds, ReplicaRange range, int& best_dp) {
    std::optional<Estimate> best;
    for (int step = 0; step <= range.hi - range.lo; ++step) {
      const int dp = opt_.objective == Objective::kThroughput ? range.hi - step : range.lo + step;  // cost, energy: up
      auto plan = placed(mbs, tps, dp, config, bounds, spill);
      if (!plan) continue;
      const std::uint64_t unpriced = stats_.unpriced_links;
      auto e = consider(*plan);
      if (!e) {
        // Fewer replicas mean more micro-batches in flight: a throughput
        // search (D descending) will not fit either. A cost search (D
        // ascending) keeps going: more replicas lower the in-flight count.
        // A plan over a link without a fit says nothing of smaller ones
        // (they may stay inside a node).
        if (opt_.objective == Objective::kThroughput && stats_.unpriced_links == unpriced) break;
        continue;
      }
      if (!within_bounds(*e)) {
        // Past a speed floor going down, or a budget going up, nothing later
        // meets it (throughput falls with D, cost per iteration grows with it).
        if (past_the_bounds(*e)) break;
        continue;
      }
      if (best && !better(*e, *best, opt_.objective)) break;
      best = e;
      best_dp = dp;
    }
    return best;
  }

  // True when a plan outside the bounds means every later one of the walk is too.
  bool past_the_bounds(const Estimate& e) const {
    if (opt_.objective == Objective::kThroughput)
      return opt_.min_throughput > 0 && e.iterations_per_s < opt_.min_throughput;
    return (opt_.max_cost_per_iteration > 0 && e.usd_per_iteration() > opt_.max_cost_per_iteration) ||
           (opt_.max_energy_per_iteration > 0 && e.energy_j > opt_.max_energy_per_iteration);
  }

  // Heuristic: a configuration spills only into the pool with the most TP
  // groups left once its stages hold dp_own replicas each (ties: the first).
  bool roomiest_spill_pool(int mbs, const std::vector<int>& tps, const std::map<int, int>& stages_on_pool, int dp_own,
                           int spill) {
    int stages = 0;  // pipeline stages (the TP a pool no stage owns would get depends on it)
    for (const auto& [p, n] : stages_on_pool) stages += n;
    auto room = [&](int q) {
      const auto own = stages_on_pool.find(q);
      const bool owned = own != stages_on_pool.end();
      const int tp = owned ? tp_of(tps, q) : smallest_fitting_tp(q, mbs, stages);
      if (tp == 0) return -1;
      return groups_in_pool(pools_[static_cast<std::size_t>(q)], tp) - (owned ? own->second * dp_own : 0);
    };
    const int mine = room(spill);
    for (int q = 0; q < static_cast<int>(pools_.size()); ++q) {
      if (q == spill || (stages_on_pool.size() == 1 && stages_on_pool.begin()->first == q)) continue;
      const int r = room(q);
      if (r > mine || (r == mine && q < spill)) return false;
    }
    return true;
  }

  // The most replicas per stage when stages take what their own pool has
  // left, in stage order, and the spill pool the rest.
  int spill_capacity(const std::vector<int>& tps, const std::vector<int>& config, int spill) const {
    int total = 0;
    std::map<int, int> groups;
    for (int p : config) groups.emplace(p, groups_in_pool(pools_[static_cast<std::size_t>(p)], tp_of(tps, p)));
    groups.emplace(spill, groups_in_pool(pools_[static_cast<std::size_t>(spill)], tp_of(tps, spill)));
    for (const auto& [p, n] : groups) total += n;
    // Feasibility only shrinks as D grows: bisect.
    int lo = 0, hi = total / static_cast<int>(config.size());
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (spilling_stages(tps, config, spill, mid).empty())
        hi = mid - 1;
      else
        lo = mid;
    }
    return lo;
  }

  // Per stage, whether it takes replicas from the spill pool at D replicas;
  // empty when the pools cannot host D (or no spill pool).
  std::vector<bool> spilling_stages(const std::vector<int>& tps, const std::vector<int>& config, int spill,
                                    int dp) const {
    std::vector<bool> spills(config.size(), false);
    if (spill < 0) return spills;
    std::vector<int> left(pools_.size(), 0);
    auto groups = [&](int p) { return groups_in_pool(pools_[static_cast<std::size_t>(p)], tp_of(tps, p)); };
    for (int p : config) left[static_cast<std::size_t>(p)] = groups(p);
    left[static_cast<std::size_t>(spill)] = groups(spill);
    for (std::size_t i = 0; i < config.size(); ++i) {
      int& own = left[static_cast<std::size_t>(config[i])];
      const int take = std::min(own, dp);
      own -= take;
      if (take == dp) continue;
      int& extra = left[static_cast<std::size_t>(spill)];
      if (config[i] == spill || extra < dp - take) return {};
      extra -= dp - take;
      spills[i] = true;
    }
    return spills;
  }

  // Weights, gradients, optimizer state and runtime overhead alone (no
  // activations) must fit on every stage; independent of D, so checked once.
  bool states_fit(const std::vector<int>& tps, const std::vector<int>& config, const std::vector<int>& bounds) const {
    for (std::size_t i = 0; i < config.size(); ++i) {
      if (!states_fit_on(config[i], in_.model.params(bounds[i], bounds[i + 1], tp_of(tps, config[i])))) return false;
    }
    return true;
  }

  // Parameter states of `params` parameters per GPU and the runtime
  // overhead within a GPU of pool p.
  bool states_fit_on(int p, double params) const {
    const Calibration& cal = in_.calibration;
    const bool fp32 = in_.job.precision == "fp32";
    const double per_param = ((fp32 ? 4 : cal.weight_bytes_per_param) + (fp32 ? 4 : cal.gradient_bytes_per_param) +
                              cal.optimizer_bytes_per_param);
    const Pool& pool = pools_[static_cast<std::size_t>(p)];
    return params * per_param + cal.runtime_overhead_bytes <= in_.cluster.gpu_types.at(pool.gpu).memory_bytes;
  }

  // The smallest usable TP degree at which 1/stages of the model's
  // parameter states fit a GPU of pool p; 0 when none does.
  int smallest_fitting_tp(int p, int mbs, int stages) {
    for (int tp : {1, 2, 4, 8}) {
      if (usable(p, mbs, tp) && states_fit_on(p, in_.model.params(0, layers_, tp) / stages)) return tp;
    }
    return 0;
  }

  // Lower bounds on a configuration's time per micro-batch, the runtime's
  // work included: of its slowest stage and of all its stages together.
  struct PipelineBound {
    double slowest = 0, total = 0;
    double update = 0;         // the slowest stage's optimizer step (the iteration waits for it)
    double busy_joules = 0;    // above idle: one micro-batch's forward and backward through every stage
    double update_joules = 0;  // above idle: every stage's optimizer step
  };

  // Before the split: every layer at its quickest on the configuration's GPU
  // kinds, perfectly balanced.
  PipelineBound bound_before_split(const std::vector<StageKinds>& prefix) const {
    // The configuration's own GPU kinds, each once.
    std::vector<const StageKinds*> kinds;
    for (const StageKinds& k : prefix) {
      if (std::none_of(kinds.begin(), kinds.end(), [&](const StageKinds* seen) { return seen->own == k.own; }))
        kinds.push_back(&k);
    }
    double total = 0, update = 0, joules = 0, update_joules = 0;
    for (int l = 0; l < layers_; ++l) {
      const double inf = std::numeric_limits<double>::infinity();
      double t = inf, u = inf, j = inf, uj = inf;
      for (const StageKinds* k : kinds) {
        const double kt = stage_time(*k->own, l, l + 1), ku = stage_update(*k->own, l, l + 1);
        t = std::min(t, kt);
        u = std::min(u, ku);
        j = std::min(j, k->own_w * kt);
        uj = std::min(uj, k->own_w * ku);
      }
      total += t;
      update += u;
      joules += j;
      update_joules += uj;
    }
    const double stages = static_cast<double>(prefix.size());
    const double o = in_.calibration.microbatch_overhead_s;
    return {total / stages + o, total + stages * o, update / stages, joules, update_joules};
  }

  // After it: each stage's compute on its kinds (a stage that spills is
  // paced by the slower) and, between stages on one GPU type each, the
  // transfers at the fastest link any placement could give them (on both
  // stages' slots with DeepSpeed's blocking transfers, as the simulator
  // counts them).
  // Optimistic: a stage that may spill is taken at its quicker kind (it
  // may run on either alone), which holds for every D.
  PipelineBound bound_of_split(const std::vector<StageKinds>& prefix, const std::vector<int>& bounds, int mbs,
                               const std::vector<int>& config, const std::vector<int>& tps, bool optimistic = false) {
    const std::size_t stages = prefix.size();
    std::vector<double> slot(stages);
    for (std::size_t i = 0; i < stages; ++i) {
      const int a = bounds[i], z = bounds[i + 1];
      slot[i] = prefix[i].figure(stage_time, a, z, !optimistic) + in_.calibration.microbatch_overhead_s;
    }
    for (std::size_t i = 0; i + 1 < stages; ++i) {
      if (prefix[i].spill != nullptr || prefix[i + 1].spill != nullptr) continue;
      const int tp = tp_of(tps, config[i]);
      const double bytes = in_.model.act_output(bounds[i + 1] - 1, tp) * mbs * in_.job.wire_bytes();
      const double t = 2 * bytes / fastest_bytes_per_s(config[i], config[i + 1], tp + tp_of(tps, config[i + 1]), bytes);
      slot[i] += t;
      if (in_.job.runtime == TrainingRuntime::kDeepSpeed) slot[i + 1] += t;
    }
    PipelineBound b;
    for (std::size_t i = 0; i < stages; ++i) {
      const int a = bounds[i], z = bounds[i + 1];
      b.busy_joules += prefix[i].figure(stage_time, a, z, false, true);
      b.update_joules += prefix[i].figure(stage_update, a, z, false, true);
      b.update = std::max(b.update, prefix[i].figure(stage_update, a, z, !optimistic));
    }
    for (double t : slot) {
      b.slowest = std::max(b.slowest, t);
      b.total += t;
    }
    return b;
  }

  // The fastest any placement moves `bytes` from a GPU of pool a to one of
  // pool b: inside a node when one node can hold both TP groups, else the
  // fastest inter-node link class the cluster has for the pair.
  double fastest_bytes_per_s(int a, int b, int gpus_together, double bytes) {
    const Pool& pa = pools_[static_cast<std::size_t>(a)];
    const bool same_node = a == b && gpus_together <= pa.gpus_per_node;
    auto [it, fresh] = fastest_cache_.try_emplace({a, b, same_node, bytes}, 0.0);
    if (!fresh) return it->second;
    const std::string& ga = pa.gpu;
    const std::string& gb = pools_[static_cast<std::size_t>(b)].gpu;
    double best = 0;
    for (LinkClass link :
         {LinkClass::kSameNode, LinkClass::kSameZone, LinkClass::kCrossZone, LinkClass::kCrossRegion}) {
      if (link == LinkClass::kSameNode && !same_node) continue;
      try {
        best = std::max(best, in_.cluster.fit(link, ga, gb).bytes_per_s(bytes));
      } catch (const InputError&) {
        // no fit for this class: plans over it are not judged anyway
      }
    }
    it->second = best > 0 ? best : std::numeric_limits<double>::infinity();
    return it->second;
  }

  // Floors on what one replica of every stage (a pipeline row) costs and
  // draws; a stage that spills at the lower of its two pools' figures.
  struct RateFloor {
    double usd_per_s = 0;   // $ per second of the row's GPUs
    double idle_watts = 0;  // their idle power
  };

  RateFloor rate_floor(const std::vector<StageKinds>& prefix, const std::vector<int>& config,
                       const std::vector<int>& tps, int spill) const {
    auto type = [&](int p) -> const GpuType& {
      return in_.cluster.gpu_types.at(pools_[static_cast<std::size_t>(p)].gpu);
    };
    auto usd = [&](int p) { return tp_of(tps, p) * type(p).price_per_hour / 3600.0; };
    auto idle = [&](int p) { return tp_of(tps, p) * type(p).power.idle_watts; };
    RateFloor f;
    for (std::size_t i = 0; i < config.size(); ++i) {
      const bool spills = prefix[i].spill != nullptr;
      f.usd_per_s += spills ? std::min(usd(config[i]), usd(spill)) : usd(config[i]);
      f.idle_watts += spills ? std::min(idle(config[i]), idle(spill)) : idle(config[i]);
    }
    return f;
  }

  // Narrows [dp_min, dp_max] to the replica counts at which a plan of this
  // configuration could meet the bounds and enter the top K, by optimistic
  // figures at each D: the pipeline bound given and the slowest optimizer
  // step with no all-reduce for time (so throughput from above), and that
  // time times the GPUs' price or idle power, plus the least busy energy of
  // the compute and the steps, for cost and energy (from below). False when no D is left: the configuration is
  // skipped. An exhaustive search prunes nothing.
  bool admissible_replicas(int mbs, const PipelineBound& b, const RateFloor& rates, int& dp_min, int& dp_max) const {
    if (mode_ == Mode::kEnumerate) return true;
    const bool full = top_.size() >= static_cast<std::size_t>(std::max(1, opt_.top_k));
    const Estimate* worst = full ? &top_.back().estimate : nullptr;
    int lo = 0, hi = -1;
    bool meets_bounds = false;
    for (int dp = dp_min; dp <= dp_max; ++dp) {
      const int nb = (in_.job.global_batch + mbs * dp - 1) / (mbs * dp);
      const double time = (nb - 1) * b.slowest + b.total + b.update;
      const double usd = rates.usd_per_s * dp * time;
      const double joules = rates.idle_watts * dp * time + dp * (nb * b.busy_joules + b.update_joules);
      // The bounds can equal a plan's figures exactly, summed in another
      // order: a relative slack keeps rounding from pruning that plan.
      const double slack = 1 + 1e-9;
      if (opt_.min_throughput > 0 && time > slack / opt_.min_throughput) continue;
      if (opt_.max_cost_per_iteration > 0 && usd > slack * opt_.max_cost_per_iteration) continue;
      if (opt_.max_energy_per_iteration > 0 && joules > slack * opt_.max_energy_per_iteration) continue;
      meets_bounds = true;
      if (worst != nullptr) {
        const bool hopeless = opt_.objective == Objective::kThroughput ? time > slack * worst->iteration_s
                              : opt_.objective == Objective::kCost     ? usd > slack * worst->usd_per_iteration()
                                                                       : joules > slack * worst->energy_j;
        if (hopeless) continue;
      }
      if (hi < lo) lo = dp;
      hi = dp;
    }
    if (!meets_bounds) ++stats_.beyond_bounds;
    if (hi < lo) return false;
    dp_min = lo;
    dp_max = hi;
    return true;
  }

  // Visits every split of the layers into `stages` non-empty consecutive ranges.
  template <typename F>
  void for_each_split(int stages, F&& visit) const {
    std::vector<int> bounds(static_cast<std::size_t>(stages) + 1);
    for (int i = 0; i < stages; ++i) bounds[static_cast<std::size_t>(i)] = i;
    bounds.back() = layers_;
    while (true) {
      visit(bounds);
      int i = stages - 1;  // last interior boundary
      while (i >= 1 && bounds[static_cast<std::size_t>(i)] == layers_ - (stages - i)) --i;
      if (i < 1) break;
      ++bounds[static_cast<std::size_t>(i)];
      for (int j = i + 1; j < stages; ++j)
        bounds[static_cast<std::size_t>(j)] = bounds[static_cast<std::size_t>(j) - 1] + 1;
    }
  }

  // Plans an enumeration of every configuration would simulate, about.
  double full_space_size() const {
    double total = 0;
    const double n = static_cast<double>(pools_.size());
    int gpus = 0;
    for (const auto& [gpu, zones] : in_.cluster.quotas) {
      for (const auto& [zone, q] : zones) gpus += q;
    }
    for (int stages = 1; stages <= std::min(layers_, opt_.max_stages); ++stages) {
      double splits = 1;  // C(layers-1, stages-1)
      for (int i = 1; i < stages; ++i) splits = splits * (layers_ - i) / i;
      // Every stage-to-pool sequence, spill pool, split and D, and a TP degree per pool used.
      total += std::pow(n, stages) * (n + 1) * splits * gpus * std::pow(4.0, std::min<double>(n, stages));
    }
    return total * static_cast<double>(mbs_.size());
  }

  static constexpr double kExhaustiveLimit = 2e7;  // --exhaustive refuses larger spaces
  static constexpr double kCompletionLimit = 2e6;  // the exact pass runs on spaces up to this

  const PlannerInputs& in_;
  const SearchOptions& opt_;
  SearchStats& stats_;
  std::vector<Pool> pools_;
  int layers_;
  std::vector<int> mbs_;
  std::vector<RankedPlan> top_;
  Mode mode_ = Mode::kHeuristic;
  int regions_ = 0;                                                        // region ids are 0..regions_-1
  mutable std::vector<int> room_, share_, wanted_;                         // take_replicas' scratch
  std::map<std::tuple<int, int, int>, std::vector<double>> prefix_cache_;  // (pool, mbs, tp) -> prefix sums
  std::map<std::tuple<int, int, int>, bool> usable_cache_;                 // (pool, mbs, tp) -> usable
  std::map<std::tuple<int, int, bool, double>, double> fastest_cache_;     // (pool a, pool b, same node, bytes) -> B/s
};

}  // namespace

SearchOptions search_options(const std::string& objective, double max_cost_per_iteration, double min_throughput,
                             int max_gpus, double max_energy_per_iteration) {
  SearchOptions options;
  if (objective == "throughput")
    options.objective = Objective::kThroughput;
  else if (objective == "cost")
    options.objective = Objective::kCost;
  else if (objective == "energy")
    options.objective = Objective::kEnergy;
  else
    throw UsageError("--objective must be 'throughput', 'cost' or 'energy', not '" + objective + "'");
  if (!(max_cost_per_iteration >= 0)) throw UsageError("--max-cost-per-iter must be 0 (no bound) or positive");
  if (!(min_throughput >= 0)) throw UsageError("--min-throughput must be 0 (no bound) or positive");
  if (!(max_energy_per_iteration >= 0)) throw UsageError("--max-energy-per-iter must be 0 (no bound) or positive");
  if (max_gpus < 0) throw UsageError("--max-gpus must be 0 (no bound) or positive");
  options.max_cost_per_iteration = max_cost_per_iteration;
  options.min_throughput = min_throughput;
  options.max_energy_per_iteration = max_energy_per_iteration;
  options.max_gpus = max_gpus;
  return options;
}

std::vector<RankedPlan> search_plans(const PlannerInputs& inputs, const SearchOptions& options, SearchStats* stats) {
  SearchStats local;
  SearchStats& s = stats != nullptr ? *stats : local;
  if (options.top_k < 1) throw UsageError("--top must be at least 1");
  std::vector<RankedPlan> top = Searcher(inputs, options, s).run();
  if (top.empty()) {
    if (s.constraint_rejected > 0 || s.beyond_bounds > 0) {
      // Something was passed over for the bounds alone (a plan that fit, or
      // a configuration whose optimistic figures already missed them).
      throw NoSolutionError(
          "no plan meets the bounds (--max-cost-per-iter / --min-throughput / --max-energy-per-iter); " +
          std::to_string(s.candidates) + " plans simulated, " + std::to_string(s.constraint_rejected) +
          " of them fit but missed the bounds");
    }
    if (s.candidates == 0 && s.memory_rejected > 0) throw NoSolutionError("no plan fits in GPU memory");
    if (s.candidates == 0)
      throw NoSolutionError("no plan can be built: no GPU type has profiles for a usable TP degree");
    if (s.unpriced_links == s.candidates) {
      // Typically a cluster measured on one node (profile-net under launch
      // --nprocs 2 records that node's GPUs) asked for plans that span more.
      throw NoSolutionError(
          "every candidate plan needs a network link the cluster has no bandwidth fit for (" + s.first_unpriced_link +
          "); measure it with sailor-run profile-net --link-class for that link, run on GPUs of two nodes (or give "
          "cluster.json its fit); a job on more GPUs than one node holds (gpus_per_node) always needs a cross-node "
          "link");
    }
    throw NoSolutionError("no plan fits in GPU memory (" + std::to_string(s.candidates) + " plans simulated)");
  }
  return top;
}

}  // namespace fleet::sailor
