// Chat templates: what a model folder declares is found, and templates our
// Jinja subset cannot run are refused at load with the tag named (the
// renderings themselves are compared with jinja2 by check_chat_templates.py).
#include <gtest/gtest.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "test_util.h"
#include "text/chat_template.h"

namespace fleet::text {
namespace {

using fleet::testing::TempDir;

std::string render(const std::string& text, const nlohmann::json& vars = nlohmann::json::object()) {
  return ChatTemplate::parse(text, "t").render(vars);
}

TEST(ChatTemplate, RendersMessagesWithLoopAndWhitespaceControl) {
  nlohmann::json vars = {
      {"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "yo"}}}},
      {"add_generation_prompt", true}};
  EXPECT_EQ(render("{% for m in messages %}\n  {{- m.role }}={{ m['content'] }}{% if not loop.last %};{% endif %}\n"
                   "{% endfor %}\n{% if add_generation_prompt %}>{% endif %}",
                   vars),
            "user=hi;assistant=yo>");
}

TEST(ChatTemplate, RefusesWhatItCannotRun) {
  for (const char* bad : {"{{ x", "{% if x %}no end", "{% for x in y %}", "{% macro m() %}{% endmacro %}", "{{ 'a }}",
                          "{{ x | frobnicate }}", "{{ 1 + }}", "{% set %}", "{% else %}"}) {
    try {
      render(bad, {{"x", 1}, {"y", {1}}});
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("t:"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(render("{{ raise_exception('no system role') }}"), InputError);
}

TEST(ChatTemplate, LoadsTheModelFoldersTemplateAndSpecialTokens) {
  TempDir dir;
  EXPECT_FALSE(load_chat_template(dir.path()).has_value());  // no tokenizer_config.json
  write_file_atomically(dir / "tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_FALSE(load_chat_template(dir.path()).has_value());  // no template in it
  write_file_atomically(dir / "tokenizer_config.json",
                        R"({"bos_token": {"content": "<s>", "special": true}, "eos_token": "</s>",
                            "chat_template": [{"name": "tool_use", "template": "T"},
                                              {"name": "default", "template": "{{ bos_token }}{{ messages | length }}{{ eos_token }}"}]})");
  auto t = load_chat_template(dir.path());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->bos_token, "<s>");
  EXPECT_EQ(t->chat_template.render({{"messages", {1, 2}}, {"bos_token", t->bos_token}, {"eos_token", t->eos_token}}),
            "<s>2</s>");
  write_file_atomically(dir / "tokenizer_config.json", R"({"chat_template": "{% if %}"})");
  EXPECT_THROW(load_chat_template(dir.path()), InputError);
  write_file_atomically(dir / "tokenizer_config.json", "{not json");
  EXPECT_THROW(load_chat_template(dir.path()), InputError);
}

}  // namespace
}  // namespace fleet::text
