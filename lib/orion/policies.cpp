#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "orion/policy.h"

namespace fleet::orion {

void PolicyOptions::validate() const {
  if (!(dur_threshold_fraction > 0 && dur_threshold_fraction < 1))
    throw UsageError("--dur-threshold must be in (0, 1)");
  if (!(hp_slowdown_limit == 0 || hp_slowdown_limit >= 1))
    throw UsageError("--hp-slowdown must be 0 (a fixed slack) or at least 1 (the HP's time alone)");
  if (sm_threshold < -1) throw UsageError("--sm-threshold must be -1 (Orion's default) or at least 0");
  if (!(hp_limit_ms >= 0)) throw UsageError("--hp-limit must be 0 (no online tuning) or positive ms");
  if (hp_limit_ms > 0 && sm_threshold >= 0)
    throw UsageError("--hp-limit tunes the SM threshold online; leave --sm-threshold at -1");
  if (reef_queue_depth < 1) throw UsageError("--reef-queue-depth must be at least 1");
  if (!(max_be_wait_ms >= 0)) throw UsageError("--max-be-wait must be 0 (never) or positive ms");
}

namespace {

bool complementary(KernelClass a, KernelClass b) {
  return a == KernelClass::kUnknown || b == KernelClass::kUnknown || a != b;
}

// Orion: HP kernels at once. A BE kernel goes freely while no HP request is
// in flight; during one, only when its SM need is under the threshold and
// what one wave of it costs the request fits in what the request can still
// lose within its bound. Outstanding BE work stays under DUR_THRESHOLD.
class OrionPolicy : public Policy {
 public:
  OrionPolicy(const Workload& w, const PolicyOptions& o, const ContentionModel& model) : options_(o), model_(model) {
    sm_threshold_ = o.sm_threshold;
    bool hp_training = false;
    std::int64_t be_max = 0;
    for (std::size_t i = 0; i < w.clients.size(); ++i) {
      const ClientSpec& c = w.clients[i];
      if (c.high_priority) {
        hp_training = c.training;
        hp_client_ = static_cast<int>(i);
        hp_warmup_ = c.warmup;
        // Alone, each kernel starts when launched and its predecessor is
        // done: when each would end, from the request's start.
        const double launch_us = c.launch_overhead_us >= 0 ? c.launch_overhead_us : w.launch_overhead_us;
        double launched_us = 0, end_us = 0;
        for (const SimKernel& k : c.kernels) {
          launched_us += launch_us;
          end_us = std::max(end_us, launched_us) + k.duration_us;
          hp_alone_end_us_.push_back(end_us);
          hp_kernels_.push_back({k.sm_need, k.cls});
          const bool known = std::any_of(hp_kinds_.begin(), hp_kinds_.end(), [&](const HpKernel& h) {
            return h.sm_need == k.sm_need && h.cls == k.cls;
          });
          if (!known) hp_kinds_.push_back({k.sm_need, k.cls});
        }
      }
      if (!c.high_priority) {
        for (const SimKernel& k : c.kernels) be_max = std::max(be_max, k.sm_usage);
      }
    }
    if (sm_threshold_ < 0) {
      // Orion's choice beside a training HP client: half the largest BE
      // kernel's need. Beside an inference one Orion allows the whole GPU,
      // which holds every kernel of more than one wave; the wave test
      // decides instead.
      sm_threshold_ =
          hp_training ? static_cast<int>(std::max<std::int64_t>(1, be_max / 2)) : std::numeric_limits<int>::max();
      // A training HP client with a target: search the threshold online.
      tuning_ = hp_training && o.hp_limit_ms > 0;
      high_ = static_cast<int>(be_max);
    }
  }
  void on_request_done(int client, double latency_us) override {
    if (!tuning_ || client != hp_client_) return;
    // Warm-up iterations (the first runs another profile: Orion profiles it
    // apart) say nothing about the steady state, and the bisection cannot
    // undo a step they would mislead.
    if (++seen_ <= hp_warmup_) return;
    sum_ms_ += latency_us / 1000.0;
    if (++iterations_ % std::max(1, options_.tune_every) != 0 || low_ == sm_threshold_) return;
    const double mean_ms = sum_ms_ / std::max(1, options_.tune_every);
    sum_ms_ = 0;
    // Slower than the target: fewer SMs for BE kernels; faster: more.
    if (mean_ms > options_.hp_limit_ms)
      high_ = sm_threshold_;
    else
      low_ = sm_threshold_;
    sm_threshold_ = (low_ + high_) / 2;
    ++steps_;
  }
  std::string summary() const override {
    if (!tuning_) return {};
    return "SM threshold " + std::to_string(sm_threshold_) + " after " + std::to_string(steps_) +
           " tuning step(s) against an HP iteration target of " + fmt::format("{:g}", options_.hp_limit_ms) + " ms";
  }
  std::string_view name() const override { return "orion"; }
  bool admit(const SchedulerView& v, int client, std::size_t, std::size_t, const SimKernel& k) override {
    if (client == v.hp_client) {
      note_hp_arrival(v.hp_request_arrival_us);
      return true;
    }
    // Outstanding BE work stays under DUR_THRESHOLD at all times (as in
    // Orion's scheduler), so an HP request arriving while the GPU runs BE
    // work waits for at most that much; a longer kernel goes alone.
    const double cap = options_.dur_threshold_fraction * v.hp_request_solo_us;
    if (v.be_outstanding_kernels > 0 && v.be_outstanding_us + k.duration_us > cap) return false;
    if (!v.hp_request_active) return true;
    if (k.sm_usage > sm_threshold_) return false;
    // Resident blocks are never taken back, and freed SMs go to the HP
    // stream first: beside an HP request a BE kernel keeps SMs from the HP
    // kernels for one wave of its blocks at most.
    const double cost_us = wave_cost_us(v, k);
    if (v.hp_progress_known) return cost_us <= spare_us(v);
    // How much of the request is left is not known (live): what the BE
    // waves released beside it cost, by the same estimate, is counted
    // against what it may lose, from its start (on_release); and once it
    // has run longer than it takes alone, it cannot end before now, so what
    // is left of its bound after now, less the BE work still on the GPU,
    // is the most it can still lose.
    const auto [budget_us, past_now_us] = loss_budget_us(v);
    return cost_us <= std::min(budget_us - charged_for(v), past_now_us - v.be_outstanding_us);
  }
  void on_release(const SchedulerView& v, int client, const SimKernel& k) override {
    if (client == v.hp_client || !v.hp_request_active || v.hp_progress_known) return;
    const double charged_us = charged_for(v);
    charged_us_ = charged_us + wave_cost_us(v, k);
  }

