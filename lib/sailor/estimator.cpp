#include "sailor/estimator.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "sailor/pipeline_schedule.h"
#include "sailor/placement.h"

namespace fleet::sailor {

Calibration default_calibration() {
  // `sailor-plan calibrate -i examples/sailor/opt-350 --runs
  // examples/sailor/opt-350/measured_runs.json`: least squares (relative
  // error) over the eight GH200 runs; leave-one-out errors in docs/sailor-model.md.
  Calibration c;
  c.microbatch_overhead_s = 0.00063;
  c.activation_bytes_per_float = 4.49;
  c.runtime_overhead_bytes = 4.99e9;
  return c;
}

namespace {

LinkClass link_of(const Replica& a, const Replica& b, const ClusterSpec& cluster) {
  if (a.zone == b.zone) {
    return a.gpu == b.gpu && a.node >= 0 && a.node == b.node ? LinkClass::kSameNode : LinkClass::kSameZone;
  }
  return cluster.link_between(a.zone, b.zone);
}

// Remembers the last link's fit: replicas of a plan mostly repeat the same
// (class, GPU pair), and the lookups by name dominate otherwise.
class FitCache {
 public:
  explicit FitCache(const ClusterSpec& cluster) : cluster_(cluster) {}
  const BandwidthFit& get(LinkClass link, const std::string& src, const std::string& dst) {
    if (fit_ == nullptr || link != link_ || src != *src_ || dst != *dst_) {
      fit_ = &cluster_.fit(link, src, dst);
      link_ = link;
      src_ = &src;
      dst_ = &dst;
    }
    return *fit_;
  }

  /// Bytes per second of a `bytes` message on that link; the last answer is
  /// kept too (every replica pair of a stage sends the same message).
  double bytes_per_s(LinkClass link, const std::string& src, const std::string& dst, double bytes) {
    const BandwidthFit& fit = get(link, src, dst);
    if (&fit != rate_fit_ || bytes != rate_bytes_) {
      rate_fit_ = &fit;
      rate_bytes_ = bytes;
      rate_ = fit.bytes_per_s(bytes);
    }
    return rate_;
  }

 private:
  const ClusterSpec& cluster_;
  const BandwidthFit* rate_fit_ = nullptr;
  double rate_bytes_ = -1, rate_ = 0;
  const BandwidthFit* fit_ = nullptr;
  LinkClass link_ = LinkClass::kSameNode;
  const std::string* src_ = nullptr;
  const std::string* dst_ = nullptr;
};

// Same idea for GPU types by name.
class GpuTypeCache {
 public:
  explicit GpuTypeCache(const ClusterSpec& cluster) : cluster_(cluster) {}
  const GpuType& get(const std::string& gpu) {
    if (type_ == nullptr || gpu != *name_) {
      type_ = &cluster_.gpu_types.at(gpu);
      name_ = &gpu;
    }
    return *type_;
  }

 private:
  const ClusterSpec& cluster_;
  const GpuType* type_ = nullptr;
  const std::string* name_ = nullptr;
};

double egress_price(LinkClass link, const ClusterSpec& cluster) {
  auto it = cluster.egress_per_gb.find(link);
  return it == cluster.egress_per_gb.end() ? 0.0 : it->second;
}

}  // namespace

namespace {

// Replicas of one GPU type and TP degree share their layer sums: each kind
// is computed once per stage.
struct ReplicaKind {
  const std::string* gpu;
  int tp;
  LayerTimes sum;
};

// One plan's estimate, stage by stage: compute, sends, the gradient
// all-reduce, busy time for energy, memory; then the 1F1B iteration and
// its price.
class PlanEstimator {
 public:
  PlanEstimator(const Plan& plan, const PlannerInputs& in)
      : plan_(plan),
        in_(in),
        cal_(in.calibration),
        stages_(static_cast<int>(plan.stages.size())),
        dp_(plan.dp()),
        mbs_(plan.mbs),
        wire_(in.job.wire_bytes()),
        fits_(in.cluster),
        types_(in.cluster) {
    est_.blocking_transfers = in.job.runtime == TrainingRuntime::kDeepSpeed;
    est_.microbatches = static_cast<int>(std::ceil(static_cast<double>(plan.global_batch) / (mbs_ * dp_)));
    nb_ = est_.microbatches;
  }

