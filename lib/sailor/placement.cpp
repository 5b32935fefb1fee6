#include "sailor/placement.h"

namespace fleet::sailor {

std::vector<StagePlacement> describe_placement(const Plan& plan) {
  std::vector<StagePlacement> out;
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const std::vector<Replica>& here = plan.stages[i].replicas;
    StagePlacement s;
    for (const Replica& r : here) ++s.replicas_per_zone[r.zone];
    if (here.size() > 1) {
      for (std::size_t r = 0; r < here.size(); ++r) {
        s.ring_links_across_zones += here[r].zone != here[(r + 1) % here.size()].zone ? 1 : 0;
      }
    }
    if (i + 1 < plan.stages.size()) {
      const std::vector<Replica>& next = plan.stages[i + 1].replicas;
      for (std::size_t r = 0; r < here.size() && r < next.size(); ++r) {
        s.pipeline_links_across_zones += here[r].zone != next[r].zone ? 1 : 0;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string zones_text(const StagePlacement& stage) {
  std::string text;
  for (const auto& [zone, n] : stage.replicas_per_zone)
    text += (text.empty() ? "" : " ") + zone + ":" + std::to_string(n);
  return text;
}

}  // namespace fleet::sailor
