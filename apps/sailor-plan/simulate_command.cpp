#include "sailor-plan/commands.h"

#include <iostream>

#include "common/chrome_trace.h"
#include "sailor-plan/plan_report.h"

namespace fleet::sailor {

int run_simulate(const SimulateCommand& c) {
  OutputCheck check;
  with_inputs(check, c.paths, c.plan).file(c.trace.value_or(""), "--trace").check(Existing::kReplace);
  std::ostream& report = report_stream(check);
  const PlannerInputs in = load_inputs(c.paths);
  const Plan plan = load_valid_plan(c.plan, in);
  const Estimate est = estimate_plan(plan, in);
  if (c.trace) {
    ChromeTrace trace;
    trace_plan(plan, est, trace);
    trace.write(*c.trace);
  }
  if (c.json) {
    report << estimate_to_json(plan, est).dump(2) << "\n";
    return 0;
  }
  report << format_report(plan, est);
  return 0;
}

}  // namespace fleet::sailor
