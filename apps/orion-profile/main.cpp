// orion-profile: Profile GPU kernels: duration, SMs needed, compute- or memory-bound.
#include "common/cli.h"
#include "devices/device_info.h"
#include "orion/commands.h"

int main(int argc, char** argv) {
  fleet::Tool tool("orion-profile", "Profile GPU kernels: duration, SMs needed, compute- or memory-bound.");
  tool.set_version_details(fleet::devices::version_details);

  fleet::orion::ImportNcuOptions import;
  CLI::App* import_ncu = tool.add_command("import-ncu", "Convert an Nsight Compute CSV export into a kernel profile",
                                          [&] { return fleet::orion::run_import_ncu(import); });
  import_ncu->add_option("input", import.input, "ncu CSV export (--page raw or --page details)")->required();
  import_ncu->add_option("--device", import.device, "GPU the kernels ran on: v100-16, a100-40, a100-80, h100, h200")
      ->capture_default_str();
  import_ncu->add_option("-o,--output", import.output, "Profile CSV to write")->required();

  fleet::orion::SummarizeOptions summary;
  CLI::App* summarize = tool.add_command("summarize", "Kernel count, total time, time per class, SM-need distribution",
                                         [&] { return fleet::orion::run_summarize(summary); });
  summarize->add_option("profile", summary.profile, "Profile CSV (ours or Orion's)")->required();
  fleet::add_json_flag(summarize, &summary.json);
  return tool.run(argc, argv);
}
