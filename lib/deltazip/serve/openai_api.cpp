#include "deltazip/serve/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace fleet::deltazip {
namespace {

[[noreturn]] void bad(const std::string& message, const std::string& param) {
  throw ServeError(400, "invalid_request_error", message, param);
}

double number_field(const nlohmann::json& body, const char* key, double fallback, double lo, double hi) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number()) bad(std::string(key) + " must be a number", key);
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    bad(std::string(key) + " must be between " + nlohmann::json(lo).dump() + " and " + nlohmann::json(hi).dump(), key);
  return v;
}

std::int64_t integer_field(const nlohmann::json& value, const char* key) {
  if (value.is_number_integer() || value.is_number_unsigned()) {
    if (value.is_number_unsigned() &&
        value.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      bad(std::string(key) + " is too large", key);
    return value.get<std::int64_t>();
  }
  bad(std::string(key) + " must be an integer", key);
}

bool bool_field(const nlohmann::json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_boolean()) bad(std::string(key) + " must be true or false", key);
  return it->get<bool>();
}

std::string text_content(const nlohmann::json& content, std::size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return "";
  if (!content.is_array()) bad(param + " must be a string or an array of text parts", param);
  std::string out;
  for (const auto& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      bad(param + ": only text parts ({\"type\": \"text\", \"text\": ...}) are supported", param);
    out += part["text"].get<std::string>();
  }
  return out;
}

// A chat's messages: role and text of each.
void read_messages(const nlohmann::json& body, CompletionParams& p) {
  auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array() || messages->empty())
    bad("messages must be a non-empty array", "messages");
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const auto& m = (*messages)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad(param + " must be an object with a string role", param);
    const auto role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "developer")
      bad(param + ".role must be system, developer, user or assistant", param + ".role");
    p.messages.push_back({role, text_content(m.contains("content") ? m["content"] : nlohmann::json(), i)});
  }
}

// A completion's prompt: a string, a list of token ids, or a batch of either.
void read_prompts(const nlohmann::json& body, CompletionParams& p) {
  auto prompt = body.find("prompt");
  if (prompt == body.end() || prompt->is_null()) bad("prompt is required", "prompt");
  auto token_ids = [&](const nlohmann::json& ids) {
    CompletionPrompt one;
    for (const auto& t : ids) one.tokens.push_back(integer_field(t, "prompt"));
    if (one.tokens.empty()) bad("prompt is empty", "prompt");
    return one;
  };
  // A string, a list of token ids, or a batch: a list of strings or of token-id lists.
  if (prompt->is_string()) {
    p.prompts.push_back({prompt->get<std::string>(), {}});
  } else if (!prompt->is_array() || prompt->empty()) {
    bad(prompt->is_array() ? "prompt is empty" : "prompt must be a string, a list of token ids, or a list of those",
        "prompt");
  } else if ((*prompt)[0].is_number()) {
    p.prompts.push_back(token_ids(*prompt));
  } else {
    const bool texts = (*prompt)[0].is_string();
    for (const auto& item : *prompt) {
      if (texts && item.is_string())
        p.prompts.push_back({item.get<std::string>(), {}});
      else if (!texts && item.is_array())
        p.prompts.push_back(token_ids(item));
      else
        bad("a batch of prompts must be all strings or all lists of token ids", "prompt");
    }
  }
}

// max_tokens (max_completion_tokens for a chat, when given).
void read_max_tokens(const nlohmann::json& body, bool chat, const ApiLimits& limits, CompletionParams& p) {
  const char* max_key = chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  auto max_tokens = body.find(max_key);
  if (max_tokens == body.end() || max_tokens->is_null()) {
    // OpenAI's defaults: 16 for a completion, and for a chat the rest of the context.
    p.max_tokens = chat ? 0 : limits.max_tokens_default;
  } else {
    p.max_tokens = integer_field(*max_tokens, max_key);
    // With echo, 0 scores the prompt alone (what evaluation harnesses send).
    if (p.max_tokens < 0 || (p.max_tokens == 0 && !(bool_field(body, "echo") && !chat)))
      bad(std::string(max_key) + " must be at least 1", max_key);
  }
}