  Estimate run() {
    for (int i = 0; i < stages_; ++i) {
      const Stage& s = plan_.stages[static_cast<std::size_t>(i)];
      StageEstimate se;
      se.overhead_s = cal_.microbatch_overhead_s;
      int min_tp = s.replicas.empty() ? s.tp : s.tp_of(s.replicas.front());
      const auto kinds = replica_kinds(s, min_tp);
      compute(kinds, se);
      if (i + 1 < stages_) sends(s, plan_.stages[static_cast<std::size_t>(i + 1)], se);
      const double params = in_.model.params(s.first_layer, s.last_layer, s.tp);
      if (dp_ > 1) allreduce(s, min_tp, params, se);
      busy_time(s, kinds, se);
      memory(i, s, params, se);
      est_.stages.push_back(std::move(se));
    }
    iteration();
    return est_;
  }

 private:
  std::vector<ReplicaKind> replica_kinds(const Stage& s, int& min_tp) const {
    std::vector<ReplicaKind> kinds;
    for (const Replica& r : s.replicas) {
      const int tp = s.tp_of(r);
      min_tp = std::min(min_tp, tp);
      auto known =
          std::find_if(kinds.begin(), kinds.end(), [&](const ReplicaKind& k) { return k.tp == tp && *k.gpu == r.gpu; });
      if (known != kinds.end()) continue;
      LayerTimes sum{0, 0, 0};
      for (int l = s.first_layer; l < s.last_layer; ++l) {
        const LayerTimes& t = in_.profiles.at(r.gpu, mbs_, tp, l);
        sum[0] += t[0];
        sum[1] += t[1];
        sum[2] += t[2];
      }
      kinds.push_back({&r.gpu, tp, sum});
    }
    return kinds;
  }

  // The slowest kind's forward + backward paces the stage.
  static void compute(const std::vector<ReplicaKind>& kinds, StageEstimate& se) {
    for (const auto& [gpu, tp, t] : kinds) {
      const double f = t[0], b = t[1], u = t[2];
      if (f + b > se.compute_s) {
        se.compute_s = f + b;
        se.forward_s = f;
        se.backward_s = b;
      }
      se.update_s = std::max(se.update_s, u);
    }
  }

  // Activations to the next stage and gradients back, replica r to replica r.
  void sends(const Stage& s, const Stage& next, StageEstimate& se) {
    for (int r = 0; r < dp_; ++r) {
      const Replica& a = s.replicas[static_cast<std::size_t>(r)];
      const Replica& b = next.replicas[static_cast<std::size_t>(r)];
      const double message = in_.model.act_output(s.last_layer - 1, s.tp_of(a)) * mbs_ * wire_;
      const LinkClass link = link_of(a, b, in_.cluster);
      const double one_way = message / fits_.bytes_per_s(link, a.gpu, b.gpu, message);
      se.send_s = std::max(se.send_s, 2 * one_way);
      if (link == LinkClass::kCrossZone || link == LinkClass::kCrossRegion) {
        egress_bytes_usd_ += 2 * message * nb_ / 1e9 * egress_price(link, in_.cluster);
      }
    }
  }

  // Ring all-reduce of this stage's gradients across its replicas. When
  // their TP degrees differ, the replica with the fewest TP ranks holds the
  // largest shard per GPU and paces the ring.
  void allreduce(const Stage& s, int min_tp, double params, StageEstimate& se) {
    const double grad_bytes = (min_tp == s.tp ? params : in_.model.params(s.first_layer, s.last_layer, min_tp)) * wire_;
    const double per_link = 2.0 * (dp_ - 1) / dp_ * grad_bytes;
    double slowest = 0;
    const BandwidthFit* last_fit = nullptr;
    for (int r = 0; r < dp_; ++r) {
      const Replica& a = s.replicas[static_cast<std::size_t>(r)];
      const Replica& b = s.replicas[static_cast<std::size_t>((r + 1) % dp_)];
      const LinkClass link = link_of(a, b, in_.cluster);
      const BandwidthFit& fit = fits_.get(link, a.gpu, b.gpu);
      if (&fit == last_fit) continue;  // same link kind as the previous pair: same time, and egress only across zones
      last_fit = link == LinkClass::kSameZone || link == LinkClass::kSameNode ? &fit : nullptr;
      const double bw = fits_.bytes_per_s(link, a.gpu, b.gpu, std::min(cal_.allreduce_bucket_bytes, grad_bytes));
      slowest = std::max(slowest, per_link / bw);
      if (link == LinkClass::kCrossZone || link == LinkClass::kCrossRegion) {
        egress_bytes_usd_ += per_link * s.tp_of(a) / 1e9 * egress_price(link, in_.cluster);
      }
    }
    se.allreduce_s = slowest;
    // sailor-run reduces buckets while the last micro-batch's backward runs;
    // DeepSpeed's pipeline engine puts the whole all-reduce on the critical path.
    se.allreduce_exposed_s =
        in_.job.runtime == TrainingRuntime::kSailorRun ? std::max(0.0, slowest - se.backward_s) : slowest;
  }

