// orion-run: Collocate a latency-critical job with best-effort jobs on one GPU under Orion's kernel scheduling.
#include "common/cli.h"
#include "devices/device_info.h"

int main(int argc, char** argv) {
  fleet::Tool tool("orion-run", "Collocate a latency-critical job with best-effort jobs on one GPU under Orion's kernel scheduling.");
  tool.set_version_details(fleet::devices::version_details);
  return tool.run(argc, argv);
}
