#include "deltazip/serve/torch/http_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <random>
#include <thread>

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/logging.h"
#include "deltazip/serve/connection_guard.h"
#include "deltazip/serve/growing_thread_pool.h"
#include "deltazip/serve/openai_api.h"

namespace fleet::deltazip {
namespace {

using nlohmann::json;

std::atomic<int> g_signal{0};   // the first stop signal
std::atomic<int> g_signals{0};  // how many arrived
extern "C" void on_stop_signal(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);
  g_signals.fetch_add(1);
}

// Request text can reach a response (a parse error quotes the bytes it read),
// and a body is not always valid UTF-8: ill-formed bytes become U+FFFD
// instead of making the dump throw.
std::string to_text(const json& body) { return body.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(to_text(body), "application/json");
}

void send_error(httplib::Response& res, const ServeError& e) {
  send_json(res, e.status(), error_body(e.what(), e.type(), e.param(), e.code()));
}

std::string sse(const json& body) { return "data: " + to_text(body) + "\n\n"; }

// Compares every byte whatever the first difference, so that the time a
// refusal takes says nothing about how much of a key was right.
bool same_secret(const std::string& given, const std::string& key) {
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (std::size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ key[i % key.size()]);
  return diff == 0;
}

// A socket's peer (or local) address and port, numeric, as httplib's
// Request::remote_addr and remote_port spell them.
std::pair<std::string, int> socket_address(int sock, bool peer) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  char host[NI_MAXHOST] = "";
  const int r = peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len)
                     : ::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  if (r != 0 ||
      ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0)
    return {"?", -1};
  const int port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                              : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return {host, port};
}

std::string connection_key(const httplib::Request& req) {
  return req.remote_addr + ":" + std::to_string(req.remote_port);
}

// A connection's socket for httplib, as its own SocketStream behaves, with
// one difference: reading stops at the ticket's deadline for the request.
class GuardedSocketStream final : public httplib::Stream {
 public:
  GuardedSocketStream(int sock, const ConnectionGuard::Ticket& ticket, std::chrono::milliseconds read_timeout,
                      std::chrono::milliseconds write_timeout)
      : sock_(sock), ticket_(ticket), read_timeout_(read_timeout), write_timeout_(write_timeout) {}

  bool is_readable() const override {
    using namespace std::chrono;
    const auto now = ConnectionGuard::Clock::now();
    const auto deadline = ticket_.deadline();
    if (deadline <= now) return false;
    auto wait = read_timeout_;
    if (deadline != ConnectionGuard::Clock::time_point::max())
      wait = std::min(wait, duration_cast<milliseconds>(deadline - now) + milliseconds(1));
    return poll_for(POLLIN, wait) && ConnectionGuard::Clock::now() < ticket_.deadline();
  }
  // Writable and not closed by the peer (a streaming response stops when the client goes).
  bool is_writable() const override {
    if (!poll_for(POLLOUT, write_timeout_)) return false;
    if (!poll_for(POLLIN, std::chrono::milliseconds(0))) return true;
    char c;
    return ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (!is_readable()) return -1;
    ssize_t n;
    do n = ::recv(sock_, ptr, size, 0);
    while (n < 0 && errno == EINTR);
    return n;
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  bool poll_for(short events, std::chrono::milliseconds wait) const {
    pollfd p{sock_, events, 0};
    int r;
    do r = ::poll(&p, 1, static_cast<int>(wait.count()));
    while (r < 0 && errno == EINTR);
    return r > 0;
  }
  void address_of(bool peer, std::string& ip, int& port) const {
    const auto [host, p] = socket_address(sock_, peer);
    ip = host;
    port = p;
  }

  const int sock_;
  const ConnectionGuard::Ticket& ticket_;
  const std::chrono::milliseconds read_timeout_, write_timeout_;
};

// httplib's server with ConnectionGuard at the door: the per-client cap
// checked before any byte is read, and each request's deadline. The
// keep-alive loop is httplib's own (0.11), over GuardedSocketStream.
class GuardedServer : public httplib::Server {
 public:
  explicit GuardedServer(ConnectionGuard& guard) : guard_(guard) {}