 private:
  // Each HP request's latency on a GPU of its own: its time alone after it
  // arrives or after the one before it would have ended there, whichever
  // is later (an open-loop client queues). The bound is on the latency the
  // client sees, so a request that arrives behind another may take the
  // limit times that whole wait.
  void note_hp_arrival(double arrival_us) {
    if (arrival_us < 0 || arrival_us == last_hp_arrival_us_ || hp_alone_end_us_.empty()) return;
    last_hp_arrival_us_ = arrival_us;
    hp_dedicated_end_us_ = std::max(arrival_us, hp_dedicated_end_us_) + hp_alone_end_us_.back();
  }

  // What the active HP request can still lose within its bound, and the
  // request waiting behind it if one is (whatever the active one loses,
  // that one waits longer): the limit times its latency alone (its time
  // alone where the arrival is unknown), less the time gone since it
  // arrived (started), what is left to run alone before it ends, and the
  // BE work already released (at most its solo time: it may hold SMs the
  // HP kernels need). Without a limit, an HP profile or a known start (a
  // live HP command that marks no requests), a fixed slack.
  double spare_us(const SchedulerView& v) const {
    if (!bounded(v)) return options_.dur_threshold_fraction * v.hp_request_solo_us;
    const double alone_us = hp_alone_end_us_.back();
    const std::size_t done = std::min(v.hp_kernels_done, hp_alone_end_us_.size());
    const double remaining_us = alone_us - (done == 0 ? 0.0 : hp_alone_end_us_[done - 1]);
    const double committed_us = remaining_us + v.be_outstanding_us;
    // Its bound less when it ends if nothing more is lost.
    const double spare = bound_us(v) - (v.now_us + committed_us);
    if (!arrival_known(v) || v.hp_next_arrival_us < 0) return spare;
    // The request waiting behind it ends after this one and its own time alone.
    const double next_us = v.hp_next_arrival_us, limit = options_.hp_slowdown_limit;
    const double next_dedicated_end_us = std::max(next_us, hp_dedicated_end_us_) + alone_us;
    return std::min(spare,
                    next_us + limit * (next_dedicated_end_us - next_us) - (v.now_us + committed_us + alone_us));
  }

