// orion-profile: Profile GPU kernels: duration, SMs needed, compute- or memory-bound.
#include "cli/cli.h"
#include "devices/device_info.h"
#include "orion-profile/profile_commands.h"
#include "orion/live/capture_command.h"

int main(int argc, char** argv) {
  fleet::Tool tool("orion-profile", "Profile GPU kernels: duration, SMs needed, compute- or memory-bound.");
  tool.set_version_details(fleet::devices::version_details);

  fleet::orion::ImportNcuOptions import;
  CLI::App* import_ncu = tool.add_command("import-ncu", "Convert an Nsight Compute CSV export into a kernel profile",
                                          [&] { return fleet::orion::run_import_ncu(import); });
  import_ncu->add_option("input", import.input, "ncu CSV export (--page raw or --page details)")->required();
  import_ncu->add_option("--device", import.device, "GPU the kernels ran on: v100-16, a100-40, a100-80, h100, h200")
      ->capture_default_str();
  import_ncu->add_option("-o,--output", import.output, "Profile CSV to write")
      ->transform(fleet::output_path())
      ->required();

  fleet::orion::SummarizeOptions summary;
  CLI::App* summarize = tool.add_command("summarize", "Kernel count, total time, time per class, SM-need distribution",
                                         [&] { return fleet::orion::run_summarize(summary); });
  summarize->add_option("profile", summary.profile, "Profile CSV (ours or Orion's)")->required();
  fleet::add_json_flag(summarize, &summary.json);

  fleet::orion::live::CaptureCommandOptions cap;
  std::string from_records, keep_records, ncu;
  CLI::App* capture =
      tool.add_command("capture", "Run a CUDA program under CUPTI and write the kernel profile of one iteration", [&] {
        if (!from_records.empty()) cap.from_records = from_records;
        if (!keep_records.empty()) cap.keep_records = keep_records;
        if (!ncu.empty()) cap.conversion.ncu = ncu;
        return fleet::orion::live::run_capture(cap);
      });
  capture->add_option("-o,--output", cap.output, "Profile CSV to write")->transform(fleet::output_path())->required();
  capture->add_option("--device", cap.conversion.device, "GPU for occupancy: auto (from CUPTI), or a known name")
      ->capture_default_str();
  capture->add_option("--ncu", ncu, "ncu CSV export of the same program: compute/memory class by kernel name");
  capture
      ->add_option("--skip", cap.conversion.skip,
                   "Marked iterations to leave out at the start (warm-up; default 1 when there are several)")
      ->check(fleet::in_range(0, 1e6));
  capture->add_option("--from-records", from_records, "Convert a records file from an earlier capture instead");
  capture->add_option("--keep-records", keep_records, "Also keep the raw kernel records (JSON lines) here");
  capture->add_option("command", cap.command, "Program and its arguments, after --");
  return tool.run(argc, argv);
}
