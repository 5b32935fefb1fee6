#include "model/model_folder.h"

#include <utility>

#include "common/error.h"
#include "common/file_io.h"
#include "common/json.h"

namespace fleet::model {
namespace {

std::string read_config_text(const std::filesystem::path& dir) {
  const auto file = dir / "config.json";
  if (!std::filesystem::is_regular_file(file))
    throw InputError(file.string() + ": no such file (expected a model folder with config.json)");
  return read_file(file, kMaxDocumentBytes);
}

}  // namespace

ModelFolder::ModelFolder(std::filesystem::path dir)
    : dir_(std::move(dir)),
      config_text_(read_config_text(dir_)),
      config_(parse_llama_config(parse_json(config_text_, (dir_ / "config.json").string()).root())),
      weights_path_(model_weights_path(dir_)),
      weights_(weights_path_) {}

text::Tokenizer ModelFolder::load_tokenizer() const { return text::Tokenizer::load(dir_); }

std::optional<text::ModelChatTemplate> ModelFolder::load_chat_template() const {
  return text::load_chat_template(dir_);
}

std::vector<std::int64_t> ModelFolder::end_of_sequence_ids() const { return model::end_of_sequence_ids(dir_, config_); }

}  // namespace fleet::model