  // Whether the co-run rule bounds the active request's latency: a limit,
  // the HP profile and the request's start known; else the fixed slack.
  bool bounded(const SchedulerView& v) const {
    return options_.hp_slowdown_limit > 0 && !hp_alone_end_us_.empty() && v.hp_request_start_us >= 0;
  }
  // Whether the active request's arrival is the one the policy last noted.
  bool arrival_known(const SchedulerView& v) const {
    return v.hp_request_arrival_us >= 0 && v.hp_request_arrival_us == last_hp_arrival_us_;
  }
  // The active request's bound: its arrival plus the limit times its
  // latency on a GPU of its own; where the arrival is not known, its start
  // plus the limit times its time alone.
  double bound_us(const SchedulerView& v) const {
    const double limit = options_.hp_slowdown_limit;
    return arrival_known(v) ? v.hp_request_arrival_us + limit * (hp_dedicated_end_us_ - v.hp_request_arrival_us)
                            : v.hp_request_start_us + limit * hp_alone_end_us_.back();
  }

  // What one wave of BE kernel k costs the active HP request (below).
  double wave_cost_us(const SchedulerView& v, const SimKernel& k) const {
    const double waves =
        std::ceil(static_cast<double>(std::max<std::int64_t>(1, k.sm_usage)) / std::max(1, v.device_sms));
    const double wave_us = k.duration_us / waves;
    return wave_us * hp_loss_per_wave(v, k, wave_us);
  }

  // What the BE waves released beside the active HP request were charged,
  // where its progress is not known; a new request starts from the BE work
  // released before it (it may hold SMs the request's kernels need).
  double charged_for(const SchedulerView& v) {
    if (v.hp_request_start_us != budget_request_start_us_) {
      budget_request_start_us_ = v.hp_request_start_us;
      charged_us_ = v.be_outstanding_us;
    }
    return charged_us_;
  }

  // What the active HP request may lose, where its progress is not known:
  // in all, its bound less when it would end alone from its start; and
  // from now, its bound less the later of now and that end. Without a
  // limit, an HP profile or a known start, the fixed slack for both.
  std::pair<double, double> loss_budget_us(const SchedulerView& v) const {
    if (!bounded(v)) {
      const double slack_us = options_.dur_threshold_fraction * v.hp_request_solo_us;
      return {slack_us, slack_us};
    }
    const double alone_end_us = v.hp_request_start_us + hp_alone_end_us_.back();
    const double bound = bound_us(v);
    return {bound - alone_end_us, bound - std::max(v.now_us, alone_end_us)};
  }

  // What one wave of BE kernel k costs the active HP request, in waves: the
  // share of its blocks on SMs that the HP kernels due within the wave need
  // (freed SMs go to the HP, so those kernels wait for the wave at most),
  // plus what the HP loses running beside it, 1 - 1/load with the load the
  // simulator's contention model gives the two. With the fixed slack (no
  // limit), without the HP's kernels or its request's start (a live HP
  // command that marks no requests), or once the request has run more
  // kernels than its profile lists (a live request longer than profiled):
  // the whole wave, twice beside an HP kernel of the same class. Where the
  // request's progress is not known, beside whichever of its kernels it
  // costs most.
  double hp_loss_per_wave(const SchedulerView& v, const SimKernel& k, double wave_us) const {
    const std::size_t first = v.hp_kernels_done;
    if (!bounded(v) || first >= hp_kernels_.size()) {
      const bool same = v.hp_current != nullptr && !v.hp_current_done && !complementary(v.hp_current->cls, k.cls);
      return same ? 2.0 : 1.0;
    }
    if (!v.hp_progress_known) {
      double worst = 0;
      for (const HpKernel& hp : hp_kinds_) worst = std::max(worst, loss_beside(v, hp, k));
      return worst;
    }
    const double from_us = first == 0 ? 0.0 : hp_alone_end_us_[first - 1];
    HpKernel hp = hp_kernels_[first];  // the largest due within the wave
    for (std::size_t j = first + 1; j < hp_kernels_.size() && hp_alone_end_us_[j - 1] < from_us + wave_us; ++j) {
      if (hp_kernels_[j].sm_need > hp.sm_need) hp = hp_kernels_[j];
    }
    return loss_beside(v, hp, k);
  }