// Temperature, nucleus, penalties and logit bias.
void read_sampling(const nlohmann::json& body, CompletionParams& p) {
  p.temperature = number_field(body, "temperature", 1.0, 0.0, 2.0);
  p.top_p = number_field(body, "top_p", 1.0, 0.0, 1.0);
  if (p.top_p <= 0) bad("top_p must be greater than 0", "top_p");
  p.frequency_penalty = number_field(body, "frequency_penalty", 0.0, -2.0, 2.0);
  p.presence_penalty = number_field(body, "presence_penalty", 0.0, -2.0, 2.0);
  if (auto bias = body.find("logit_bias"); bias != body.end() && !bias->is_null()) {
    if (!bias->is_object()) bad("logit_bias must be an object of token id -> bias", "logit_bias");
    if (bias->size() > 300) bad("logit_bias takes at most 300 tokens", "logit_bias");
    for (auto it = bias->begin(); it != bias->end(); ++it) {
      const std::string& key = it.key();
      const bool id = !key.empty() && key.size() <= 18 && key.find_first_not_of("0123456789") == std::string::npos;
      if (!id) bad("logit_bias keys must be token ids, got '" + key + "'", "logit_bias");
      if (!it->is_number() || !(std::abs(it->get<double>()) <= 100))
        bad("logit_bias values must be numbers between -100 and 100", "logit_bias");
      p.logit_bias.emplace_back(std::stoll(key), it->get<float>());
    }
  }
}

// Function calling and structured output: refused, never ignored.
void refuse_tools_and_formats(const nlohmann::json& body) {
  if (auto tools = body.find("tools");
      tools != body.end() && !tools->is_null() && !(tools->is_array() && tools->empty()))
    bad("tools (function calling) are not supported", "tools");
  if (auto choice = body.find("tool_choice"); choice != body.end() && !choice->is_null() && *choice != "none")
    bad("tool_choice is not supported", "tool_choice");
  if (auto format = body.find("response_format");
      format != body.end() && !format->is_null() && !(format->is_object() && format->value("type", "") == "text"))
    bad("response_format other than {\"type\": \"text\"} is not supported", "response_format");
}

// The sampling seed, and vLLM's extensions (refused unless off).
void read_seed_and_vllm_extensions(const nlohmann::json& body, CompletionParams& p) {
  if (auto seed = body.find("seed"); seed != body.end() && !seed->is_null())
    p.seed = static_cast<std::uint64_t>(integer_field(*seed, "seed"));
  // vLLM's sampling extensions: refused unless at their "off" value, never
  // accepted and ignored (a client relying on one would get other text).
  auto refuse_unless = [&](const char* key, auto off) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return;
    using Off = decltype(off);
    const bool same = std::is_same_v<Off, bool> ? (it->is_boolean() && it->get<bool>() == static_cast<bool>(off))
                                                : (it->is_number() && it->get<double>() == static_cast<double>(off));
    if (!same) bad(std::string(key) + " is not supported by this server", key);
  };
  if (auto k = body.find("top_k");
      k != body.end() && !k->is_null() && !(k->is_number_integer() && k->get<std::int64_t>() <= 0))
    bad("top_k is not supported by this server (0 or -1: off)", "top_k");
  refuse_unless("min_p", 0.0);
  refuse_unless("repetition_penalty", 1.0);
  refuse_unless("ignore_eos", false);
}

