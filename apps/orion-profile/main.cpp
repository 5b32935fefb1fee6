// orion-profile: Profile GPU kernels: duration, SMs needed, compute- or memory-bound.
#include "common/cli.h"
#include "devices/device_info.h"

int main(int argc, char** argv) {
  fleet::Tool tool("orion-profile", "Profile GPU kernels: duration, SMs needed, compute- or memory-bound.");
  tool.set_version_details(fleet::devices::version_details);
  return tool.run(argc, argv);
}
