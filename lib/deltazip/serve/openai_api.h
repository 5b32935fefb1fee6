// The OpenAI-compatible request and response bodies dz-serve speaks
// (docs/serving.md): parsing and validating /v1/completions and
// /v1/chat/completions requests, the plain chat template, incremental
// detokenization with stop strings, and the error shape. No HTTP, no libtorch.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "deltazip/serve/request.h"
#include "text/chat_template.h"
#include "text/streaming_decoder.h"
#include "text/tokenizer.h"

namespace fleet::deltazip {

/// Limits a request must stay within.
struct ApiLimits {
  std::int64_t max_tokens_default = 16;
  std::int64_t max_stop_strings = 4;
  std::size_t max_stop_length = 256;
  std::int64_t max_sequences = 64;  ///< prompts x best_of (or n) one request may ask for
};

struct ChatMessage {
  std::string role, content;
};

/// One prompt of a completions request: text, or token ids.
struct CompletionPrompt {
  std::optional<std::string> text;
  std::vector<std::int64_t> tokens;
};

/// A parsed /v1/completions or /v1/chat/completions body.
struct CompletionParams {
  bool chat = false;
  std::string model;
  std::vector<CompletionPrompt> prompts;  ///< completions: one, or a batch
  std::vector<ChatMessage> messages;      ///< chat
  std::int64_t n = 1;                     ///< choices returned per prompt
  std::int64_t best_of = 1;               ///< completions: sequences generated per prompt, the n most likely returned
  std::int64_t max_tokens = 16;           ///< 0: up to the end of the context (chat without a limit)
  double temperature = 1.0, top_p = 1.0;
  double frequency_penalty = 0.0, presence_penalty = 0.0;  ///< -2 to 2, on generated tokens
  std::vector<std::pair<std::int64_t, float>> logit_bias;  ///< token id -> -100 to 100
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
  std::int64_t logprobs = -1;  ///< -1: none; else alternatives per token (0-20)
  bool echo = false;           ///< completions: the prompt comes back before the completion
};

/// Parses a request body; ServeError 400 naming the parameter for malformed
/// JSON, a wrong type, an out-of-range value or an unsupported option
/// (tools, a response_format other than text, echo in a chat or a stream,
/// best_of in a chat or a stream): refused rather than ignored, so that no
/// reply silently differs from what was asked.
CompletionParams parse_completion_request(std::string_view body, bool chat, const ApiLimits& limits = {});

/// The documented plain chat template: each message as "<|role|>\n"
/// content "\n", then "<|assistant|>\n" for the reply.
std::string plain_chat_prompt(const std::vector<ChatMessage>& messages);

/// The model's own chat template applied as transformers' apply_chat_template
/// does (add_generation_prompt, bos_token, eos_token); ServeError 400 when
/// the template refuses the conversation (raise_exception).
std::string render_chat(const text::ModelChatTemplate& chat, const std::vector<ChatMessage>& messages);

/// Turns generated tokens into text as they arrive: each token decoded after
/// the prompt (text::StreamingDecoder), holding back what could still become
/// a stop string or an incomplete UTF-8 character, and stopping at the first
/// stop string (which is not returned).
class TextStream {
 public:
  TextStream(const text::Tokenizer& tokenizer, std::span<const std::int64_t> prompt, std::vector<std::string> stop);
  /// Text that became final with `tokens`.
  std::string push(const std::vector<std::int64_t>& tokens);
  /// What was held back, at the end of generation.
  std::string flush();
  bool stopped() const { return stopped_; }
  /// Tokens pushed, up to the one that completed a stop string.
  std::int64_t tokens() const { return tokens_; }

 private:
  std::string release(bool final);

  text::StreamingDecoder decoder_;
  std::vector<std::string> stop_;
  std::size_t longest_stop_ = 0;
  std::int64_t tokens_ = 0;
  std::string text_;  ///< decoded so far
  std::size_t sent_ = 0;
  bool stopped_ = false;
};

/// OpenAI's logprobs object of generated tokens: a completion's {tokens,
/// token_logprobs, top_logprobs, text_offset} (the chosen token among the
/// alternatives, as vLLM lists it) or a chat's {content: [{token, logprob,
/// bytes, top_logprobs}]}. A token's string is the token decoded alone.
class LogprobsWriter {
 public:
  LogprobsWriter(const text::Tokenizer& tokenizer, bool chat);
  /// The object for these tokens; text offsets continue from the last call.
  nlohmann::json write(std::span<const std::int64_t> tokens, std::span<const model::TokenLogprobs> logprobs);
  /// Completions with echo: the prompt's tokens first (the first without a
  /// log-probability: null), then the generated ones. `first_shown` false:
  /// the echoed text leaves out the first token (the <s> put before a text
  /// prompt), so it takes no characters of the text offsets.
  nlohmann::json write_echo(std::span<const std::int64_t> prompt, std::span<const model::TokenLogprobs> prompt_logprobs,
                            std::span<const std::int64_t> tokens, std::span<const model::TokenLogprobs> logprobs,
                            bool first_shown = true);

 private:
  std::string text(std::int64_t id) const;
  static std::int64_t characters(const std::string& s);

  const text::Tokenizer& tokenizer_;
  bool chat_;
  std::int64_t offset_ = 0;
};

/// {"error": {"message", "type", "param", "code"}}; `code` is OpenAI's
/// string code (context_length_exceeded, model_not_found, invalid_api_key)
/// or null when empty, as OpenAI sends it.
nlohmann::json error_body(const std::string& message, const std::string& type, const std::string& param = "",
                          const std::string& code = "");

}  // namespace fleet::deltazip
