// Where a plan's traffic crosses zones: what a user reads to see which
// links are slow and billed (docs/sailor-model.md, "Placement").
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sailor/plan.h"

namespace fleet::sailor {

/// One stage's replicas by zone and the links of its traffic between zones.
struct StagePlacement {
  std::map<std::string, int> replicas_per_zone;
  int ring_links_across_zones = 0;      ///< links of its gradient ring (replica r to r + 1) whose ends differ in zone
  int pipeline_links_across_zones = 0;  ///< replica r here to replica r of the next stage, ends in different zones
};

/// Per stage, in order.
std::vector<StagePlacement> describe_placement(const Plan& plan);

/// "a:32 b:32" style text of one stage's zones.
std::string zones_text(const StagePlacement& stage);

}  // namespace fleet::sailor
