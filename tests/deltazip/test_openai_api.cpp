// The OpenAI request layer: valid bodies parse into what they say, every
// invalid one is a 400 naming the parameter, random bodies never crash the
// parser, and streamed text stops exactly at a stop string.
#include <random>

#include <gtest/gtest.h>

#include "deltazip/serve/openai_api.h"

namespace fleet::deltazip {
namespace {

CompletionParams parse(const std::string& body, bool chat = false) { return parse_completion_request(body, chat); }

std::pair<int, std::string> failure(const std::string& body, bool chat = false) {
  try {
    parse(body, chat);
  } catch (const ServeError& e) {
    return {e.status(), e.param()};
  }
  return {200, ""};
}

TEST(OpenAiRequests, CompletionFieldsAreRead) {
  auto p = parse(R"({"model": "ft1", "prompt": "hi", "max_tokens": 7, "temperature": 0, "top_p": 0.5,
                     "seed": 3, "stop": ["\n", "END"], "stream": true, "stream_options": {"include_usage": true}})");
  EXPECT_EQ(p.model, "ft1");
  ASSERT_EQ(p.prompts.size(), 1u);
  EXPECT_EQ(*p.prompts[0].text, "hi");
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.best_of, 1);
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(p.temperature, 0);
  EXPECT_EQ(p.top_p, 0.5);
  EXPECT_EQ(*p.seed, 3u);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(p.stream && p.include_usage);
  EXPECT_EQ(parse(R"({"model": "m", "prompt": [1, 2, 3]})").prompts.at(0).tokens, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(parse(R"({"model": "m", "prompt": [[4, 5]]})").prompts.at(0).tokens, (std::vector<std::int64_t>{4, 5}));
  EXPECT_EQ(*parse(R"({"model": "m", "prompt": ["one"]})").prompts.at(0).text, "one");
  // Batches, as vLLM takes them: several strings or several token-id lists.
  const auto texts = parse(R"({"model": "m", "prompt": ["one", "two", ""]})").prompts;
  ASSERT_EQ(texts.size(), 3u);
  EXPECT_EQ(*texts[1].text, "two");
  EXPECT_EQ(*texts[2].text, "");
  const auto ids = parse(R"({"model": "m", "prompt": [[1], [2, 3]]})").prompts;
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[1].tokens, (std::vector<std::int64_t>{2, 3}));
  auto several = parse(R"({"model": "m", "prompt": "x", "n": 3, "best_of": 5})");
  EXPECT_EQ(several.n, 3);
  EXPECT_EQ(several.best_of, 5);
  EXPECT_EQ(parse(R"({"model": "m", "prompt": "x", "n": 2})").best_of, 2);  // best_of defaults to n
  EXPECT_EQ(parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 4})", true).n, 4);
  // logprobs: true and false on completions, as vLLM reads them: 1 alternative, none.
  EXPECT_EQ(parse(R"({"model": "m", "prompt": "x", "logprobs": true})").logprobs, 1);
  EXPECT_EQ(parse(R"({"model": "m", "prompt": "x", "logprobs": false})").logprobs, -1);
  EXPECT_EQ(parse(R"({"model": "m", "prompt": "x"})").max_tokens, 16);  // OpenAI's default
  EXPECT_EQ(parse(R"({"model": "m", "prompt": "x", "stop": "."})").stop, std::vector<std::string>{"."});
  auto q = parse(R"({"model": "m", "prompt": "x", "frequency_penalty": -0.5, "presence_penalty": 1.5,
                     "logit_bias": {"7": -100, "12": 2.5}, "tools": [], "tool_choice": "none",
                     "response_format": {"type": "text"}, "suffix": "", "top_logprobs": 0, "functions": [],
                     "function_call": "none", "modalities": ["text"], "audio": null, "user": "u1"})");
  EXPECT_EQ(q.logprobs, -1);
  EXPECT_FALSE(q.echo);
  auto scoring = parse(R"({"model": "m", "prompt": "x", "max_tokens": 0, "echo": true, "logprobs": 1})");
  EXPECT_TRUE(scoring.echo);
  EXPECT_EQ(scoring.max_tokens, 0);  // echo alone: the prompt is scored, nothing generated
  EXPECT_EQ(parse(R"({"model": "m", "prompt": "x", "logprobs": 3})").logprobs, 3);
  EXPECT_EQ(parse(R"({"model": "m", "prompt": "x", "logprobs": 0})").logprobs, 0);
  EXPECT_EQ(parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true})", true).logprobs,
            0);
  EXPECT_EQ(parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true,
                      "top_logprobs": 5})",
                  true)
                .logprobs,
            5);
  EXPECT_EQ(q.frequency_penalty, -0.5);
  EXPECT_EQ(q.presence_penalty, 1.5);
  EXPECT_EQ(q.logit_bias, (std::vector<std::pair<std::int64_t, float>>{{12, 2.5f}, {7, -100.0f}}));
}

