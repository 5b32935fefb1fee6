#include "sailor-plan/plan_report.h"

#include <map>

#include <fmt/format.h>

#include "common/error.h"
#include "sailor/placement.h"

namespace fleet::sailor {
namespace {

std::string gib(double bytes) { return fmt::format("{:.2f}", bytes / (1024.0 * 1024.0 * 1024.0)); }

}  // namespace

OutputCheck& with_inputs(OutputCheck& check, const InputPaths& p, const std::filesystem::path& plan) {
  const std::pair<const char*, const std::filesystem::path*> parts[] = {
      {"model", &p.model}, {"profile", &p.profile}, {"cluster", &p.cluster}, {"job", &p.job}};
  for (const auto& [name, explicit_path] : parts) {
    if (!explicit_path->empty() || !p.inputs.empty())
      check.input(p.resolve(*explicit_path, name), std::string("--") + name);
  }
  return check.input(p.inputs, "--inputs").input(plan, "--plan");
}

Plan load_valid_plan(const std::filesystem::path& path, const PlannerInputs& in) {
  Plan plan = load_plan(path, in.job);
  try {
    validate_plan(plan, in.model, in.cluster);
    for (std::size_t i = 0; i < plan.stages.size(); ++i) {
      const Stage& s = plan.stages[i];
      for (const Replica& r : s.replicas) {
        if (!in.profiles.has(r.gpu, plan.mbs, s.tp_of(r))) {
          throw InputError(fmt::format("stage {}: the profile has no entry for {} with micro-batch size {} and TP {}",
                                       i, r.gpu, plan.mbs, s.tp_of(r)));
        }
      }
    }
  } catch (const InputError& e) {
    throw InputError(e.message(), {path.string(), e.context().field, std::nullopt});
  }
  pack_nodes(plan, in.cluster);
  return plan;
}

std::string format_report(const Plan& plan, const Estimate& est) {
  std::string out;
  out += fmt::format("plan: {} stages x {} data-parallel, micro-batch {}, global batch {}, {} micro-batches, {} GPUs\n",
                     plan.stages.size(), plan.dp(), plan.mbs, plan.global_batch, est.microbatches, plan.gpus());
  out += fmt::format("{:<5} {:>9} {:>3} {:<16} {:>10} {:>9} {:>10} {:>9} {:>9} {:>9} {:>5}\n", "stage", "layers", "tp",
                     "replicas", "fwd+bwd s", "send s", "allred s", "update s", "mem GiB", "cap GiB", "fits");
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const Stage& s = plan.stages[i];
    const StageEstimate& se = est.stages[i];
    std::size_t worst = 0;
    for (std::size_t r = 0; r < se.memory.size(); ++r) {
      if (se.memory[r].total() / se.capacity[r] > se.memory[worst].total() / se.capacity[worst]) worst = r;
    }
    // Replicas by kind; a stage whose replicas differ in TP names each kind's degree.
    const bool uniform = s.uniform_tp();
    std::map<std::string, int> kinds;
    for (const Replica& r : s.replicas) ++kinds[uniform ? r.gpu : fmt::format("{}/tp{}", r.gpu, s.tp_of(r))];
    std::string replicas;
    for (const auto& [kind, n] : kinds) replicas += (replicas.empty() ? "" : "+") + std::to_string(n) + "x" + kind;
    out += fmt::format("{:<5} {:>9} {:>3} {:<16} {:>10.4f} {:>9.4f} {:>10.4f} {:>9.4f} {:>9} {:>9} {:>5}\n", i,
                       fmt::format("{}-{}", s.first_layer, s.last_layer - 1),
                       uniform ? std::to_string(s.tp) : std::string("mix"), replicas, se.compute_s, se.send_s,
                       se.allreduce_s, se.update_s, gib(se.memory[worst].total()), gib(se.capacity[worst]),
                       se.memory[worst].total() <= se.capacity[worst] ? "yes" : "NO");
  }
  // Where traffic crosses zones (slow links, billed as egress).
  const std::vector<StagePlacement> placement = describe_placement(plan);
  for (std::size_t i = 0; i < placement.size(); ++i) {
    const StagePlacement& p = placement[i];
    std::string links = fmt::format("ring {} of {} links across zones", p.ring_links_across_zones,
                                    plan.stages[i].replicas.size() > 1 ? plan.stages[i].replicas.size() : 0);
    if (i + 1 < placement.size()) {
      links += fmt::format(", to stage {}: {} of {} across zones", i + 1, p.pipeline_links_across_zones,
                           plan.stages[i].replicas.size());
    }
    out += fmt::format("stage {} zones: {} ({})\n", i, zones_text(p), links);
  }
  out += fmt::format("iteration: {:.4f} s ({:.3f} iterations/s, {:.1f} samples/s)\n", est.iteration_s,
                     est.iterations_per_s, est.iterations_per_s * plan.global_batch);
  out += fmt::format("cost: ${:.5f} per iteration (compute ${:.5f}, egress ${:.5f})\n", est.usd_per_iteration(),
                     est.compute_usd, est.egress_usd);
  if (est.energy_known) {
    out +=
        fmt::format("energy: {:.1f} kJ per iteration ({:.0f} W on average over {} GPUs, busy {:.0f} % of the time)\n",
                    est.energy_j / 1e3, est.energy_j / est.iteration_s, plan.gpus(),
                    100 * est.busy_gpu_s / (est.iteration_s * plan.gpus()));
  } else {
    out += "energy: unknown (cluster.json gives no idle_watts / busy_watts for a GPU type of the plan)\n";
  }
  out += fmt::format("memory: peak {} GiB per GPU; {}\n", gib(est.peak_memory_bytes),
                     est.fits ? "every GPU fits" : "SOME GPUs DO NOT FIT");
  return out;
}

}  // namespace fleet::sailor
