// sailor-run: Train a model with a plan from sailor-plan, elastically re-planning when GPUs come and go.
#include "common/cli.h"
#include "devices/device_info.h"

int main(int argc, char** argv) {
  fleet::Tool tool("sailor-run", "Train a model with a plan from sailor-plan, elastically re-planning when GPUs come and go.");
  tool.set_version_details(fleet::devices::version_details);
  return tool.run(argc, argv);
}