 private:
  bool process_and_close_socket(socket_t sock) override {
    const auto [client, port] = socket_address(sock, true);
    const auto ticket = guard_.admit(client + ":" + std::to_string(port), client);
    bool ok = true;
    if (ticket == nullptr) {
      refuse(sock, client);
    } else {
      using std::chrono::milliseconds;
      const milliseconds read_timeout(read_timeout_sec_ * 1000 + read_timeout_usec_ / 1000);
      const milliseconds write_timeout(write_timeout_sec_ * 1000 + write_timeout_usec_ / 1000);
      for (std::size_t left = keep_alive_max_count_; left > 0 && next_request(sock); --left) {
        ticket->request_started();
        GuardedSocketStream stream(sock, *ticket, read_timeout, write_timeout);
        bool closed = false;
        ok = process_request(stream, left == 1, closed, nullptr);
        if (!ok || closed) break;
      }
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }

  // Waits up to the keep-alive timeout for a request's first byte; false
  // when none comes, the peer closed, or the server is stopping.
  bool next_request(socket_t sock) const {
    using namespace std::chrono;
    const auto end = steady_clock::now() + seconds(keep_alive_timeout_sec_);
    while (svr_sock_ != INVALID_SOCKET) {
      pollfd p{sock, POLLIN, 0};
      const int r = ::poll(&p, 1, 50);
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return false;
      if (steady_clock::now() >= end) return false;
    }
    return false;
  }

  // 429 in the API's error shape; what the client already sent is read
  // first, so that closing does not reset the connection before it reads the answer.
  static void refuse(socket_t sock, const std::string& client) {
    const std::string body = to_text(error_body("too many connections from " + client, "rate_limit_error"));
    const std::string reply = "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    char drain[4096];
    while (::recv(sock, drain, sizeof drain, MSG_DONTWAIT) > 0) {
    }
    ::send(sock, reply.data(), reply.size(), MSG_NOSIGNAL);
    ::shutdown(sock, SHUT_WR);
  }

  ConnectionGuard& guard_;
};

class Frontend {
 public:
  Frontend(Engine& engine, const HttpOptions& options) : engine_(engine), options_(options) {}

  /// Called when a request has arrived whole (headers and body), before its handler runs.
  std::function<void(const httplib::Request&)> on_arrival;