// How many sequences: n returned, best_of generated, within the limit.
void read_counts(const nlohmann::json& body, bool chat, const ApiLimits& limits, CompletionParams& p) {
  if (auto n = body.find("n"); n != body.end() && !n->is_null()) p.n = integer_field(*n, "n");
  if (p.n < 1) bad("n must be at least 1", "n");
  p.best_of = p.n;
  if (auto best = body.find("best_of"); best != body.end() && !best->is_null()) {
    if (chat) bad("best_of is a completions parameter", "best_of");
    p.best_of = integer_field(*best, "best_of");
    if (p.best_of < p.n) bad("best_of must be at least n", "best_of");
  }
  const auto sequences = std::max<std::int64_t>(1, static_cast<std::int64_t>(p.prompts.size())) * p.best_of;
  if (p.best_of > limits.max_sequences || sequences > limits.max_sequences)
    bad("at most " + std::to_string(limits.max_sequences) + " sequences per request (prompts x best_of)",
        p.best_of > p.n ? "best_of" : "n");
}

// Log-probabilities of the chosen tokens and their alternatives.
void read_logprobs(const nlohmann::json& body, bool chat, CompletionParams& p) {
  // Log-probabilities: a completion's logprobs is how many alternatives
  // (0-20); a chat's is true or false, with top_logprobs alternatives.
  auto alternatives = [&](const nlohmann::json& v, const char* key) {
    const auto n = integer_field(v, key);
    if (n < 0 || n > kMaxTopLogprobs) bad(std::string(key) + " must be 0 to " + std::to_string(kMaxTopLogprobs), key);
    return n;
  };
  const auto top = body.find("top_logprobs");
  const bool has_top = top != body.end() && !top->is_null();
  const auto top_n = has_top ? alternatives(*top, "top_logprobs") : 0;
  if (chat) {
    if (bool_field(body, "logprobs"))
      p.logprobs = top_n;
    else if (top_n > 0)
      bad("top_logprobs needs logprobs: true", "top_logprobs");
  } else {
    // true and false as vLLM takes them for its integer: 1 alternative, or none.
    if (auto lp = body.find("logprobs"); lp != body.end() && lp->is_boolean())
      p.logprobs = lp->get<bool>() ? 1 : -1;
    else if (lp != body.end() && !lp->is_null())
      p.logprobs = alternatives(*lp, "logprobs");
    if (top_n > 0) bad("top_logprobs is a chat parameter; completions take logprobs: N", "top_logprobs");
  }
}

// Insertion, the function-calling API before tools, and output other than text.
void refuse_other_outputs(const nlohmann::json& body) {
  if (auto suffix = body.find("suffix"); suffix != body.end() && !suffix->is_null() &&
                                         !(suffix->is_string() && suffix->get_ref<const std::string&>().empty()))
    bad("suffix (inserting text) is not supported", "suffix");
  // The function-calling API before tools, and output other than text.
  if (auto functions = body.find("functions");
      functions != body.end() && !functions->is_null() && !(functions->is_array() && functions->empty()))
    bad("functions (function calling) are not supported", "functions");
  if (auto call = body.find("function_call"); call != body.end() && !call->is_null() && *call != "none")
    bad("function_call is not supported", "function_call");
  if (auto modalities = body.find("modalities");
      modalities != body.end() && !modalities->is_null() && *modalities != nlohmann::json::array({"text"}))
    bad("only text output is supported", "modalities");
  if (auto audio = body.find("audio"); audio != body.end() && !audio->is_null())
    bad("audio output is not supported", "audio");
}

// Stop strings, within the limits on their number and length.
void read_stop(const nlohmann::json& body, const ApiLimits& limits, CompletionParams& p) {
  if (auto stop = body.find("stop"); stop != body.end() && !stop->is_null()) {
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const auto& s : *stop) {
        if (!s.is_string()) bad("stop must be a string or an array of strings", "stop");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      bad("stop must be a string or an array of strings", "stop");
    }
    if (static_cast<std::int64_t>(p.stop.size()) > limits.max_stop_strings)
      bad("at most " + std::to_string(limits.max_stop_strings) + " stop strings", "stop");
    for (const auto& s : p.stop)
      if (s.empty() || s.size() > limits.max_stop_length)
        bad("stop strings must have 1 to " + std::to_string(limits.max_stop_length) + " bytes", "stop");
  }
}

