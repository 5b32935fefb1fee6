// Chat templates as Hugging Face models ship them: the Jinja2 template in
// tokenizer_config.json ("chat_template"), rendered the way transformers'
// apply_chat_template renders it (trim_blocks, lstrip_blocks, the messages,
// add_generation_prompt, bos_token and eos_token). A Jinja subset
// interpreter: text, {{ }}, {% if/elif/else %}, {% for %} with loop.*,
// {% set %} (namespace attributes too), whitespace control, literals,
// arithmetic, comparisons, `in`, `is` tests, inline if, slicing, string
// methods, the common filters, raise_exception. No libtorch.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fleet::text {

class ChatTemplate {
 public:
  /// Parses a template; InputError naming `source` and the offending tag for
  /// malformed or unsupported syntax.
  static ChatTemplate parse(std::string_view text, const std::string& source);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  /// Renders with `variables` (an object: messages, add_generation_prompt,
  /// bos_token, ...). InputError for what the template itself refuses
  /// (raise_exception) or a type error while rendering.
  std::string render(const nlohmann::json& variables) const;

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// A model folder's chat template with the special-token strings it uses.
struct ModelChatTemplate {
  ChatTemplate chat_template;
  std::string bos_token, eos_token;
};

/// The template of `model_dir`/tokenizer_config.json (a string, or the
/// "default" entry of a list of named templates); nullopt when the folder
/// has no tokenizer_config.json or it has no chat template.
std::optional<ModelChatTemplate> load_chat_template(const std::filesystem::path& model_dir);

}  // namespace fleet::text