  // Busy time of each GPU of the stage, for energy: every micro-batch's
  // forward and backward on its own kind, the part of the all-reduce that is
  // not under the last backward (that part is already counted busy), and the
  // optimizer step. Sends and the pipeline's bubbles are idle.
  void busy_time(const Stage& s, const std::vector<ReplicaKind>& kinds, const StageEstimate& se) {
    for (const Replica& r : s.replicas) {
      const int tp = s.tp_of(r);
      const auto kind =
          std::find_if(kinds.begin(), kinds.end(), [&](const ReplicaKind& k) { return k.tp == tp && *k.gpu == r.gpu; });
      const double busy = nb_ * (kind->sum[0] + kind->sum[1]) + kind->sum[2] + se.allreduce_exposed_s;
      const GpuPower& power = types_.get(r.gpu).power;
      energy_known_ = energy_known_ && power.known();
      busy_gpu_s_ += tp * busy;
      idle_watts_ += tp * power.idle_watts;
      busy_joules_above_idle_ += tp * busy * (power.busy_watts - power.idle_watts);
    }
  }

  // Memory of one GPU: states of its parameter shard, activations of the
  // micro-batches 1F1B keeps in flight on this stage, runtime overhead.
  void memory(int i, const Stage& s, double params, StageEstimate& se) {
    const bool fp32 = in_.job.precision == "fp32";
    const double weight_b = fp32 ? 4 : cal_.weight_bytes_per_param;
    const double grad_b = fp32 ? 4 : cal_.gradient_bytes_per_param;
    se.in_flight = std::min(stages_ - i, nb_);
    const double act =
        in_.model.act_memory(s.first_layer, s.last_layer, s.tp) * mbs_ * se.in_flight * cal_.activation_bytes_per_float;
    for (const Replica& r : s.replicas) {
      const int tp = s.tp_of(r);
      const double own_params = tp == s.tp ? params : in_.model.params(s.first_layer, s.last_layer, tp);
      MemoryBreakdown m;
      m.weights = own_params * weight_b;
      m.gradients = own_params * grad_b;
      m.optimizer = own_params * cal_.optimizer_bytes_per_param;
      m.activations = tp == s.tp ? act
                                 : in_.model.act_memory(s.first_layer, s.last_layer, tp) * mbs_ * se.in_flight *
                                       cal_.activation_bytes_per_float;
      m.overhead = cal_.runtime_overhead_bytes;
      const double capacity = types_.get(r.gpu).memory_bytes;
      est_.fits = est_.fits && m.total() <= capacity;
      est_.peak_memory_bytes = std::max(est_.peak_memory_bytes, m.total());
      se.memory.push_back(m);
      se.capacity.push_back(capacity);
    }
  }

  // 1F1B: the slowest stage (compute, its sends and the runtime's work per
  // micro-batch) paces the steady state; fill and drain add one pass
  // through every stage; the exposed all-reduce and the optimizer step
  // follow. With blocking transfers (DeepSpeed) a stage also waits out the
  // ones on the link to its predecessor: activations in, gradients out.
  void iteration() {
    double bottleneck = 0, sum = 0, exposed = 0, update = 0;
    for (std::size_t i = 0; i < est_.stages.size(); ++i) {
      const StageEstimate& se = est_.stages[i];
      const double inbound = est_.blocking_transfers && i > 0 ? est_.stages[i - 1].send_s : 0.0;
      const double slot = se.compute_s + se.send_s + inbound + se.overhead_s;
      bottleneck = std::max(bottleneck, slot);
      sum += slot;
      exposed = std::max(exposed, se.allreduce_exposed_s);
      update = std::max(update, se.update_s);
    }
    est_.iteration_s = (nb_ - 1) * bottleneck + sum + exposed + update;
    est_.iterations_per_s = 1.0 / est_.iteration_s;
    for (const Stage& s : plan_.stages) {
      for (const Replica& r : s.replicas) {
        est_.compute_usd += s.tp_of(r) * types_.get(r.gpu).price_per_hour / 3600.0 * est_.iteration_s;
      }
    }
    est_.egress_usd = egress_bytes_usd_;
    est_.busy_gpu_s = busy_gpu_s_;
    est_.energy_known = energy_known_;
    est_.energy_j = energy_known_ ? idle_watts_ * est_.iteration_s + busy_joules_above_idle_ : 0.0;
  }