// stream and stream_options, and what cannot be streamed.
void read_streaming(const nlohmann::json& body, CompletionParams& p) {
  p.stream = bool_field(body, "stream");
  if (p.echo && p.stream) bad("echo is supported without stream", "echo");
  if (p.stream && p.best_of > p.n) bad("best_of above n needs every sequence finished: not with stream", "best_of");
  if (auto options = body.find("stream_options"); options != body.end() && !options->is_null()) {
    if (!p.stream) bad("stream_options is only allowed when stream is true", "stream_options");
    if (!options->is_object()) bad("stream_options must be an object", "stream_options");
    p.include_usage = bool_field(*options, "include_usage");
  }
}

}  // namespace

CompletionParams parse_completion_request(std::string_view body_text, bool chat, const ApiLimits& limits) {
  nlohmann::json body;
  try {
    body = nlohmann::json::parse(body_text);
  } catch (const nlohmann::json::exception& e) {
    bad(std::string("the body is not valid JSON: ") + e.what(), "");
  }
  if (!body.is_object()) bad("the body must be a JSON object", "");
  CompletionParams p;
  p.chat = chat;
  auto model = body.find("model");
  if (model == body.end() || !model->is_string() || model->get<std::string>().empty())
    bad("model must be a non-empty string", "model");
  p.model = model->get<std::string>();
  // In this order, so that a request with several faults hears of the first.
  if (chat)
    read_messages(body, p);
  else
    read_prompts(body, p);
  read_max_tokens(body, chat, limits, p);
  read_sampling(body, p);
  refuse_tools_and_formats(body);
  read_seed_and_vllm_extensions(body, p);
  read_counts(body, chat, limits, p);
  read_logprobs(body, chat, p);
  p.echo = bool_field(body, "echo");
  if (p.echo && chat) bad("echo is a completions parameter", "echo");
  refuse_other_outputs(body);
  read_stop(body, limits, p);
  read_streaming(body, p);
  return p;
}

std::string plain_chat_prompt(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const auto& m : messages) out += "<|" + m.role + "|>\n" + m.content + "\n";
  return out + "<|assistant|>\n";
}

std::string render_chat(const text::ModelChatTemplate& chat, const std::vector<ChatMessage>& messages) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  try {
    return chat.chat_template.render({{"messages", list},
                                      {"add_generation_prompt", true},
                                      {"bos_token", chat.bos_token},
                                      {"eos_token", chat.eos_token}});
  } catch (const std::exception& e) {
    throw ServeError(400, "invalid_request_error", e.what(), "messages");
  }
}

TextStream::TextStream(const text::Tokenizer& tokenizer, std::span<const std::int64_t> prompt,
                       std::vector<std::string> stop)
    : decoder_(tokenizer, prompt, /*skip_special_tokens=*/true), stop_(std::move(stop)) {
  for (const auto& s : stop_) longest_stop_ = std::max(longest_stop_, s.size());
}

std::string TextStream::push(const std::vector<std::int64_t>& tokens) {
  // Token by token, so that a stop string ends the count at the token that
  // completed it, however the tokens arrived.
  std::string out;
  for (auto token : tokens) {
    if (stopped_) break;
    ++tokens_;
    text_ += decoder_.push(std::span<const std::int64_t>(&token, 1));
    out += release(/*final=*/false);
  }
  return out;
}

std::string TextStream::flush() {
  if (stopped_) return "";
  text_ += decoder_.flush();
  return release(/*final=*/true);
}