  struct HpKernel {
    int sm_need;
    KernelClass cls;
  };
  // The loss per wave of BE kernel k beside HP kernel hp (above).
  double loss_beside(const SchedulerView& v, const HpKernel& hp, const SimKernel& k) const {
    const int sms = std::max(1, v.device_sms);
    const int units = std::clamp(k.sm_need, 1, sms);
    const double blocked = static_cast<double>(std::max(0, units + hp.sm_need - sms)) / units;
    const auto use = [&](const double(&of)[3], KernelClass cls, int n) {
      return of[static_cast<int>(cls) + 1] * n / sms;
    };
    const double load =
        std::max({1.0, use(model_.compute_use, hp.cls, hp.sm_need) + use(model_.compute_use, k.cls, units),
                  use(model_.memory_use, hp.cls, hp.sm_need) + use(model_.memory_use, k.cls, units)});
    return blocked + (1.0 - 1.0 / load);
  }

  PolicyOptions options_;
  ContentionModel model_;
  std::vector<HpKernel> hp_kernels_;  // the HP client's kernels: SMs each can use, class
  std::vector<HpKernel> hp_kinds_;    // the distinct ones among them
  double budget_request_start_us_ = -1;  // the HP request charged_us_ counts for (progress not known)
  double charged_us_ = 0;                // what the BE waves released beside it cost, by the estimate
  int sm_threshold_ = 0;
  std::vector<double> hp_alone_end_us_;  // when each HP kernel would end alone, from its request's start
  double last_hp_arrival_us_ = -1;       // the HP request last seen arriving
  double hp_dedicated_end_us_ = -std::numeric_limits<double>::infinity();  // when it would end on a GPU of its own
  // Online tuning (a bisection over [low_, high_]).
  bool tuning_ = false;
  int hp_client_ = -1;  // index of the high-priority client in the workload
  int low_ = 0, high_ = 0, steps_ = 0;
  std::int64_t hp_warmup_ = 0, seen_ = 0;  // the HP client's warm-up iterations, and those seen
  std::int64_t iterations_ = 0;            // measured ones (after the warm-up)
  double sum_ms_ = 0;
};

// Everything released at once, HP on a high-priority stream.
class StreamsPolicy : public Policy {
 public:
  std::string_view name() const override { return "streams"; }
  bool admit(const SchedulerView&, int, std::size_t, std::size_t, const SimKernel&) override { return true; }
};

// MPS-like free-for-all: everything at once, no stream priorities.
class MpsPolicy : public StreamsPolicy {
 public:
  std::string_view name() const override { return "mps"; }
  bool priority_streams() const override { return false; }
  bool limits_client_sms() const override { return true; }
};

// Temporal sharing: one request or iteration owns the GPU at a time.
class TemporalPolicy : public StreamsPolicy {
 public:
  std::string_view name() const override { return "temporal"; }
  bool exclusive_requests() const override { return true; }
};

// REEF-like: during an HP request a BE kernel runs beside the HP kernel only
// if it is no longer and needs no more SMs than that HP kernel; at most
// `queue_depth` BE kernels are released and unfinished at any time.
class ReefPolicy : public Policy {
 public:
  explicit ReefPolicy(int queue_depth) : queue_depth_(queue_depth) {}
  std::string_view name() const override { return "reef"; }
  bool preempts_best_effort() const override { return true; }
  bool admit(const SchedulerView& v, int client, std::size_t, std::size_t, const SimKernel& k) override {
    if (client == v.hp_client) return true;
    if (v.be_outstanding_kernels >= queue_depth_) return false;
    if (!v.hp_request_active) return true;
    if (v.hp_current == nullptr || v.hp_current_done) return false;
    return k.duration_us <= v.hp_current->duration_us && k.sm_usage <= v.hp_current->sm_usage;
  }

