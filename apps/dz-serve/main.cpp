// dz-serve: serve many compressed fine-tunes of one base model at once over an OpenAI-compatible HTTP API,
// and load-test such a server.
#include "cli/cli.h"
#include "deltazip/serve/bench_client.h"
#include "deltazip/serve/torch/serve_command.h"
#include "devices/device_info.h"
#include "dz-serve/bench_command.h"
#include "fleet/config.h"

namespace {

namespace dz = fleet::deltazip;

#if FLEET_WITH_TORCH
// What `serve` fills from the command line; lives until the tool runs.
struct ServeArgs {
  dz::ServeCommand serve;
  std::string base;
};

// The model, its variants and the HTTP side of the server.
void add_server_options(CLI::App* sc, ServeArgs& args) {
  dz::ServeCommand& serve = args.serve;
  std::string& base = args.base;
  sc->add_option("--base", base, "Base model folder (Hugging Face layout, with tokenizer.json)")->required();
  sc->add_option("--base-name", serve.engine.base_name,
                 "Model name of the base in the API (default: the folder's name)");
  sc->add_option("--delta", serve.deltas, "A variant: NAME=FILE.h5 (repeatable)");
  sc->add_option("--delta-dir", serve.delta_dir, "Serve every FILE.h5 in this folder, named FILE");
  sc->add_option("--host", serve.http.host, "Address to listen on")->capture_default_str();
  sc->add_option("--api-key", serve.http.api_key,
                 "Require 'Authorization: Bearer KEY' on every endpoint but /health and /metrics (prefer the "
                 "environment variable: a command line is visible to other users)")
      ->envname("DZ_SERVE_API_KEY");
  sc->add_flag("--allow-runtime-loading", serve.http.allow_runtime_loading,
               "Enable POST /v1/load_delta and /v1/unload_delta; loads read only files inside --delta-dir");
  sc->add_option("--port", serve.http.port, "Port (0: any free port; see --port-file)")
      ->capture_default_str()
      ->check(fleet::in_range(0, 65535));
  sc->add_option("--port-file", serve.http.port_file, "Write the bound port into this file once listening")
      ->transform(fleet::output_path());
}

// The engine: its mode, batching, memory and device.
void add_engine_options(CLI::App* sc, dz::ServeCommand& serve) {
  sc->add_option("--mode", serve.mode,
                 "delta (base + packed deltas, mixed batches), swap (one reconstructed fine-tune resident at a "
                 "time) or full (every variant resident as a full model)")
      ->capture_default_str();
  sc->add_option("--max-batch", serve.engine.max_batch, "Sequences running at once (KV-cache slots)")
      ->capture_default_str()
      ->check(fleet::in_range(1, 4096));
  sc->add_option("--max-connections-per-client", serve.http.max_connections_per_client,
                 "Connections one client address may hold open at once; one more gets 429 (0: no limit)")
      ->capture_default_str()
      ->check(fleet::in_range(0, 1e6));
  sc->add_option("--request-timeout", serve.http.request_timeout_s,
                 "Seconds a request's headers and body may take to arrive; a connection past it is closed "
                 "(0: no limit but the 30 s per read)")
      ->capture_default_str()
      ->check(fleet::in_range(0, 1e6));
  sc->add_option("--max-tokens-per-step", serve.engine.max_tokens_per_step,
                 "Tokens per scheduler step: one per decoding sequence, the rest prompt chunks")
      ->capture_default_str()
      ->check(fleet::in_range(1, 1e6));
  sc->add_option("--max-context", serve.engine.max_context,
                 "Tokens per sequence, prompt included (0: the model's limit, at most 4096)")
      ->capture_default_str()
      ->check(fleet::in_range(0, 1e6));
  sc->add_option("--max-queue", serve.engine.max_queue, "Waiting requests before 429")
      ->capture_default_str()
      ->check(fleet::in_range(1, 1e7));
  sc->add_option("--max-variants-per-batch", serve.engine.max_variants_per_batch,
                 "Distinct variants running at once in delta and full modes (0: no limit; -1: the default, 4); "
                 "later requests for running variants go ahead of one over the cap, a batch's worth at most")
      ->capture_default_str()
      ->check(fleet::in_range(-1, 1e6));
  sc->add_option("--delta-memory", serve.delta_memory,
                 "Bytes of resident deltas, e.g. 512M or 4G (0: no limit); least recently used ones are dropped")
      ->capture_default_str();
  sc->add_option("--max-body", serve.http.max_body_bytes, "Largest request body in bytes (larger: 413)")
      ->capture_default_str()
      ->check(fleet::in_range(1024, 1e9));
  sc->add_option("--shutdown-timeout", serve.http.shutdown_timeout_s,
                 "Seconds after SIGTERM/SIGINT that requests in flight may take; then they end with an error and "
                 "the server exits (a second signal exits at once)")
      ->capture_default_str()
      ->check(fleet::in_range(0, 1e6));
  sc->add_option("--http-threads", serve.http.threads,
                 "Connections served at once (each stream, and each connection still sending its request, holds "
                 "one; threads start as connections need them)")
      ->capture_default_str()
      ->check(fleet::in_range(1, 4096));
  sc->add_option("--device", serve.engine.device,
                 "cpu, cuda (a GPU, in a build with CUDA libtorch; delta mode runs the CUDA SBMM kernel) or auto")
      ->capture_default_str();
  fleet::add_threads_option(sc, &serve.threads);
}

void add_serve(fleet::Tool& tool, ServeArgs& args) {
  CLI::App* sc =
      tool.add_command("serve", "Start the server (SIGTERM or Ctrl-C: finish requests in flight, then stop)", [&args] {
        args.serve.engine.base = args.base;
        return dz::run_serve(args.serve);
      });
  add_server_options(sc, args);
  add_engine_options(sc, args.serve);
}
#endif

// What `bench` fills from the command line; lives until the tool runs.
struct BenchArgs {
  dz::BenchCommand bench;
  bool json = false;
};

void add_bench(fleet::Tool& tool, BenchArgs& args) {
  dz::BenchCommand& bench = args.bench;
  CLI::App* bc = tool.add_command("bench",
                                  "Open-loop load test of a running server: Poisson arrivals, streamed "
                                  "completions; throughput, TTFT and latency percentiles",
                                  [&args] { return dz::run_bench(args.bench, args.json); });
  bc->add_option("--url", bench.url, "Server address, http://HOST:PORT")->capture_default_str();
  bc->add_option("--variants", bench.variants, "Model names to request; popularity rank is the order given")
      ->required()
      ->delimiter(',');
  bc->add_option("--rate", bench.rate, "Requests per second (Poisson arrivals)")
      ->capture_default_str()
      ->check(fleet::in_range(1e-6, 1e5));
  bc->add_option("--duration", bench.duration, "Seconds of arrivals")
      ->capture_default_str()
      ->check(fleet::in_range(1e-3, 86400));
  bc->add_option("--popularity", bench.popularity, "uniform or zipf:A (A > 0)")->capture_default_str();
  bc->add_option("--prompts", bench.prompts, "Text file, one prompt per line (default: built-in sentences)");
  bc->add_option("--max-tokens", bench.max_tokens, "Tokens to generate per request")
      ->capture_default_str()
      ->check(fleet::in_range(1, 1e6));
  bc->add_option("--seed", bench.seed, "Seed of arrivals, variants and prompts")
      ->capture_default_str()
      ->check(fleet::in_range(0, 9.2e18));
  bc->add_option("--timeout", bench.timeout, "Seconds one request may take")
      ->capture_default_str()
      ->check(fleet::in_range(1, 86400));
  bc->add_option("--max-in-flight", bench.max_in_flight, "Outstanding requests before arrivals count as errors")
      ->capture_default_str()
      ->check(fleet::in_range(1, 1e5));
  fleet::add_json_flag(bc, &args.json);
}

}  // namespace

int main(int argc, char** argv) {
  fleet::Tool tool("dz-serve",
                   "Serve many compressed fine-tunes (deltas written by dz-compress) of one resident base model at "
                   "once over an OpenAI-compatible HTTP API, and load-test such a server.");
  tool.set_version_details(fleet::devices::version_details);
#if FLEET_WITH_TORCH
  ServeArgs serve;
  add_serve(tool, serve);
#endif
  BenchArgs bench;
  add_bench(tool, bench);
  return tool.run(argc, argv);
}
