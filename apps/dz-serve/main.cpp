// dz-serve: the serving program; no subcommands in this build yet (help and version only).
#include "common/cli.h"
#include "devices/device_info.h"

int main(int argc, char** argv) {
  fleet::Tool tool("dz-serve",
                   "Not in this build yet: serving many compressed fine-tunes of one base model at once over an "
                   "OpenAI-compatible HTTP API. It has no subcommands; today it answers --help and --version only.");
  tool.set_version_details(fleet::devices::version_details);
  return tool.run(argc, argv);
}
