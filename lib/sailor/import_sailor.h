// Conversion of the original SAILOR repository's inputs (profiles,
// llm_info.json, bandwidth fits, quotas, egress prices, GPU memory) into the
// planner's formats.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "sailor/specs.h"

namespace fleet::sailor {

/// What to convert and what the SAILOR files do not say.
struct ImportOptions {
  std::filesystem::path source;          ///< SAILOR's data folder (profiles/, providers/, configs/, llm_info.json)
  std::string model;                     ///< e.g. OPT-350
  std::map<std::string, double> prices;  ///< $ per GPU-hour; defaults: the prices the SAILOR paper used
  std::map<std::string, std::map<std::string, int>> extra_quotas;  ///< gpu -> zone -> GPUs, added to quotas.json
  int global_batch = 0;                                            ///< 0: from the model's training config
  int sequence_length = 0;
};

/// The four converted inputs.
struct ImportedInputs {
  ModelSpec model;
  ProfileSet profiles;
  ClusterSpec cluster;
  JobSpec job;
};

/// Reads SAILOR's files; InputError naming the file and field that is missing or malformed.
ImportedInputs import_sailor(const ImportOptions& options);

/// Region of a GCP-style zone name ("us-central1-a" -> "us-central1").
std::string region_of_zone(const std::string& zone);

}  // namespace fleet::sailor