  const Plan& plan_;
  const PlannerInputs& in_;
  const Calibration& cal_;
  const int stages_, dp_, mbs_;
  const double wire_;
  FitCache fits_;
  GpuTypeCache types_;
  Estimate est_;
  int nb_ = 0;
  double egress_bytes_usd_ = 0;
  bool energy_known_ = true;
  double busy_gpu_s_ = 0, idle_watts_ = 0, busy_joules_above_idle_ = 0;
};

}  // namespace

Estimate estimate_plan(const Plan& plan, const PlannerInputs& in) { return PlanEstimator(plan, in).run(); }

namespace {

// The spans of one simulated 1F1B iteration, per stage: each stage takes
// its next operation as soon as its input exists, as the estimate assumes.
class IterationTrace {
 public:
  struct Span {
    int stage;
    std::string name, cat;
    double start, dur;  ///< microseconds
  };

  explicit IterationTrace(const Estimate& est)
      : est_(est),
        stages_(static_cast<int>(est.stages.size())),
        f_end_(static_cast<std::size_t>(stages_), std::vector<double>(static_cast<std::size_t>(est.microbatches), -1)),
        b_end_(f_end_),
        next_(static_cast<std::size_t>(stages_), 0),
        free_at_(static_cast<std::size_t>(stages_), 0) {
    for (int i = 0; i < stages_; ++i) order_.push_back(one_f_one_b(i, stages_, est.microbatches));
    for (bool progress = true; progress;) {
      progress = false;
      for (int i = 0; i < stages_; ++i) progress = place_next(i) || progress;
    }
    add_all_reduce_and_update();
  }
  const std::vector<Span>& spans() const { return spans_; }

 private:
  static constexpr double kUs = 1e6;

  // Places stage i's next operation if its input is there; false otherwise.
  bool place_next(int i) {
    const auto si = static_cast<std::size_t>(i);
    if (next_[si] >= order_[si].size()) return false;
    const PipelineOp op = order_[si][next_[si]];
    const bool forward = op.kind == PipelineOp::Kind::kForward;
    const StageEstimate& se = est_.stages[si];
    const std::string micro = std::to_string(op.micro);
    const bool has_input = forward ? i > 0 : i + 1 < stages_;
    const double dep = has_input ? (forward ? f_end_[si - 1] : b_end_[si + 1])[static_cast<std::size_t>(op.micro)] : 0;
    if (dep < 0) return false;  // its input is not computed yet
    // The runtime's work for this micro-batch (half before its forward, half before its backward).
    const double overhead = se.overhead_s / 2 * kUs;
    double ready = free_at_[si];
    if (overhead > 0) spans_.push_back({i, "runtime " + micro, "overhead", ready, overhead});
    ready += overhead;
    // With blocking transfers a stage receives its input itself: from when
    // both it and the sender are ready until the transfer ends.
    const double in_us = forward ? (i > 0 ? est_.stages[si - 1].send_s / 2 * kUs : 0) : se.send_s / 2 * kUs;
    if (has_input) {
      if (est_.blocking_transfers && in_us > 0) {
        const double start = std::max(ready, dep);
        spans_.push_back({i, (forward ? "recv act " : "recv grad ") + micro, "send", start, in_us});
        ready = start + in_us;
      } else {
        ready = std::max(ready, dep + in_us);
      }
    }
    const double dur = (forward ? se.forward_s : se.backward_s) * kUs;
    (forward ? f_end_ : b_end_)[si][static_cast<std::size_t>(op.micro)] = ready + dur;
    spans_.push_back({i, (forward ? "F" : "B") + micro, forward ? "forward" : "backward", ready, dur});
    double end = ready + dur;
    const double out_us =
        forward ? (i + 1 < stages_ ? se.send_s / 2 * kUs : 0) : (i > 0 ? est_.stages[si - 1].send_s / 2 * kUs : 0);
    if (out_us > 0) {
      spans_.push_back({i, (forward ? "send act " : "send grad ") + micro, "send", end, out_us});
      if (est_.blocking_transfers) end += out_us;  // the sender waits for the transfer too
    }
    free_at_[si] = end;
    ++next_[si];
    return true;
  }

