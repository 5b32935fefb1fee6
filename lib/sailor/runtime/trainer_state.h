// trainer_state.json, the record of a training run in its output folder
// (format in docs/formats.md): what `train` resumes from, what a checkpoint
// commits last, what the elastic controller reads to know how far a job
// got. The one owner of its name, format and version. No libtorch.
#pragma once

#include <cstdint>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/json.h"

namespace fleet::sailor::runtime {

inline constexpr const char* kTrainerStateFile = "trainer_state.json";
inline constexpr const char* kTrainerStateFormat = "gpufleet-trainer-state";
inline constexpr int kTrainerStateVersion = 1;

/// The folder's trainer_state.json path.
std::filesystem::path trainer_state_path(const std::filesystem::path& folder);
/// Whether `folder` holds a training run's state.
bool has_trainer_state(const std::filesystem::path& folder);
/// The state of `folder`, its format and version checked; InputError naming
/// the file and field otherwise.
JsonDocument read_trainer_state(const std::filesystem::path& folder);
/// The step `folder`'s state records; -1 when it holds none.
std::int64_t trainer_state_step(const std::filesystem::path& folder);
/// A state object: format, version and step, then `fields` (options,
/// data, history, ...), as a checkpoint writes it.
nlohmann::json make_trainer_state(std::int64_t step, nlohmann::json fields);
/// Writes `state` as `folder`'s trainer_state.json, atomically.
void write_trainer_state(const std::filesystem::path& folder, const nlohmann::json& state);

}  // namespace fleet::sailor::runtime