std::string TextStream::release(bool final) {
  // The first stop string that ends anywhere after what was already sent.
  std::size_t cut = std::string::npos;
  const std::size_t from = sent_ > longest_stop_ ? sent_ - longest_stop_ : 0;
  for (const auto& s : stop_) {
    auto at = text_.find(s, from);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    text_.resize(std::max(cut, sent_));
  }
  std::size_t end = text_.size();
  if (!stopped_ && !final && longest_stop_ > 0) {
    // Hold back a possible stop-string prefix, whole characters only.
    end = text_.size() > longest_stop_ - 1 ? text_.size() - (longest_stop_ - 1) : 0;
    while (end > sent_ && end < text_.size() && (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) --end;
  }
  if (end <= sent_) return "";
  auto out = text_.substr(sent_, end - sent_);
  sent_ = end;
  return out;
}

LogprobsWriter::LogprobsWriter(const text::Tokenizer& tokenizer, bool chat) : tokenizer_(tokenizer), chat_(chat) {}

// Text offsets count characters, as Python does.
std::int64_t LogprobsWriter::characters(const std::string& s) {
  std::int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string LogprobsWriter::text(std::int64_t id) const {
  if (id < 0 || id >= tokenizer_.vocab_size()) return "";  // a model's padded vocabulary rows
  const std::int32_t one = static_cast<std::int32_t>(id);
  return tokenizer_.decode(std::span<const std::int32_t>(&one, 1), /*skip_special_tokens=*/false);
}

nlohmann::json LogprobsWriter::write(std::span<const std::int64_t> tokens,
                                     std::span<const model::TokenLogprobs> logprobs) {
  using nlohmann::json;
  const std::size_t n = std::min(tokens.size(), logprobs.size());
  auto bytes = [](const std::string& s) {
    json out = json::array();
    for (unsigned char c : s) out.push_back(static_cast<int>(c));
    return out;
  };
  if (chat_) {
    json content = json::array();
    for (std::size_t i = 0; i < n; ++i) {
      const auto token = text(tokens[i]);
      json top = json::array();
      for (const auto& [id, lp] : logprobs[i].top) {
        const auto alt = text(id);
        top.push_back({{"token", alt}, {"logprob", lp}, {"bytes", bytes(alt)}});
      }
      content.push_back(
          {{"token", token}, {"logprob", logprobs[i].logprob}, {"bytes", bytes(token)}, {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (std::size_t i = 0; i < n; ++i) {
    const auto token = text(tokens[i]);
    // The legacy form lists the chosen token among the alternatives, as vLLM does.
    // Tokens that decode alike share a key: the most likely keeps it.
    json top = json::object();
    for (const auto& [id, lp] : logprobs[i].top) top.emplace(text(id), lp);
    top.emplace(token, logprobs[i].logprob);
    out["tokens"].push_back(token);
    out["token_logprobs"].push_back(logprobs[i].logprob);
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(offset_);
    offset_ += characters(token);
  }
  return out;
}

nlohmann::json LogprobsWriter::write_echo(std::span<const std::int64_t> prompt,
                                          std::span<const model::TokenLogprobs> prompt_logprobs,
                                          std::span<const std::int64_t> tokens,
                                          std::span<const model::TokenLogprobs> logprobs, bool first_shown) {
  nlohmann::json out = {{"tokens", nlohmann::json::array()},
                        {"token_logprobs", nlohmann::json::array()},
                        {"top_logprobs", nlohmann::json::array()},
                        {"text_offset", nlohmann::json::array()}};
  if (!prompt.empty()) {
    // Nothing comes before the first token to predict it.
    const auto first = text(prompt[0]);
    out["tokens"].push_back(first);
    out["token_logprobs"].push_back(nullptr);
    out["top_logprobs"].push_back(nullptr);
    out["text_offset"].push_back(offset_);
    if (first_shown) offset_ += characters(first);
  }
  const auto rest = prompt.empty() ? prompt : prompt.subspan(1);
  for (const auto& part : {write(rest, prompt_logprobs), write(tokens, logprobs)})
    for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      for (const auto& v : part[key]) out[key].push_back(v);
  return out;
}

nlohmann::json error_body(const std::string& message, const std::string& type, const std::string& param,
                          const std::string& code) {
  nlohmann::json error = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) error["param"] = param;
  if (!code.empty()) error["code"] = code;
  return {{"error", error}};
}

}  // namespace fleet::deltazip