  void add_all_reduce_and_update() {
    for (int i = 0; i < stages_; ++i) {
      const auto si = static_cast<std::size_t>(i);
      const StageEstimate& se = est_.stages[si];
      const double end = free_at_[si];
      if (se.allreduce_s > 0)
        spans_.push_back(
            {i, "all-reduce", "allreduce", std::max(0.0, end - se.backward_s * kUs), se.allreduce_s * kUs});
      spans_.push_back({i, "optimizer step", "update", end + se.allreduce_exposed_s * kUs, se.update_s * kUs});
    }
  }

  const Estimate& est_;
  int stages_;
  std::vector<std::vector<PipelineOp>> order_;
  std::vector<std::vector<double>> f_end_, b_end_;  ///< when each micro-batch's forward/backward ends (-1: not yet)
  std::vector<std::size_t> next_;
  std::vector<double> free_at_;
  std::vector<Span> spans_;
};

}  // namespace

void trace_plan(const Plan& plan, const Estimate& est, ChromeTrace& trace) {
  trace.set_process_name(1, "one training iteration (simulated, 1F1B)");
  const IterationTrace iteration(est);
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const Stage& s = plan.stages[i];
    for (std::size_t r = 0; r < s.replicas.size(); ++r) {
      const int tid = static_cast<int>(i) * 1000 + static_cast<int>(r);
      trace.set_thread_name(1, tid,
                            "stage " + std::to_string(i) + " replica " + std::to_string(r) + " (" + s.replicas[r].gpu +
                                " x" + std::to_string(s.tp_of(s.replicas[r])) + ", " + s.replicas[r].zone + ")",
                            tid);
      for (const auto& sp : iteration.spans())
        if (sp.stage == static_cast<int>(i)) trace.add_complete(1, tid, sp.name, sp.cat, sp.start, sp.dur);
    }
  }
}

nlohmann::json estimate_to_json(const Plan& plan, const Estimate& est) {
  nlohmann::json stages = nlohmann::json::array();
  const std::vector<StagePlacement> placement = describe_placement(plan);
  for (std::size_t i = 0; i < est.stages.size(); ++i) {
    const StageEstimate& se = est.stages[i];
    nlohmann::json memory = nlohmann::json::array();
    for (std::size_t r = 0; r < se.memory.size(); ++r) {
      const MemoryBreakdown& m = se.memory[r];
      memory.push_back({{"gpu", plan.stages[i].replicas[r].gpu},
                        {"weights_bytes", m.weights},
                        {"gradients_bytes", m.gradients},
                        {"optimizer_bytes", m.optimizer},
                        {"activations_bytes", m.activations},
                        {"overhead_bytes", m.overhead},
                        {"total_bytes", m.total()},
                        {"capacity_bytes", se.capacity[r]},
                        {"fits", m.total() <= se.capacity[r]}});
    }
    const StagePlacement& where = placement[i];
    stages.push_back({{"zones", where.replicas_per_zone},
                      {"ring_links_across_zones", where.ring_links_across_zones},
                      {"pipeline_links_across_zones", where.pipeline_links_across_zones},
                      {"compute_s", se.compute_s},
                      {"forward_s", se.forward_s},
                      {"backward_s", se.backward_s},
                      {"send_s", se.send_s},
                      {"update_s", se.update_s},
                      {"allreduce_s", se.allreduce_s},
                      {"allreduce_exposed_s", se.allreduce_exposed_s},
                      {"in_flight_microbatches", se.in_flight},
                      {"memory", memory}});
  }
  return {{"iteration_s", est.iteration_s},
          {"iterations_per_s", est.iterations_per_s},
          {"microbatches", est.microbatches},
          {"usd_per_iteration", est.usd_per_iteration()},
          {"compute_usd_per_iteration", est.compute_usd},
          {"egress_usd_per_iteration", est.egress_usd},
          {"peak_memory_bytes", est.peak_memory_bytes},
          {"fits", est.fits},
          {"gpus", plan.gpus()},
          {"busy_gpu_s", est.busy_gpu_s},
          {"energy_j_per_iteration", est.energy_known ? nlohmann::json(est.energy_j) : nlohmann::json(nullptr)},
          {"stages", stages}};
}

}  // namespace fleet::sailor
