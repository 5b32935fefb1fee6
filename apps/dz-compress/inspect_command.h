// `dz-compress inspect`: sizes, bits per weight, ratios, settings and base
// identity of a delta container, as a table or JSON.
#pragma once

#include <filesystem>

namespace fleet::deltazip {

struct InspectCommand {
  std::filesystem::path delta;
  bool json = false;
};
int run_inspect(const InspectCommand& command);

}  // namespace fleet::deltazip