  void install(httplib::Server& server) {
    if (!options_.api_key.empty()) {
      // Health and metrics stay open to probes and scrapers, as in vLLM.
      server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (req.path == "/health" || req.path == "/metrics") return httplib::Server::HandlerResponse::Unhandled;
        const std::string header = req.get_header_value("Authorization");
        const std::string prefix = "Bearer ";
        if (header.rfind(prefix, 0) == 0 && same_secret(header.substr(prefix.size()), options_.api_key))
          return httplib::Server::HandlerResponse::Unhandled;
        res.set_header("WWW-Authenticate", "Bearer");
        send_json(res, 401,
                  error_body("invalid or missing API key (send the header Authorization: Bearer KEY)",
                             "invalid_request_error", "", "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
      });
    }
    server.Get("/health", arrived([this](const httplib::Request&, httplib::Response& res) {
                 // The engine's own state: once /health says so, new requests get 503 too.
                 const bool stopping = engine_.shutting_down();
                 send_json(res, stopping ? 503 : 200, {{"status", stopping ? "shutting_down" : "ok"}});
               }));
    server.Get("/v1/models", arrived([this](const httplib::Request&, httplib::Response& res) { list_models(res); }));
    server.Get(R"(/v1/models/(.+))", arrived([this](const httplib::Request& req, httplib::Response& res) {
                 get_model(req.matches[1].str(), res);
               }));
    server.Get("/metrics", arrived([this](const httplib::Request&, httplib::Response& res) {
                 res.set_content(engine_.metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
               }));
    // The generation endpoints take POST only: another method gets 405, as in OpenAI's and vLLM's servers.
    for (const char* path : {"/v1/completions", "/v1/chat/completions", "/v1/load_delta", "/v1/unload_delta"}) {
      server.Get(path, arrived([](const httplib::Request& req, httplib::Response& res) {
                   res.set_header("Allow", "POST");
                   send_json(res, 405,
                             error_body("method " + req.method + " is not allowed on " + req.path + " (POST)",
                                        "invalid_request_error"));
                 }));
    }
    server.Post("/v1/completions",
                arrived([this](const httplib::Request& req, httplib::Response& res) { complete(req, res, false); }));
    server.Post("/v1/chat/completions",
                arrived([this](const httplib::Request& req, httplib::Response& res) { complete(req, res, true); }));
    server.Post("/v1/load_delta",
                arrived([this](const httplib::Request& req, httplib::Response& res) { load_delta(req, res); }));
    server.Post("/v1/unload_delta",
                arrived([this](const httplib::Request& req, httplib::Response& res) { unload_delta(req, res); }));
    server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      spdlog::error("request failed: {}", what);
      send_json(res, 500, error_body(what, "server_error"));
    });
    // Bodies httplib itself refuses (too large, unknown route) still get the error shape.
    server.set_error_handler(
        httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          std::string message = "error " + std::to_string(res.status);
          std::string type = "invalid_request_error";
          if (res.status == 404) {
            message = "no endpoint " + req.method + " " + req.path;
            type = "not_found_error";
          } else if (res.status == 413) {
            message = "the request body is larger than the server's limit";
          } else if (res.status == 414) {
            message = "the request target is longer than the server's limit";
          } else if (res.status == 400) {
            // Only the HTTP layer answers 400 without a body: our handlers always say why.
            message = "malformed HTTP request (request line, headers, Content-Length or chunked body)";
          }
          send_json(res, res.status, error_body(message, type));
          return httplib::Server::HandlerResponse::Handled;
        }));
  }

 private:
  // A route's handler, told first that its request has arrived.
  httplib::Server::Handler arrived(httplib::Server::Handler handler) {
    return [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
      if (on_arrival) on_arrival(req);
      handler(req, res);
    };
  }

  json model_object(const ModelInfo& m) const {
    return {{"id", m.name},
            {"object", "model"},
            {"created", started_},
            {"owned_by", "dz-serve"},
            {"root", engine_.base_name()},
            {"parent", m.is_base ? json(nullptr) : json(engine_.base_name())},
            {"max_model_len", engine_.max_context()},
            {"state", m.state}};
  }

  void list_models(httplib::Response& res) {
    json data = json::array();
    for (const auto& m : engine_.models()) data.push_back(model_object(m));
    send_json(res, 200, {{"object", "list"}, {"data", data}});
  }

  // GET /v1/models/{id}, OpenAI's "retrieve model".
  void get_model(const std::string& name, httplib::Response& res) {
    for (const auto& m : engine_.models())
      if (m.name == name) return send_json(res, 200, model_object(m));
    send_error(res, ServeError(404, "not_found_error", "the model '" + name + "' does not exist", "model"));
  }

  static json parse_object(const httplib::Request& req) {
    try {
      auto body = json::parse(req.body);
      if (body.is_object()) return body;
    } catch (const json::exception&) {
    }
    throw ServeError(400, "invalid_request_error", "the body must be a JSON object", "");
  }

  static std::string string_field(const json& body, const char* key) {
    auto it = body.find(key);
    if (it == body.end() || !it->is_string() || it->get<std::string>().empty())
      throw ServeError(400, "invalid_request_error", std::string(key) + " must be a non-empty string", key);
    return it->get<std::string>();
  }

  void require_runtime_loading() const {
    if (!options_.allow_runtime_loading)
      throw ServeError(403, "permission_error",
                       "loading and unloading variants at run time is off (start dz-serve with "
                       "--allow-runtime-loading)",
                       "");
  }

  void load_delta(const httplib::Request& req, httplib::Response& res) {
    try {
      require_runtime_loading();
      auto body = parse_object(req);
      const auto name = string_field(body, "name"), path = string_field(body, "path");
      engine_.add_variant(name, resolve_runtime_delta(path, options_.delta_roots));
      send_json(res, 200, {{"name", name}, {"path", path}, {"status", "registered"}});
    } catch (const ServeError& e) {
      send_error(res, e);
    }
  }

  void unload_delta(const httplib::Request& req, httplib::Response& res) {
    try {
      require_runtime_loading();
      const auto name = string_field(parse_object(req), "name");
      engine_.remove_variant(name);
      send_json(res, 200, {{"name", name}, {"status", "unloaded"}});
    } catch (const ServeError& e) {
      send_error(res, e);
    }
  }

  std::vector<std::int64_t> prompt_tokens(const CompletionParams& p, std::size_t i) const {
    if (!p.chat && !p.prompts[i].tokens.empty()) return p.prompts[i].tokens;
    std::string text = p.chat ? "" : *p.prompts[i].text;
    bool special = true;  // the tokenizer's own template adds <s>; a chat template writes its own
    if (p.chat) {
      if (const auto* chat = engine_.chat_template()) {
        text = render_chat(*chat, p.messages);
        special = false;
      } else {
        text = plain_chat_prompt(p.messages);
      }
    }
    auto ids = engine_.tokenizer().encode(text, special);
    return {ids.begin(), ids.end()};
  }

  json choice(const CompletionParams& p, std::size_t index, const std::string& text, const json& finish,
              bool delta_form) const {
    if (!p.chat) return {{"index", index}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}};
    if (delta_form) {
      json delta = json::object();
      if (!text.empty()) delta["content"] = text;
      return {{"index", index}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish}};
    }
    return {{"index", index},
            {"message", {{"role", "assistant"}, {"content", text}}},
            {"logprobs", nullptr},
            {"finish_reason", finish}};
  }

  json envelope(const CompletionParams& p, const std::string& id, bool chunk) const {
    const char* object = p.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return {{"id", id},
            {"object", object},
            {"created", static_cast<std::int64_t>(std::time(nullptr))},
            {"model", p.model},
            {"system_fingerprint", nullptr}};
  }

  // The tokens generated, the end-of-sequence token included as OpenAI and
  // vLLM count it (the engine ends with "stop" only at one; a stop string is
  // the text's own).
  static std::int64_t completion_tokens(const TextStream& text, const RequestStream::Update& last) {
    return text.tokens() + (last.finish_reason == "stop" && !text.stopped() ? 1 : 0);
  }

  // The prompt as echo returns it: the text as sent, or token ids decoded.
  std::string echo_text(const CompletionParams& p, std::size_t i, const std::vector<std::int64_t>& prompt) const {
    if (p.prompts[i].text) return *p.prompts[i].text;
    std::vector<std::int32_t> ids;
    for (auto t : prompt)
      if (t >= 0 && t < engine_.tokenizer().vocab_size()) ids.push_back(static_cast<std::int32_t>(t));
    return engine_.tokenizer().decode(ids, /*skip_special_tokens=*/false);
  }

  // Whether echo's text shows the prompt's first token: not the <s> the
  // tokenizer put before a text prompt (so text offsets count what is shown).
  bool echo_shows_first_token(const CompletionParams& p, std::size_t i, const std::vector<std::int64_t>& prompt) const {
    return !(p.prompts[i].text && !prompt.empty() && prompt[0] >= 0 && prompt[0] < engine_.tokenizer().vocab_size() &&
             engine_.tokenizer().is_special(static_cast<std::int32_t>(prompt[0])));
  }

  static json usage(std::int64_t prompt, std::int64_t completion) {
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  }

  // One sequence a request generates: its prompt, the engine's stream of
  // it, its text and log-probabilities, and (not streaming) what it produced.
  struct Sequence {
    std::size_t prompt = 0;  ///< which of the request's prompts (0 for a chat)
    std::vector<std::int64_t> prompt_ids;
    std::shared_ptr<RequestStream> stream;
    std::shared_ptr<TextStream> text;
    std::shared_ptr<LogprobsWriter> logprobs;  ///< when the request asked for them
    std::string out;                           ///< not streaming: the text, tokens and log-probabilities so far
    std::vector<std::int64_t> tokens;
    std::vector<model::TokenLogprobs> token_logprobs, prompt_logprobs;
    double cumulative_logprob = 0;  ///< of the tokens the text took: best_of's ranking
    RequestStream::Update last;
    bool done = false;
  };

  // Tokens of update `u` the text took (up to a stop string's last).
  static std::size_t taken(const RequestStream::Update& u, const TextStream& text, std::int64_t before) {
    return std::min({u.tokens.size(), u.logprobs.size(), static_cast<std::size_t>(text.tokens() - before)});
  }

  GenerationRequest generation_request(const CompletionParams& p, std::vector<std::int64_t> prompt) const {
    GenerationRequest g;
    g.model = p.model;
    g.prompt = std::move(prompt);
    // A chat without a limit may fill the context (at least one token, so that a
    // prompt that fills it alone is refused for that).
    // Echo with max_tokens 0 scores the prompt: one token is generated and dropped.
    g.max_tokens = p.max_tokens > 0 ? p.max_tokens
                   : p.echo
                       ? 1
                       : std::max<std::int64_t>(1, engine_.max_context() - static_cast<std::int64_t>(g.prompt.size()));
    g.sampling.temperature = p.temperature;
    g.sampling.top_p = p.top_p;
    g.sampling.frequency_penalty = p.frequency_penalty;
    g.sampling.presence_penalty = p.presence_penalty;
    g.sampling.logit_bias = p.logit_bias;
    // best_of ranks its sequences by their log-probability, asked for or not.
    g.logprobs = p.best_of > p.n ? std::max<std::int64_t>(p.logprobs, 0) : p.logprobs;
    g.prompt_logprobs = p.echo && p.logprobs >= 0;
    return g;
  }

  // Every sequence of the request submitted: best_of per prompt, each with
  // its own seed (the request's seed for the first, so that n = 1 is as before).
  std::vector<Sequence> start(const CompletionParams& p) {
    std::vector<Sequence> seqs;
    const std::size_t prompts = p.chat ? 1 : p.prompts.size();
    const std::uint64_t seed = p.seed ? *p.seed : std::random_device{}();
    try {
      for (std::size_t i = 0; i < prompts; ++i) {
        const auto ids = prompt_tokens(p, i);
        for (std::int64_t j = 0; j < p.best_of; ++j) {
          Sequence s;
          s.prompt = i;
          s.prompt_ids = ids;
          auto g = generation_request(p, ids);
          g.sampling.seed = seed + i * static_cast<std::uint64_t>(p.best_of) + static_cast<std::uint64_t>(j);
          s.stream = engine_.submit(std::move(g));
          s.text = std::make_shared<TextStream>(engine_.tokenizer(), ids, p.stop);
          if (p.logprobs >= 0) s.logprobs = std::make_shared<LogprobsWriter>(engine_.tokenizer(), p.chat);
          seqs.push_back(std::move(s));
        }
      }
    } catch (...) {
      for (auto& s : seqs) s.stream->cancel();
      throw;
    }
    return seqs;
  }

  // What one update of a sequence adds: its text, and the tokens the text
  // took with their log-probabilities (when the request asked for them).
  struct Piece {
    std::string text;
    std::vector<std::int64_t> tokens;
    std::vector<model::TokenLogprobs> logprobs;
  };

  // Reads a sequence's next update: its piece; `s.done` says whether it ended.
  static Piece advance(Sequence& s, std::chrono::milliseconds wait) {
    auto u = s.stream->wait(wait);
    for (auto& l : u.prompt_logprobs) s.prompt_logprobs.push_back(std::move(l));
    const auto before = s.text->tokens();
    Piece piece{s.text->push(u.tokens), {}, {}};
    const auto n = static_cast<std::ptrdiff_t>(taken(u, *s.text, before));
    for (std::ptrdiff_t k = 0; k < n; ++k) s.cumulative_logprob += u.logprobs[static_cast<std::size_t>(k)].logprob;
    if (s.logprobs) {
      piece.tokens.assign(u.tokens.begin(), u.tokens.begin() + n);
      piece.logprobs.assign(u.logprobs.begin(), u.logprobs.begin() + n);
    }
    if (s.text->stopped()) s.stream->cancel();
    s.done = u.finished || s.text->stopped();
    if (s.done && u.error.empty()) piece.text += s.text->flush();
    if (s.done) s.last = std::move(u);
    return piece;
  }

  static std::string finish_reason(const Sequence& s, bool score_only = false) {
    return !score_only && (s.text->stopped() || s.last.finish_reason == "stop") ? "stop" : "length";
  }

  // Prompt tokens of the request (each prompt once, as OpenAI counts them) and the tokens of `returned`.
  json request_usage(const CompletionParams& p, const std::vector<Sequence>& seqs,
                     const std::vector<const Sequence*>& returned, bool score_only) const {
    std::int64_t prompt = 0, completion = 0;
    for (std::size_t i = 0; i < seqs.size(); i += static_cast<std::size_t>(p.best_of))
      prompt += seqs[i].stream->prompt_tokens();
    if (!score_only)
      for (const Sequence* s : returned) completion += completion_tokens(*s->text, s->last);
    return usage(prompt, completion);
  }

  void complete(const httplib::Request& req, httplib::Response& res, bool chat) {
    CompletionParams p;
    std::vector<Sequence> seqs;
    try {
      p = parse_completion_request(req.body, chat);
      seqs = start(p);
    } catch (const ServeError& e) {
      // Every refusal counts, those of the request's parsing too.
      engine_.metrics().add("dz_requests_rejected", 1, {{"status", std::to_string(e.status())}});
      send_error(res, e);
      return;
    }
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
    if (p.stream) {
      stream_reply(p, id, std::move(seqs), res);
      return;
    }
    for (Sequence& s : seqs) {  // the engine runs them all at once; each is read to its end in turn
      while (!s.done) {
        Piece piece = advance(s, std::chrono::milliseconds(200));
        s.out += piece.text;
        s.tokens.insert(s.tokens.end(), piece.tokens.begin(), piece.tokens.end());
        s.token_logprobs.insert(s.token_logprobs.end(), piece.logprobs.begin(), piece.logprobs.end());
      }
    }
    for (const Sequence& s : seqs) {
      if (s.last.error.empty()) continue;
      send_json(res, s.last.error_status, error_body(s.last.error, s.last.error_type, "", s.last.error_code));
      return;
    }
    // Per prompt, the n of its best_of sequences with the highest log-probability, in that order.
    std::vector<const Sequence*> returned;
    for (std::size_t first = 0; first < seqs.size(); first += static_cast<std::size_t>(p.best_of)) {
      std::vector<const Sequence*> group;
      for (std::int64_t j = 0; j < p.best_of; ++j) group.push_back(&seqs[first + static_cast<std::size_t>(j)]);
      if (p.best_of > p.n)
        std::stable_sort(group.begin(), group.end(), [](const Sequence* a, const Sequence* b) {
          return a->cumulative_logprob > b->cumulative_logprob;
        });
      returned.insert(returned.end(), group.begin(), group.begin() + p.n);
    }
    const bool score_only = p.echo && p.max_tokens == 0;
    auto body = envelope(p, id, false);
    body["choices"] = json::array();
    for (std::size_t k = 0; k < returned.size(); ++k) {
      const Sequence& s = *returned[k];
      const std::string out = score_only ? "" : s.out;
      auto c =
          choice(p, k, p.echo ? echo_text(p, s.prompt, s.prompt_ids) + out : out, finish_reason(s, score_only), false);
      if (s.logprobs) {
        const std::span<const std::int64_t> tokens = score_only ? std::span<const std::int64_t>() : s.tokens;
        const std::span<const model::TokenLogprobs> lps =
            score_only ? std::span<const model::TokenLogprobs>() : s.token_logprobs;
        c["logprobs"] = p.echo ? s.logprobs->write_echo(s.prompt_ids, s.prompt_logprobs, tokens, lps,
                                                        echo_shows_first_token(p, s.prompt, s.prompt_ids))
                               : s.logprobs->write(tokens, lps);
      }
      body["choices"].push_back(std::move(c));
    }
    body["usage"] = request_usage(p, seqs, returned, score_only);
    send_json(res, 200, body);
  }

  // Server-sent events: each sequence's pieces as they come, under its choice index.
  void stream_reply(const CompletionParams& p, const std::string& id, std::vector<Sequence> sequences,
                    httplib::Response& res) {
    auto seqs = std::make_shared<std::vector<Sequence>>(std::move(sequences));
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, p, id, seqs, first = true](std::size_t, httplib::DataSink& sink) mutable {
          auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          // With include_usage every chunk but the last carries "usage": null (OpenAI's shape).
          auto chunk_of = [&](json choice_json) {
            auto chunk = envelope(p, id, true);
            if (p.include_usage) chunk["usage"] = nullptr;
            chunk["choices"] = json::array({std::move(choice_json)});
            return chunk;
          };
          if (first && p.chat) {
            for (std::size_t k = 0; k < seqs->size(); ++k)
              if (!write(sse(chunk_of({{"index", k},
                                       {"delta", {{"role", "assistant"}, {"content", ""}}},
                                       {"logprobs", nullptr},
                                       {"finish_reason", nullptr}}))))
                return false;
          }
          first = false;
          const auto wait = std::chrono::milliseconds(seqs->size() == 1 ? 100 : 10);
          auto last_write = std::chrono::steady_clock::now();
          while (true) {
            bool all_done = true, wrote = false;
            for (std::size_t k = 0; k < seqs->size(); ++k) {
              Sequence& s = (*seqs)[k];
              if (s.done) continue;
              const Piece piece = advance(s, wait);
              if (!piece.text.empty() || !piece.tokens.empty()) {
                auto c = choice(p, k, piece.text, nullptr, true);
                if (!piece.tokens.empty()) c["logprobs"] = s.logprobs->write(piece.tokens, piece.logprobs);
                if (!write(sse(chunk_of(std::move(c))))) return false;
                wrote = true;
              }
              if (!s.done) {
                all_done = false;
                continue;
              }
              if (!s.last.error.empty()) {
                for (auto& other : *seqs) other.stream->cancel();
                const bool sent = write(sse(error_body(s.last.error, s.last.error_type, "", s.last.error_code))) &&
                                  write("data: [DONE]\n\n");
                if (sent) sink.done();
                return sent;
              }
              if (!write(sse(chunk_of(choice(p, k, "", finish_reason(s), true))))) return false;
              wrote = true;
            }
            if (wrote) {
              last_write = std::chrono::steady_clock::now();
            } else if (!all_done && std::chrono::steady_clock::now() - last_write > std::chrono::seconds(1)) {
              // A comment line: finds clients that went away while the request waits.
              if (!write(": waiting\n\n")) return false;
              last_write = std::chrono::steady_clock::now();
            }
            if (!all_done) continue;
            if (p.include_usage) {
              auto tail = envelope(p, id, true);
              tail["choices"] = json::array();
              std::vector<const Sequence*> all;
              for (const auto& s : *seqs) all.push_back(&s);
              tail["usage"] = request_usage(p, *seqs, all, false);
              if (!write(sse(tail))) return false;
            }
            if (!write("data: [DONE]\n\n")) return false;
            sink.done();
            return true;
          }
        },
        [seqs](bool success) {
          if (!success)
            for (auto& s : *seqs) s.stream->cancel();  // the client went away: free the slots
        });
  }

  Engine& engine_;
  const HttpOptions& options_;
  std::atomic<std::uint64_t> next_id_{1};
  std::int64_t started_ = static_cast<std::int64_t>(std::time(nullptr));
};

}  // namespace