TEST(OpenAiRequests, ChatMessagesAndTemplate) {
  auto p = parse(R"({"model": "m", "max_completion_tokens": 3, "messages": [
                      {"role": "system", "content": "Be brief."},
                      {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "!"}]}]})",
                 true);
  ASSERT_EQ(p.messages.size(), 2u);
  EXPECT_EQ(p.max_tokens, 3);
  // Without a limit a chat reply may run to the end of the context (0 here), a completion stops at 16.
  EXPECT_EQ(parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})", true).max_tokens, 0);
  EXPECT_EQ(failure(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", true).second,
            "max_tokens");
  EXPECT_EQ(plain_chat_prompt(p.messages), "<|system|>\nBe brief.\n<|user|>\nHello!\n<|assistant|>\n");
}

TEST(OpenAiRequests, InvalidBodiesAre400sNamingTheParameter) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", ""},
      {"[1, 2]", ""},
      {R"({"prompt": "x"})", "model"},
      {R"({"model": 3, "prompt": "x"})", "model"},
      {R"({"model": "m"})", "prompt"},
      {R"({"model": "m", "prompt": 5})", "prompt"},
      {R"({"model": "m", "prompt": [1, "a"]})", "prompt"},
      {R"({"model": "m", "prompt": ["a", [1]]})", "prompt"},
      {R"({"model": "m", "prompt": [[1], []]})", "prompt"},
      {R"({"model": "m", "prompt": []})", "prompt"},
      {R"({"model": "m", "prompt": "x", "n": 0})", "n"},
      {R"({"model": "m", "prompt": "x", "n": 65})", "n"},
      {R"({"model": "m", "prompt": ["a", "b", "c"], "n": 22})", "n"},
      {R"({"model": "m", "prompt": "x", "n": 2, "best_of": 1})", "best_of"},
      {R"({"model": "m", "prompt": "x", "best_of": 65})", "best_of"},
      {R"({"model": "m", "prompt": "x", "best_of": 2, "stream": true})", "best_of"},
      {R"({"model": "m", "prompt": [1.5]})", "prompt"},
      {R"({"model": "m", "prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "max_tokens": -4})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "max_tokens": "many"})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "max_tokens": 99999999999999999999})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "temperature": -1})", "temperature"},
      {R"({"model": "m", "prompt": "x", "temperature": 3})", "temperature"},
      {R"({"model": "m", "prompt": "x", "top_p": 0})", "top_p"},
      {R"({"model": "m", "prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"model": "m", "prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"model": "m", "prompt": "x", "echo": true, "stream": true})", "echo"},
      {R"({"model": "m", "prompt": "x", "max_tokens": 0, "echo": false})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop"},
      {R"({"model": "m", "prompt": "x", "stop": [""]})", "stop"},
      {R"({"model": "m", "prompt": "x", "stop": 4})", "stop"},
      {R"({"model": "m", "prompt": "x", "stream": "yes"})", "stream"},
      {R"({"model": "m", "prompt": "x", "seed": "s"})", "seed"},
      {R"({"model": "m", "prompt": "x", "frequency_penalty": 2.5})", "frequency_penalty"},
      {R"({"model": "m", "prompt": "x", "presence_penalty": "high"})", "presence_penalty"},
      {R"({"model": "m", "prompt": "x", "logit_bias": [1]})", "logit_bias"},
      {R"({"model": "m", "prompt": "x", "logit_bias": {"a": 1}})", "logit_bias"},
      {R"({"model": "m", "prompt": "x", "logit_bias": {"-3": 1}})", "logit_bias"},
      {R"({"model": "m", "prompt": "x", "logit_bias": {"3": 101}})", "logit_bias"},
      {R"({"model": "m", "prompt": "x", "tools": [{"type": "function", "function": {"name": "f"}}]})", "tools"},
      {R"({"model": "m", "prompt": "x", "tool_choice": "auto"})", "tool_choice"},
      {R"({"model": "m", "prompt": "x", "response_format": {"type": "json_object"}})", "response_format"},
      {R"({"model": "m", "prompt": "x", "top_logprobs": 2})", "top_logprobs"},
      {R"({"model": "m", "prompt": "x", "suffix": " end"})", "suffix"},
      {R"({"model": "m", "prompt": "x", "functions": [{"name": "f", "parameters": {}}]})", "functions"},
      {R"({"model": "m", "prompt": "x", "function_call": "auto"})", "function_call"},
      {R"({"model": "m", "prompt": "x", "modalities": ["text", "audio"]})", "modalities"},
      {R"({"model": "m", "prompt": "x", "audio": {"voice": "alloy", "format": "wav"}})", "audio"},
  };
  for (const auto& [body, param] : cases) {
    auto [status, got] = failure(body);
    EXPECT_EQ(status, 400) << body;
    EXPECT_EQ(got, param) << body;
  }
  EXPECT_EQ(failure(R"({"model": "m", "messages": []})", true).second, "messages");
  EXPECT_EQ(failure(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "best_of": 2})", true).second,
            "best_of");  // a completions parameter
  EXPECT_EQ(failure(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "echo": true})", true).second,
            "echo");
  EXPECT_EQ(
      failure(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", true).second,
      "top_logprobs");  // without logprobs: true
  EXPECT_EQ(failure(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true,
                        "top_logprobs": 21})",
                    true)
                .second,
            "top_logprobs");
  EXPECT_EQ(failure(R"({"model": "m", "messages": [{"role": "robot", "content": "x"}]})", true).second,
            "messages[0].role");
  EXPECT_EQ(
      failure(R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", true).second,
      "messages[0].content");
}