 private:
  int queue_depth_;
};

// Tick-Tock for training jobs: an iteration is a forward half then a backward
// half, and no two jobs run the same half at once, so one job's forward
// overlaps another's backward.
class TickTockPolicy : public Policy {
 public:
  std::string_view name() const override { return "tick-tock"; }
  bool admit(const SchedulerView&, int client, std::size_t index, std::size_t count, const SimKernel&) override {
    const int phase = index < count / 2 ? 0 : 1;
    if (owner_[phase] == -1) owner_[phase] = client;
    return owner_[phase] == client;
  }
  void on_complete(int client, std::size_t index, std::size_t count) override {
    const bool end_of_forward = index + 1 == count / 2;
    const bool end_of_backward = index + 1 == count;
    if (end_of_forward && owner_[0] == client) owner_[0] = -1;
    if (end_of_backward && owner_[1] == client) owner_[1] = -1;
  }

 private:
  std::array<int, 2> owner_{-1, -1};
};

}  // namespace

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = {"dedicated", "temporal",  "streams", "mps",
                                                 "reef",      "tick-tock", "orion"};
  return names;
}

std::unique_ptr<Policy> make_policy(std::string_view name, const Workload& workload, const PolicyOptions& options,
                                    const ContentionModel& model) {
  const bool has_hp = std::any_of(workload.clients.begin(), workload.clients.end(),
                                  [](const ClientSpec& c) { return c.high_priority; });
  if ((name == "orion" || name == "reef") && !has_hp) {
    throw InputError("policy '" + std::string(name) + "' protects a high-priority client; the workload has none");
  }
  if (name == "orion") return std::make_unique<OrionPolicy>(workload, options, model);
  if (name == "streams") return std::make_unique<StreamsPolicy>();
  if (name == "mps") return std::make_unique<MpsPolicy>();
  if (name == "temporal") return std::make_unique<TemporalPolicy>();
  if (name == "reef") {
    if (options.reef_queue_depth < 1) throw InputError("the REEF queue depth must be at least 1 kernel");
    return std::make_unique<ReefPolicy>(options.reef_queue_depth);
  }
  if (name == "tick-tock") {
    for (const ClientSpec& c : workload.clients) {
      if (!c.training) throw InputError("tick-tock interleaves training jobs; client '" + c.name + "' is inference");
    }
    return std::make_unique<TickTockPolicy>();
  }
  throw InputError("unknown policy '" + std::string(name) +
                   "' (orion, temporal, streams, mps, reef, tick-tock, dedicated, all)");
}

std::vector<std::string> select_policies(std::string_view spec, const Workload& workload) {
  std::vector<std::string> policies;
  if (spec == "all") {
    for (const std::string& p : policy_names()) {
      if (p == "dedicated") continue;
      try {
        make_policy(p, workload);  // skips those that do not apply (tick-tock: training only; orion, reef: need HP)
      } catch (const InputError& e) {
        spdlog::info("skipping policy {}: {}", p, e.message());
        continue;
      }
      policies.push_back(p);
    }
    return policies;
  }
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = spec.find(',', begin);
    const std::string name(
        spec.substr(begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin));
    if (name.empty()) throw InputError("--policy '" + std::string(spec) + "': an empty name in the list");
    if (name == "all" && spec != "all") throw InputError("--policy: 'all' cannot be part of a list");
    if (name != "dedicated") {
      make_policy(name, workload);  // validates the name against the workload
      if (std::find(policies.begin(), policies.end(), name) != policies.end())
        throw InputError("--policy: '" + name + "' is listed twice");
      policies.push_back(name);
    }
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return policies;
}

}  // namespace fleet::orion
