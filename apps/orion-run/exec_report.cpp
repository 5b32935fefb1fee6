#include "orion-run/exec_report.h"

#include <cstdio>

#include "orion/live/live_report.h"

namespace fleet::orion::live {

int run_exec(const ExecOptions& options, bool json) {
  const ExecOutcome outcome = exec_commands(options);
  if (outcome.report) {
    if (json)
      std::printf("%s\n", outcome.report->dump(2).c_str());
    else
      std::printf("%s", report_table(*outcome.report).c_str());
  }
  return outcome.code;
}

}  // namespace fleet::orion::live
