// sailor-plan: Plan distributed training on heterogeneous, multi-zone GPU pools: simulate a plan's time, memory and cost, and search for the best one.
#include "common/cli.h"
#include "devices/device_info.h"

int main(int argc, char** argv) {
  fleet::Tool tool("sailor-plan", "Plan distributed training on heterogeneous, multi-zone GPU pools: simulate a plan's time, memory and cost, and search for the best one.");
  tool.set_version_details(fleet::devices::version_details);
  return tool.run(argc, argv);
}
