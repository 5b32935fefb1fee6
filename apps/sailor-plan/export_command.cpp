#include "sailor-plan/commands.h"

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/json.h"
#include "sailor-plan/plan_report.h"

namespace fleet::sailor {

int run_export(const ExportCommand& c) {
  OutputCheck check;
  with_inputs(check, c.paths, c.plan).file(c.output, "--output").check(Existing::kReplace);
  if (c.format != "sailor" && c.format != "gpufleet")
    throw UsageError("unknown --format '" + c.format + "' (sailor or gpufleet)");
  const PlannerInputs in = load_inputs(c.paths);
  const Plan plan = load_valid_plan(c.plan, in);
  if (c.format == "sailor") {
    write_json_file(c.output, plan_to_sailor_json(plan, in.cluster));
  } else if (c.format == "gpufleet") {
    nlohmann::json out = plan_to_json(plan);
    out["predictions"] = estimate_to_json(plan, estimate_plan(plan, in));
    write_json_file(c.output, out);
  } else {
    throw UsageError("unknown --format '" + c.format + "' (sailor or gpufleet)");
  }
  return 0;
}

}  // namespace fleet::sailor