// Random edits of valid bodies: each parses or is a 400, nothing else.
TEST(OpenAiRequests, FuzzedBodiesParseOrAre400s) {
  const std::vector<std::string> seeds = {
      R"({"model": "ft1", "prompt": "hello", "max_tokens": 5, "stop": ["x"], "stream": true})",
      R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.5, "seed": 9})",
      R"({"model": "m", "prompt": [[1, 2, 3]], "top_p": 0.9, "stream_options": {"include_usage": true}})"};
  std::mt19937 rng(42);
  const std::string alphabet = "{}[]\":,0123456789-.eE truefalsnul\\\x01\xff";
  int parsed = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string body = seeds[static_cast<std::size_t>(i) % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !body.empty(); ++e) {
      const auto at = rng() % body.size();
      switch (rng() % 3) {
        case 0:
          body[at] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          body.erase(at, 1 + rng() % 8);
          break;
        default:
          body.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
      }
    }
    try {
      parse(body, i % 3 == 1);
      ++parsed;
    } catch (const ServeError& e) {
      ASSERT_EQ(e.status(), 400) << body;
      ++refused;
    }
  }
  EXPECT_GT(parsed, 100);
  EXPECT_GT(refused, 1000);
}

std::vector<std::int64_t> bytes_as_tokens(const std::string& text) {
  std::vector<std::int64_t> ids;
  for (unsigned char c : text) ids.push_back(c + 4);  // the byte tokenizer: id = byte + 4
  return ids;
}

TEST(TextStreams, StopStringEndsTheTextWhereverTheTokensSplitIt) {
  auto tokenizer = text::Tokenizer::parse(text::byte_tokenizer_json(), "byte tokenizer");
  const std::string generated =
      "Hello wor"
      "ld. END and more";
  for (std::size_t chunk = 1; chunk <= 5; ++chunk) {
    TextStream stream(tokenizer, {}, {"END", "\n\n"});
    std::string out;
    const auto ids = bytes_as_tokens(generated);
    for (std::size_t i = 0; i < ids.size() && !stream.stopped(); i += chunk)
      out += stream.push(
          std::vector<std::int64_t>(ids.begin() + static_cast<std::ptrdiff_t>(i),
                                    ids.begin() + static_cast<std::ptrdiff_t>(std::min(i + chunk, ids.size()))));
    out += stream.flush();
    EXPECT_TRUE(stream.stopped());
    EXPECT_EQ(out, "Hello world. ") << "chunk " << chunk;
    EXPECT_EQ(stream.tokens(), 16) << "chunk " << chunk;  // up to the D of END
  }
  TextStream plain(tokenizer, {}, {});
  EXPECT_EQ(plain.push(bytes_as_tokens("caf")), "caf");
  EXPECT_EQ(plain.push(bytes_as_tokens("\xc3")), "");  // half a character is held back
  EXPECT_EQ(plain.push(bytes_as_tokens("\xa9!")), "\xc3\xa9!");
  EXPECT_FALSE(plain.stopped());
  EXPECT_EQ(plain.tokens(), 6);
}

TEST(TextStreams, StopStringsAreFoundInTheTextHeldBackAtTheEnd) {
  auto tokenizer = text::Tokenizer::parse(text::byte_tokenizer_json(), "byte tokenizer");
  TextStream stream(tokenizer, bytes_as_tokens("prompt: "), {"\xc3\xa9!", "xyz"});
  EXPECT_EQ(stream.push(bytes_as_tokens("a caf")), "a c");  // a stop string's first 2 bytes could follow
  EXPECT_EQ(stream.push(bytes_as_tokens("\xc3")), "");
  EXPECT_EQ(stream.flush(), "af\xef\xbf\xbd");  // generation ended inside a character
  EXPECT_FALSE(stream.stopped());
  TextStream stops(tokenizer, {}, {"\xc3\xa9!"});
  EXPECT_EQ(stops.push(bytes_as_tokens("caf\xc3\xa9")), "caf");
  EXPECT_EQ(stops.push(bytes_as_tokens("!")), "");
  EXPECT_TRUE(stops.stopped());
  EXPECT_EQ(stops.flush(), "");
}

TEST(OpenAiErrors, HaveOpenAisShape) {
  auto e = error_body("bad thing", "invalid_request_error", "max_tokens", "context_length_exceeded");
  EXPECT_EQ(e["error"]["message"], "bad thing");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "max_tokens");
  EXPECT_EQ(e["error"]["code"], "context_length_exceeded");  // a string, as OpenAI's
  EXPECT_TRUE(error_body("x", "server_error")["error"]["param"].is_null());
  EXPECT_TRUE(error_body("x", "server_error")["error"]["code"].is_null());
}

}  // namespace
}  // namespace fleet::deltazip
