// dz-serve bench: an open-loop load generator. Requests arrive as a Poisson
// process at --rate for --duration seconds whatever the server's speed (a
// closed loop would hide queueing), each for a variant drawn by popularity,
// each streamed so that the time to the first token is measured.
#include "deltazip/serve/bench_client.h"

#include <atomic>
#include <cmath>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/file_io.h"
#include "common/logging.h"
#include "common/stats.h"

namespace fleet::deltazip {
namespace {

using Clock = std::chrono::steady_clock;

struct Outcome {
  bool ok = false;
  std::string error;
  double ttft = 0, latency = 0;
  std::int64_t tokens = 0;
  std::string model;
};

std::vector<double> popularity_weights(const std::string& spec, std::size_t n) {
  std::vector<double> w(n, 1.0);
  if (spec == "uniform") return w;
  if (spec.rfind("zipf:", 0) == 0) {
    double a = 0;
    try {
      a = std::stod(spec.substr(5));
    } catch (const std::exception&) {
      a = -1;
    }
    if (!(a > 0 && a <= 10)) throw UsageError("--popularity zipf:A needs 0 < A <= 10, got '" + spec + "'");
    for (std::size_t i = 0; i < n; ++i) w[i] = 1.0 / std::pow(static_cast<double>(i + 1), a);
    return w;
  }
  throw UsageError("--popularity must be uniform or zipf:A, not '" + spec + "'");
}

std::vector<std::string> load_prompts(const std::filesystem::path& path) {
  if (path.empty())
    return {"The quick brown fox jumps over the lazy dog.", "Once upon a time there was a small village by the sea.",
            "copy: hello world =", "Write a short note about the weather today.",
            "A list of colours: red, green, blue,"};
  std::vector<std::string> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  if (out.empty()) throw InputError(path.string() + ": no prompt (one per line)");
  return out;
}

// httplib names its errors by kind ("Connection", "Read"), which does not
// tell a user what went wrong.
std::string describe(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "could not connect (nothing listens there, or the host is unreachable)";
    case httplib::Error::ConnectionTimeout:
      return "connecting timed out";
    case httplib::Error::Read:
      return "the connection closed or timed out before the reply ended";
    case httplib::Error::Write:
      return "the connection closed while the request was sent";
    default:
      return httplib::to_string(e);
  }
}

// One streamed completion; TTFT at the first chunk that carries text.
Outcome send_one(const BenchCommand& c, const std::string& model, const std::string& prompt) {
  Outcome o;
  o.model = model;
  const auto start = Clock::now();
  httplib::Client client(c.url);
  client.set_connection_timeout(10, 0);
  client.set_read_timeout(static_cast<time_t>(c.timeout), 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = nlohmann::json{{"model", model},     {"prompt", prompt}, {"max_tokens", c.max_tokens},
                            {"temperature", 0.0}, {"stream", true},   {"stream_options", {{"include_usage", true}}}}
                 .dump();
  std::string buffer, server_error;
  bool first = true;
  req.content_receiver = [&](const char* data, std::size_t size, std::uint64_t, std::uint64_t) {
    buffer.append(data, size);
    for (auto end = buffer.find("\n\n"); end != std::string::npos; end = buffer.find("\n\n")) {
      const auto event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      auto body = nlohmann::json::parse(event.substr(6), nullptr, false);
      if (body.is_discarded()) continue;
      if (body.contains("error")) server_error = body["error"].value("message", "error");
      if (body.contains("usage") && body["usage"].is_object()) o.tokens = body["usage"].value("completion_tokens", 0);
      if (first && body.contains("choices") && !body["choices"].empty() &&
          !body["choices"][0].value("text", "").empty()) {
        o.ttft = std::chrono::duration<double>(Clock::now() - start).count();
        first = false;
      }
    }
    return true;
  };
  auto result = client.send(req);
  o.latency = std::chrono::duration<double>(Clock::now() - start).count();
  if (!result) {
    o.error = "connection: " + describe(result.error());
  } else if (result->status != 200) {
    o.error = "HTTP " + std::to_string(result->status);
  } else if (!server_error.empty()) {
    o.error = "server: " + server_error;
  } else {
    o.ok = true;
    if (first) o.ttft = o.latency;  // nothing but the end (e.g. an immediate end of sequence)
  }
  return o;
}

}  // namespace

BenchResult run_load(const BenchCommand& c) {
  if (c.url.rfind("http://", 0) != 0 && c.url.rfind("https://", 0) != 0)
    throw UsageError("--url must be http://HOST:PORT (or https://), got '" + c.url + "'");
  if (c.variants.empty()) throw UsageError("--variants needs at least one model name");
  if (!(c.rate > 0 && c.rate <= 1e5)) throw UsageError("--rate must be in (0, 100000]");
  if (!(c.duration > 0 && c.duration <= 86400)) throw UsageError("--duration must be in (0, 86400] seconds");
  if (c.max_tokens <= 0) throw UsageError("--max-tokens must be positive");
  if (c.max_in_flight <= 0) throw UsageError("--max-in-flight must be positive");
  const auto weights = popularity_weights(c.popularity, c.variants.size());
  const auto prompts = load_prompts(c.prompts);
  {
    httplib::Client probe(c.url);
    probe.set_connection_timeout(5, 0);
    auto health = probe.Get("/health");
    if (!health) throw InputError("cannot reach " + c.url + ": " + describe(health.error()));
  }
  std::mt19937_64 rng(c.seed);
  std::exponential_distribution<double> gap(c.rate);
  std::discrete_distribution<std::size_t> pick_model(weights.begin(), weights.end());
  std::uniform_int_distribution<std::size_t> pick_prompt(0, prompts.size() - 1);
  struct Arrival {
    double at;
    std::string model, prompt;
  };
  std::vector<Arrival> arrivals;
  for (double t = gap(rng); t < c.duration; t += gap(rng))
    arrivals.push_back({t, c.variants[pick_model(rng)], prompts[pick_prompt(rng)]});
  spdlog::info("{} requests over {:.0f} s at {:.2f}/s, popularity {}", arrivals.size(), c.duration, c.rate,
               c.popularity);

  std::vector<Outcome> outcomes(arrivals.size());
  std::vector<std::thread> threads;
  std::atomic<std::int64_t> in_flight{0};
  const auto start = Clock::now();
  for (std::size_t i = 0; i < arrivals.size(); ++i) {
    std::this_thread::sleep_until(
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i].at)));
    if (in_flight >= c.max_in_flight) {
      outcomes[i].error = "client: more than --max-in-flight requests outstanding";
      continue;
    }
    in_flight++;
    threads.emplace_back([&, i] {
      outcomes[i] = send_one(c, arrivals[i].model, arrivals[i].prompt);
      in_flight--;
    });
  }
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();

  BenchResult r;
  r.requests = static_cast<std::int64_t>(arrivals.size());
  r.elapsed_s = elapsed;
  std::vector<double> ttft, latency;
  for (const auto& o : outcomes) {
    if (!o.ok) {
      r.failed++;
      r.errors[o.error]++;
      continue;
    }
    ttft.push_back(o.ttft);
    latency.push_back(o.latency);
    r.tokens += o.tokens;
  }
  r.completed = static_cast<std::int64_t>(latency.size());
  r.ttft_s = summarize(ttft);
  r.latency_s = summarize(latency);
  return r;
}

nlohmann::json BenchResult::to_json(const BenchCommand& c) const {
  const auto quantiles = [](const Summary& s) {
    return nlohmann::json{{"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"mean", s.mean}};
  };
  return {{"url", c.url},
          {"rate", c.rate},
          {"duration_s", c.duration},
          {"popularity", c.popularity},
          {"variants", c.variants},
          {"max_tokens", c.max_tokens},
          {"requests", requests},
          {"completed", completed},
          {"failed", failed},
          {"elapsed_s", elapsed_s},
          {"throughput_requests_per_s", requests_per_s()},
          {"throughput_tokens_per_s", tokens_per_s()},
          {"ttft_s", quantiles(ttft_s)},
          {"latency_s", quantiles(latency_s)},
          {"errors", errors}};
}

}  // namespace fleet::deltazip
