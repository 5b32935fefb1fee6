// dz-compress: Compress a fine-tuned model as a sparse, low-bit delta from its base model, and reconstruct it.
#include "common/cli.h"
#include "devices/device_info.h"

int main(int argc, char** argv) {
  fleet::Tool tool("dz-compress", "Compress a fine-tuned model as a sparse, low-bit delta from its base model, and reconstruct it.");
  tool.set_version_details(fleet::devices::version_details);
  return tool.run(argc, argv);
}
