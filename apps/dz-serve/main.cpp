// dz-serve: Serve many compressed fine-tunes of one base model at once over an OpenAI-compatible HTTP API.
#include "common/cli.h"
#include "devices/device_info.h"

int main(int argc, char** argv) {
  fleet::Tool tool("dz-serve", "Serve many compressed fine-tunes of one base model at once over an OpenAI-compatible HTTP API.");
  tool.set_version_details(fleet::devices::version_details);
  return tool.run(argc, argv);
}
