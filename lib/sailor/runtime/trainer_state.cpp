#include "sailor/runtime/trainer_state.h"

#include "common/atomic_file.h"

namespace fleet::sailor::runtime {

std::filesystem::path trainer_state_path(const std::filesystem::path& folder) { return folder / kTrainerStateFile; }

bool has_trainer_state(const std::filesystem::path& folder) {
  std::error_code ec;  // a name too long to examine counts as none; the output checks report it
  return std::filesystem::exists(trainer_state_path(folder), ec);
}

JsonDocument read_trainer_state(const std::filesystem::path& folder) {
  JsonDocument doc = load_json_file(trainer_state_path(folder));
  const JsonValue state = doc.root();
  if (state.get<std::string>("format") != kTrainerStateFormat) state.at("format").fail("not a trainer state");
  if (state.get<int>("version") != kTrainerStateVersion) state.at("version").fail("unsupported version");
  return doc;
}

std::int64_t trainer_state_step(const std::filesystem::path& folder) {
  if (!has_trainer_state(folder)) return -1;
  return read_trainer_state(folder).root().get<std::int64_t>("step");
}

nlohmann::json make_trainer_state(std::int64_t step, nlohmann::json fields) {
  nlohmann::json state = {{"format", kTrainerStateFormat}, {"version", kTrainerStateVersion}, {"step", step}};
  for (auto& [key, value] : fields.items()) state[key] = std::move(value);
  return state;
}

void write_trainer_state(const std::filesystem::path& folder, const nlohmann::json& state) {
  write_file_atomically(trainer_state_path(folder), state.dump(2) + "\n");
}

}  // namespace fleet::sailor::runtime