std::filesystem::path resolve_runtime_delta(const std::string& path, const std::vector<std::filesystem::path>& roots) {
  namespace fs = std::filesystem;
  const fs::path given(path);
  for (const fs::path& root : roots) {
    std::error_code ec;
    const fs::path real = fs::canonical(given.is_absolute() ? given : root / given, ec);
    if (ec || !fs::is_regular_file(real, ec) || ec) continue;
    // Inside the root, component by component (links already followed).
    const auto [end, _] = std::mismatch(root.begin(), root.end(), real.begin(), real.end());
    if (end == root.end()) return real;
  }
  throw ServeError(400, "invalid_request_error", "no delta container '" + path + "' in the server's delta folders",
                   "path");
}

namespace {

void check_http_options(const HttpOptions& options) {
  if (options.port < 0 || options.port > 65535) throw UsageError("--port must be 0 to 65535");
  if (options.threads < 1) throw UsageError("--http-threads must be positive");
  if (options.max_connections_per_client < 0) throw UsageError("--max-connections-per-client must be 0 or positive");
  if (!(options.request_timeout_s >= 0)) throw UsageError("--request-timeout must be 0 or positive");
}

// Binds --host:--port (any free port for 0) and writes --port-file; the port bound.
int bind_server(httplib::Server& server, const HttpOptions& options) {
  int port = options.port;
  if (port == 0) {
    port = server.bind_to_any_port(options.host);
    if (port < 0) throw IoError("cannot listen on " + options.host);
  } else if (!server.bind_to_port(options.host, port)) {
    throw IoError("cannot listen on " + options.host + ":" + std::to_string(port) +
                  " (in use, or not an address of this machine)");
  }
  if (!options.port_file.empty()) write_file_atomically(options.port_file, std::to_string(port) + "\n");
  return port;
}

// The graceful stop, on the watcher thread once SIGTERM or SIGINT came: no
// new requests, those in flight finish (or are ended at
// --shutdown-timeout), then the server stops; a second signal exits at once.
void drain_and_stop(Engine& engine, httplib::Server& server, const HttpOptions& options,
                    const std::atomic<bool>& listening_done) {
  using namespace std::chrono;
  const auto tick = milliseconds(20);
  while (!listening_done && g_signal == 0) std::this_thread::sleep_for(tick);
  if (listening_done) return;
  const int sig = g_signal.load();
  spdlog::info("signal {}: no new requests; finishing those in flight (at most {:g} s; a second signal exits now)", sig,
               options.shutdown_timeout_s);
  engine.begin_shutdown();
  const auto deadline = steady_clock::now() + duration_cast<steady_clock::duration>(
                                                  duration<double>(std::max(0.0, options.shutdown_timeout_s)));
  auto exit_on_second_signal = [&] {
    if (g_signals.load() < 2) return;
    spdlog::warn("second signal: exiting without finishing the requests in flight");
    spdlog::default_logger()->flush();
    std::_Exit(128 + sig);
  };
  while (!engine.idle() && steady_clock::now() < deadline) {
    exit_on_second_signal();
    std::this_thread::sleep_for(tick);
  }
  if (!engine.idle()) {
    spdlog::warn("--shutdown-timeout reached: ending the requests still in flight");
    engine.abort_all("the server is shutting down: the request was ended at its --shutdown-timeout");
    // The scheduler ends them after the step under way.
    while (!engine.idle()) {
      exit_on_second_signal();
      std::this_thread::sleep_for(tick);
    }
  }
  // Stops accepting; listen_after_bind() joins the worker threads, so the
  // responses of finished requests are still written, to clients that read
  // them within a second.
  server.stop();
  const auto stopped = steady_clock::now();
  while (!listening_done && steady_clock::now() - stopped < seconds(1)) {
    exit_on_second_signal();
    std::this_thread::sleep_for(tick);
  }
  if (!listening_done) {
    spdlog::warn("connections still open a second after stopping (clients not reading): exiting");
    spdlog::default_logger()->flush();
    std::_Exit(0);
  }
}

}  // namespace

int serve_http(Engine& engine, const HttpOptions& options) {
  check_http_options(options);
  ConnectionGuard guard(options.max_connections_per_client, options.request_timeout_s);
  GuardedServer server(guard);
  const int threads = options.threads;
  // Threads on demand, up to --http-threads: a stalled or slow connection
  // holds one, and the others (and /health) still find one free.
  server.new_task_queue = [threads] {
    const auto max = static_cast<std::size_t>(threads);
    return new GrowingThreadPool(std::min<std::size_t>(8, max), max);
  };
  server.set_payload_max_length(options.max_body_bytes);
  server.set_read_timeout(30, 0);
  server.set_write_timeout(30, 0);
  Frontend frontend(engine, options);
  frontend.on_arrival = [&guard](const httplib::Request& req) { guard.request_arrived(connection_key(req)); };
  frontend.install(server);
  const int port = bind_server(server, options);
  spdlog::info("listening on http://{}:{}", options.host, port);

  g_signal = 0;
  g_signals = 0;
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGPIPE, SIG_IGN);
  std::atomic<bool> listening_done{false};
  std::thread watcher([&] { drain_and_stop(engine, server, options, listening_done); });
  const bool ok = server.listen_after_bind();
  listening_done = true;
  watcher.join();
  if (!ok && g_signal == 0) throw IoError("the HTTP server stopped unexpectedly");
  spdlog::info("stopped");
  return 0;
}

}  // namespace fleet::deltazip
