#include "sailor/runtime/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/chrome_trace.h"
#include "common/elapsed.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/logging.h"
#include "common/output_check.h"
#include "common/progress.h"
#include "common/safetensors.h"
#include "model/device.h"
#include "model/llama.h"
#include "model/tensor_bridge.h"
#include "model/tensor_parallel.h"
#include "model/tokenizer.h"
#include "model/torch_compat.h"
#include "model/training_parts.h"
#include "sailor/pipeline_schedule.h"
#include "sailor/runtime/checkpoint.h"
#include "sailor/runtime/communicator.h"
#include "sailor/runtime/control_store.h"
#include "sailor/runtime/elastic.h"
#include "sailor/runtime/elastic_worker.h"
#include "sailor/runtime/gpu_energy.h"
#include "sailor/runtime/layout.h"
#include "sailor/runtime/stage_runner.h"
#include "sailor/runtime/trainer_state.h"
#include "sailor/runtime/world.h"

namespace fleet::sailor::runtime {
namespace {

// SIGTERM under the elastic launcher: leave at the next step boundary.
std::atomic<int> g_leave_requested{0};
extern "C" void request_leave(int) { g_leave_requested = 1; }

namespace fs = std::filesystem;
using model::TrainOptions;

// A content hash of a model folder's config and weight files, 8 bytes at a
// time: every rank reads the files (mapped, not loaded) to check it trains
// the same model as rank 0, whichever layers it keeps.
std::uint64_t model_files_fingerprint(const fs::path& dir) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  std::vector<fs::path> files{dir / "config.json"};
  for (const auto& f : SafetensorsCheckpoint(model::model_weights_path(dir)).files()) files.push_back(f);
  for (const auto& file : files) {
    MappedFile map(file);
    const auto bytes = map.bytes();
    std::size_t i = 0;
    for (; i + 8 <= bytes.size(); i += 8) {
      std::uint64_t w;
      std::memcpy(&w, bytes.data() + i, 8);
      mix(w);
    }
    for (; i < bytes.size(); ++i) mix(static_cast<std::uint64_t>(bytes[i]));
    mix(bytes.size());
  }
  return h;
}

// What a run resumes from, or starts with.
struct RunState {
  TrainOptions options;
  std::vector<fs::path> data_files;
  std::int64_t start_step = 0;
  fs::path source;
  nlohmann::json history = nlohmann::json::array();
  std::optional<std::uint64_t> expected_fingerprint;
};

// `owner`: this process claims the outputs (see output_claim.h): rank 0 of a
// plain job; in an elastic job the launcher or controller holds them.
RunState read_run_state(const TrainJob& job, bool owner) {
  RunState s;
  s.options = job.options;
  s.data_files = job.data;
  s.source = job.model;
  OutputCheck reports;
  if (!owner) reports.without_claim();
  if (!job.metrics.empty()) reports.file(job.metrics, "--metrics");
  if (!job.trace.empty()) reports.file(job.trace, "--trace");
  reports.check(Existing::kReplace);
  if (!job.resume) {
    s.options.validate();
    if (has_trainer_state(job.output) && !job.force)
      throw UsageError(job.output.string() +
                       " already holds a training run; use --resume, --force or another output folder");
    OutputCheck check;
    if (!owner) check.without_claim();
    check.input(job.model, "--model");
    for (const auto& f : s.data_files) check.input(f, "--data");
    check.folder(job.output, "--output").check(Existing::kNeedsForce, job.force);
    return s;
  }
  if (owner) OutputCheck().folder(job.output, "--output").check(Existing::kReplace);
  auto doc = read_trainer_state(job.output);
  auto state = doc.root();
  s.options = TrainOptions::from_json(state.at("options"));
  s.start_step = state.get<std::int64_t>("step");
  if (s.start_step < 0 || s.start_step > s.options.steps)
    state.at("step").fail("step " + std::to_string(s.start_step) + " is outside the run's 0 to " +
                          std::to_string(s.options.steps) + " steps: the state is damaged");
  if (owner) verify_checkpoint_files(job.output, state.raw());
  s.data_files.clear();
  for (const auto& f : state.get<std::vector<std::string>>("data")) s.data_files.emplace_back(f);
  s.expected_fingerprint = state.get<std::uint64_t>("data_fingerprint");
  s.history = state.at("history").raw();
  s.source = job.output;
  return s;
}

// The plan a generation trains with: the job's --plan file, or the plan the
// elastic controller published for the generation (kept in memory: the
// controller may run on another machine, and a file would outlive a worker
// that becomes a spare or fails).
struct PlanSource {
  fs::path file;
  std::optional<nlohmann::json> published;
  std::string published_name;

  bool empty() const { return file.empty() && !published; }
  Plan load(const JobSpec& spec) const {
    if (!published) return load_plan(file, spec);
    const JsonDocument doc(*published, published_name);
    return plan_from_json(doc.root(), spec);
  }
};

// The layout of this job: the plan's, or data parallelism over the ranks.
// Fixes options.global_batch for a new run; a resumed run keeps its own.
Layout make_layout(const PlanSource& plan_source, TrainOptions& options, int model_layers, int world_size) {
  Layout layout;
  if (!plan_source.empty()) {
    JobSpec spec;
    spec.global_batch = static_cast<int>(options.global_batch);
    const Plan plan = plan_source.load(spec);
    layout = layout_from_plan(plan, model_layers);
    if (options.global_batch == 0) options.global_batch = layout.global_batch;
    if (layout.global_batch != options.global_batch)
      throw UsageError(
          fmt::format("the plan's global batch is {} sequences but the checkpoint trains with {}: "
                      "a resumed run keeps its global batch",
                      layout.global_batch, options.global_batch));
    // The checkpoint records the plan's micro-batching, so a run resumed
    // without a plan splits the batch the same way.
    options.batch_size = layout.mbs;
    options.grad_accumulation = layout.micro_batches(0);
  } else {
    const std::int64_t per_replica = options.batch_size * options.grad_accumulation;
    if (options.global_batch == 0) options.global_batch = per_replica * world_size;
    layout = data_parallel_layout(world_size, model_layers, options.batch_size, options.global_batch);
  }
  check_world_size(layout, world_size);
  return layout;
}

// Refuses to start when the ranks disagree on the model, data or options:
// every rank raises the same error instead of training different things.
void check_same_inputs(Communicator& comm, const std::string& model_id, const std::string& data_id,
                       const std::string& options_id) {
  const auto all = comm.all_gather_strings("inputs", model_id + "\n" + data_id + "\n" + options_id);
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    auto field = [](const std::string& s, int i) {
      std::size_t begin = 0;
      for (int k = 0; k < i; ++k) begin = s.find('\n', begin) + 1;
      return s.substr(begin, s.find('\n', begin) - begin);
    };
    const char* what[] = {"model files", "training data", "options or plan"};
    for (int i = 0; i < 3; ++i)
      if (field(all[r], i) != field(all[0], i))
        throw UsageError(
            fmt::format("rank {}'s {} differ from rank 0's (fingerprint {} vs {}): every worker must "
                        "read the same inputs",
                        r, what[i], field(all[r], i), field(all[0], i)));
  }
}

// Keeps what a worker holds at the end of a generation: its parameters and
// optimizer moments as of the last committed step (its slices under tensor
// parallelism), for the next generation's hand-over.
HeldState hold_state(const StageRunner& runner, const NamedTensors& moments, std::int64_t step,
                     const nlohmann::json& history) {
  HeldState held;
  held.history = history;
  held.step = step;
  for (const auto* list : {&runner.parameters(), &moments})
    for (const auto& [name, t] : *list) {
      held.tensors[name] = t.detach();
      if (const auto spec = runner.slice_spec(name); spec.dim >= 0) held.slices[name] = spec;
    }
  return held;
}

// The traced step of every rank in one Perfetto file, one row per rank laid
// out like `sailor-plan simulate --trace` (row stage*1000 + replica). Times
// are each rank's own, from the start of its step.
void write_trace(const fs::path& path, Communicator* comm, const Layout& layout, int rank,
                 const nlohmann::json& spans) {
  std::vector<std::string> all{spans.dump()};
  if (comm) all = comm->all_gather_strings("trace", spans.dump());
  if (rank != 0) return;
  ChromeTrace trace;
  trace.set_process_name(1, "one training iteration (measured, 1F1B)");
  for (std::size_t r = 0; r < all.size(); ++r) {
    const auto place = layout.place(static_cast<int>(r));
    const int tid = place.stage * 1000 + place.replica;
    const auto& st = layout.stages[static_cast<std::size_t>(place.stage)];
    trace.set_thread_name(
        1, tid,
        fmt::format("stage {} replica {} (rank {}, layers [{}, {}))", place.stage, place.replica, r, st.first, st.last),
        tid);
    for (const auto& span : nlohmann::json::parse(all[r]))
      trace.add_complete(1, tid, span.at("name"), span.at("cat"), span.at("ts"), span.at("dur"));
  }
  trace.write(path);
}

}  // namespace

namespace {

// The plan's predicted energy per step (the `predictions` that `sailor-plan
// search -o` writes), if it has one: the metrics' figure without a meter.
std::optional<double> predicted_step_energy(const std::filesystem::path& plan) {
  if (plan.empty()) return std::nullopt;
  const JsonDocument doc = load_json_file(plan);
  const auto predictions = doc.root().find("predictions");
  if (!predictions) return std::nullopt;
  const auto joules = predictions->find("energy_j_per_iteration");
  if (!joules || joules->is_null()) return std::nullopt;
  return joules->as<double>();
}

// Where a generation's training starts: the step and the files its state
// comes from (a model folder or a checkpoint), or state handed over in memory.
struct StartingPoint {
  std::int64_t step = 0;
  fs::path source;  ///< read weights (and, when `checkpoint`, the optimizer) from here
  bool checkpoint = false;
  bool in_memory = false;  ///< parameters and moments were handed over
};

// A NaN or infinity in the starting weights would surface steps later as
// "the loss became nan": say where it is instead.
void check_finite_weights(const model::LlamaModel& model, int first, int last, const fs::path& source) {
  for (const auto& [name, t] : model.named_parameters(first, last))
    if (t.defined() && !torch::isfinite(t).all().item<bool>())
      throw InputError("tensor '" + name + "' holds NaN or infinite values: the weights are damaged",
                       {source.string(), "", std::nullopt});
}

}  // namespace

TrainResult train(const TrainJob& requested) {
  const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(requested.timeout_seconds * 1000));
  const auto elastic = ElasticWorker::from_environment(timeout);
  // In-place elastic jobs run generation after generation in this process;
  // every other job runs one.
  std::optional<Membership> members;
  if (elastic) members = elastic->first_membership();
  TrainJob job = requested;
  if (members && members->generation > 0 && !job.resume && !job.force) {
    // A worker that joins a running job takes the run's options from its
    // checkpoint (or accepts the folder of a run not checkpointed yet); its
    // state comes from the hand-over.
    if (has_trainer_state(job.output))
      job.resume = true;
    else
      job.force = true;
  }
  WorldInfo world = world_from_environment();
  const bool elastic_job = std::getenv(kEnvElastic) != nullptr || elastic;
  RunState run = read_run_state(job, world.rank == 0 && !elastic_job);
  TrainOptions& options = run.options;
  for (const auto& f : run.data_files) check_input_file(f);
  auto device = model::resolve_device(job.device);
  if (world.distributed() && device == model::ComputeDevice::kCuda) {
    if (job.device == "cuda")
      throw UsageError("training on several processes runs on the CPU (Gloo) so far; use --device cpu");
    device = model::ComputeDevice::kCpu;
  }
  const auto on_device = model::torch_device(device);
  const auto config = model::load_llama_config(run.source);
  auto tokenizer = model::Tokenizer::load(run.source);
  if (tokenizer.vocab_size() > config.vocab_size)
    throw InputError("the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                     " tokens, more than the model's vocab_size " + std::to_string(config.vocab_size));
  const auto data = model::load_training_data(run.data_files, tokenizer, config, options);
  if (run.expected_fingerprint && data.fingerprint != *run.expected_fingerprint)
    throw InputError("the training data changed since the checkpoint in " + job.output.string() +
                     " (token fingerprint differs); resume needs the same files");
  const int model_layers = config.num_hidden_layers + 2;

  std::int64_t end_step = options.steps;
  if (job.stop_after > 0) end_step = std::min(end_step, run.start_step + job.stop_after);
  {
    // SIGTERM (a preemption notice, scancel, the launcher stopping its
    // workers) ends the job at the next step boundary with a checkpoint of
    // that step, so no finished step is lost.
    struct sigaction action {};
    action.sa_handler = request_leave;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGTERM, &action, nullptr);
  }
  TrainResult result;
  result.first_step = run.start_step;
  const auto started = Clock::now();
  std::int64_t steps_run = 0;

  HeldState held;
  StartingPoint start{run.start_step, run.source, job.resume, false};
  // Energy per step for the metrics: measured on the GPU where the driver
  // reports it (only single-process runs train on a GPU), else the plan's
  // prediction.
  std::unique_ptr<GpuEnergyMeter> energy_meter;
  std::optional<double> predicted_energy;
  if (world.rank == 0 && !job.metrics.empty()) {
    std::string why;
    if (device == model::ComputeDevice::kCuda) energy_meter = GpuEnergyMeter::open(&why);
    if (!energy_meter) predicted_energy = predicted_step_energy(job.plan);
    if (device == model::ComputeDevice::kCuda && !energy_meter)
      spdlog::info("no measured GPU energy in the metrics: {}", why);
  }
  for (;;) {
    const int generation = members ? members->generation : 0;
    PlanSource plan_source{job.plan, std::nullopt, {}};
    std::unique_ptr<Communicator> comm;
    std::optional<model::LlamaModel> model;
    std::optional<StageRunner> runner;
    std::optional<model::AdamW> optimizer;
    std::optional<CheckpointWriter> checkpoints;
    std::optional<Layout> layout_holder;
    std::int64_t committed = start.step;
    bool left_at_boundary = false;
    bool state_valid = false;  // the runner's parameters and moments are the job's state
    const auto generation_started = Clock::now();
    try {
      std::unique_ptr<Communicator> member_comm;
      if (members) {
        plan_source.published = members->plan;
        plan_source.published_name = fmt::format("the plan of generation {}", generation);
        const int member_rank = members->member_rank_of(elastic->worker_id());
        if (member_rank < 0)
          throw UsageError("this worker is not a member of the job's generation " + std::to_string(generation));
        if (generation > 0)
          member_comm = std::make_unique<Communicator>(
              WorldInfo{member_rank, members->members(), 0, elastic->address(), elastic->port(), "elastic"},
              control_keys::generation_prefix(generation) + "members/", timeout, &elastic->interrupt());
        const int rank = members->rank_of(elastic->worker_id());
        if (rank < 0) {
          // A spare or a leaving worker: hand its state over, then wait or leave.
          result.rank = -1;   // reports nothing
          if (member_comm) {  // a spare of the first generation holds nothing yet
            hand_over_state(*member_comm, held, {});
            (void)member_comm.release();  // peers may still be finishing with it
          }
          if (std::find(members->leaving.begin(), members->leaving.end(), elastic->worker_id()) !=
              members->leaving.end()) {
            result.stop_code = kExitPreempted;
            result.last_step = held.step;
            return result;
          }
          spdlog::info("worker {}: a spare in generation {}", elastic->worker_id(), generation);
          members = elastic->next_generation(generation);
          if (!members) return result;
          continue;
        }
        world = WorldInfo{rank,     static_cast<int>(members->training.size()), 0, elastic->address(), elastic->port(),
                          "elastic"};
      }
      layout_holder = make_layout(plan_source, options, model_layers, world.world_size);
      const Layout& layout = *layout_holder;
      const auto& own = layout.stages[static_cast<std::size_t>(layout.place(world.rank).stage)];
      if (member_comm) {
        // The state comes from the previous generation's members: only the shapes here.
        model.emplace(model::LlamaModel::uninitialized(config));
        model->keep_only_layers(own.first, own.last);
      } else {
        // Each rank reads only its stage's weights.
        model.emplace(model::LlamaModel::load_layers(start.source, own.first, own.last, torch::kFloat32, on_device));
        check_finite_weights(*model, own.first, own.last, start.source);
      }

      if (members) {
        if (world.distributed())
          comm = std::make_unique<Communicator>(world, control_keys::generation_prefix(generation) + "train/", timeout,
                                                &elastic->interrupt());
      } else if (world.distributed()) {
        comm = std::make_unique<Communicator>(world, timeout);
      }
      if (comm && generation == 0)
        check_same_inputs(*comm, fmt::format("{:016x}", model_files_fingerprint(run.source)),
                          fmt::format("{:016x}", data.fingerprint),
                          options.to_json().dump() + " " + layout.describe() + " " + job.output.string());
      if (world.rank == 0)
        spdlog::info("{}training {} on {} rank(s): {}", members ? fmt::format("generation {}: ", generation) : "",
                     start.source.string(), world.world_size, layout.describe());

      runner.emplace(layout, world.rank, comm.get(), *model, data, options, on_device);
      optimizer.emplace(runner->parameters(), options);
      if (member_comm) {
        // Parameters and moments from the members that hold them (this
        // rank's tensor-parallel slice of each), point to point.
        std::vector<HandOverTarget> targets;
        const NamedTensors moments = optimizer->state();  // the optimizer's own tensors
        for (const auto* list : {&runner->parameters(), &moments})
          for (const auto& [name, t] : *list) targets.push_back({name, t, runner->slice_spec(name)});
        const auto step = hand_over_state(*member_comm, held, targets);
        (void)member_comm.release();
        if (step) {
          start = {*step, run.source, false, true};
          run.history = nlohmann::json::array();
          for (const auto& h : held.history)
            if (h.at("step").get<std::int64_t>() <= *step) run.history.push_back(h);
        } else if (members->save_only) {
          start.in_memory = start.checkpoint = false;  // nothing to write: the last checkpoint stays
        } else {
          const std::int64_t saved = trainer_state_step(job.output);
          spdlog::warn(
              "generation {}: some layer has no surviving holder; every rank reloads {}", generation,
              saved >= 0 ? "the checkpoint of step " + std::to_string(saved) : std::string("the initial model"));
          start =
              saved >= 0 ? StartingPoint{saved, job.output, true, false} : StartingPoint{0, job.model, false, false};
          run.history =
              saved >= 0 ? read_trainer_state(job.output).root().at("history").raw() : nlohmann::json::array();
          runner->load_parameters(start.source);
        }
        runner->after_update();  // a tied head's copy follows the embedding
        committed = start.step;
      }
      if (start.checkpoint)
        optimizer->load(start.source,
                        [&](const std::string& name, const torch::Tensor& t) { return runner->slice_of(name, t); });
      state_valid = true;
      if (elastic && generation > 0 && world.rank == 0)
        elastic->report_ready(generation, seconds_since(generation_started),
                              start.in_memory    ? "memory"
                              : start.checkpoint ? "checkpoint"
                                                 : "model");

      // Replica 0 of each stage writes that stage's shards.
      std::vector<int> writers;
      for (int st = 0; st < layout.pipeline_stages(); ++st) writers.push_back(layout.rank_of(st, 0, 0));
      // Rank 0 clears what earlier runs left half-written before anyone
      // writes: the token's all-gather is the barrier (a save-only
      // generation writes at once, with no step in between).
      if (world.rank == 0) CheckpointWriter::remove_stale_staging(job.output);
      std::string token = fmt::format("{:08x}", std::random_device()());
      if (comm) token = comm->all_gather_strings("token", token).front();
      checkpoints.emplace(job.output, world, writers, token, timeout);
      if (elastic) checkpoints->set_interrupt(&elastic->interrupt());
      // Copies taken between two steps; the files are written while training goes on.
      std::int64_t saved_step = -1;
      auto save_checkpoint = [&](std::int64_t step_done) {
        saved_step = step_done;
        CheckpointSnapshot snapshot;
        snapshot.step = step_done;
        auto copy = [&](const NamedTensors& tensors, NamedTensors& into) {
          for (const auto& [name, t] : tensors) {
            // A tied head on a later stage: the first stage writes the embedding.
            if (runner->holds_tied_copy() && name.find(kTiedName) != std::string::npos) continue;
            auto whole = runner->gather_whole(name, t);
            if (runner->writes_checkpoint()) into.emplace_back(name, std::move(whole));
          }
        };
        if (runner->gathers_checkpoint()) {
          copy(runner->parameters(), snapshot.model);
          copy(optimizer->state(), snapshot.optimizer);
        }
        if (world.rank == 0) {
          auto cfg = model->config();
          cfg.torch_dtype = "float32";
          snapshot.config_json = model::llama_config_json(cfg);
          snapshot.tokenizer_source = run.source;
          std::vector<std::string> names;
          // "-" stays "-": a resumed run reads standard input again (the fingerprint checks it is the same text).
          for (const auto& f : run.data_files) names.push_back(is_stdio(f) ? f.string() : fs::absolute(f).string());
          snapshot.trainer_state = make_trainer_state(step_done, {{"options", options.to_json()},
                                                                  {"data", names},
                                                                  {"data_fingerprint", data.fingerprint},
                                                                  {"layout", layout.describe()},
                                                                  {"history", run.history}});
        }
        checkpoints->write_async(std::move(snapshot));
      };

      if (members && members->save_only) {
        // The workers left admit no plan: write the state they handed over, then stop.
        if (start.in_memory) {
          save_checkpoint(start.step);
          checkpoints->wait();
        }
        if (world.rank == 0) elastic->report_saved(generation, start.in_memory ? start.step : -1);
        result.rank = world.rank;
        result.stop_code = kExitNoPlan;
        result.last_step = start.in_memory ? start.step : -1;
        return result;
      }

      std::ofstream metrics;
      if (world.rank == 0 && !job.metrics.empty()) {
        metrics.open(job.metrics, job.resume || generation > 0 ? std::ios::app : std::ios::trunc);
        if (!metrics) throw IoError("cannot write --metrics " + job.metrics.string());
      }
      result.rank = world.rank;
      result.world_size = world.world_size;
      result.layout = layout.describe();
      Progress progress("train", static_cast<std::uint64_t>(std::max<std::int64_t>(0, end_step - start.step)), "steps",
                        world.rank == 0 ? ProgressStyle::kAuto : ProgressStyle::kSilent);
      const double tokens_per_step = static_cast<double>(options.global_batch * options.seq_len);
      for (std::int64_t step = start.step; step < end_step; ++step) {
        const auto step_started = Clock::now();
        const std::optional<double> joules_before = energy_meter ? energy_meter->total_joules() : std::nullopt;
        StepTimes times;
        times.step_start = step_started;
        times.tracing = !job.trace.empty() && step + 1 == end_step;
        double loss_part = 0;
        {
          // Weights, gradients and optimizer state stay float32; on a GPU the
          // matrix products run in bfloat16 under autocast (mixed precision).
          // The guard ends with the step's forward and backward passes: autocast
          // caches each weight's bfloat16 copy until it is switched off, so a
          // guard held across optimizer steps would train on stale weights.
          std::optional<model::compat::CudaAutocast> autocast;
          if (device == model::ComputeDevice::kCuda) autocast.emplace(torch::kBFloat16);
          loss_part = runner->run_step(step, times);
        }
        // One all-reduce carries the gradient norm's parts, the loss, whether
        // the job stops after this step (a rank asked to leave, or the elastic
        // controller wants a new generation), and which ranks asked to leave.
        const bool asked_to_leave = g_leave_requested.load() != 0;
        const bool regroup_asked = elastic && world.rank == 0 && elastic->stop_requested(generation);
        auto totals = torch::zeros({3 + world.world_size}, torch::kFloat64);
        totals[0] = runner->gradient_sum_of_squares();
        totals[1] = loss_part;
        totals[2] = asked_to_leave || regroup_asked ? 1.0 : 0.0;
        totals[3 + world.rank] = asked_to_leave ? 1.0 : 0.0;
        if (comm) {
          auto t = Clock::now();
          comm->world().all_reduce_sum(totals);
          times.add(times.allreduce, t, "loss and norm all-reduce", "allreduce");
        }
        // Every replica of a stage holds the same summed gradients: count one.
        const double grad_norm = std::sqrt(totals[0].item<double>() / layout.dp);
        const double loss = totals[1].item<double>();
        if (!std::isfinite(loss))
          throw RuntimeFailure("the loss became " + std::to_string(loss) + " at step " + std::to_string(step + 1) +
                               "; lower --lr");
        // Every training rank applies the step, or none does (a rank lost
        // mid-step leaves the survivors' states at the same step).
        if (elastic && !elastic->commit(generation, step, world.world_size))
          throw PeerLost(fmt::format("step {} was not committed: the generation ended", step + 1));
        model::clip_gradients(runner->parameters(), grad_norm, options.clip_norm);
        const double lr = model::learning_rate(options, step);
        auto t = Clock::now();
        optimizer->step(lr, step + 1);
        committed = step + 1;
        if (held.step >= 0) held = HeldState{};  // superseded by this generation's state
        times.add(times.compute, t, "optimizer step", "update");
        runner->after_update();
        if (times.tracing) write_trace(job.trace, comm.get(), layout, world.rank, times.spans);
        const double step_seconds = seconds_since(step_started);
        ++steps_run;
        result.losses.push_back(loss);
        run.history.push_back({{"step", step + 1}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm}});
        if (metrics.is_open()) {
          const double idle = std::max(0.0, step_seconds - times.compute - times.send - times.recv - times.allreduce);
          nlohmann::json line = {{"step", step + 1},
                                 {"loss", loss},
                                 {"lr", lr},
                                 {"grad_norm", grad_norm},
                                 {"tokens_per_s", tokens_per_step / step_seconds},
                                 {"step_s", step_seconds},
                                 {"compute_s", times.compute},
                                 {"send_s", times.send},
                                 {"recv_wait_s", times.recv},
                                 {"allreduce_s", times.allreduce},
                                 {"idle_s", idle}};
          if (members) line["generation"] = generation;
          const std::optional<double> joules_after = energy_meter ? energy_meter->total_joules() : std::nullopt;
          if (joules_before && joules_after) {
            line["energy_j"] = *joules_after - *joules_before;
            line["energy_source"] = "nvml";
          } else if (predicted_energy) {
            line["energy_j"] = *predicted_energy;
            line["energy_source"] = "model";
          }
          metrics << line.dump() << "\n" << std::flush;
        }
        if (world.rank == 0 && job.log_every > 0 && ((step + 1) % job.log_every == 0 || step + 1 == end_step))
          spdlog::info(
              "step {}/{}: loss {:.4f}, lr {:.3g}, grad norm {:.3g}, {:.0f} tokens/s (compute {:.0f}%, "
              "send {:.0f}%, all-reduce {:.0f}%)",
              step + 1, options.steps, loss, lr, grad_norm, tokens_per_step / step_seconds,
              100 * times.compute / step_seconds, 100 * times.send / step_seconds,
              100 * times.allreduce / step_seconds);
        progress.advance();
        const bool stop_here = totals[2].item<double>() > 0 && step + 1 < end_step;
        if (elastic && stop_here) {
          // A new generation at this boundary: hand the state over instead of checkpointing.
          std::vector<int> leaving;
          for (int r = 0; r < world.world_size; ++r)
            if (totals[3 + r].item<double>() > 0) leaving.push_back(members->training[static_cast<std::size_t>(r)]);
          if (world.rank == 0) elastic->report_boundary(generation, step + 1, leaving);
          left_at_boundary = true;
          break;
        }
        if (job.checkpoint_every > 0 && (step + 1) % job.checkpoint_every == 0 && step + 1 < end_step)
          save_checkpoint(step + 1);
        if (stop_here) {
          // A preemption notice: everyone checkpoints this step and leaves, so no step is redone.
          if (!elastic_job && asked_to_leave)
            result.stop_code = kExitTerminated;
          else
            result.stop_code = asked_to_leave ? kExitPreempted : kExitStoppedWithPeers;
          end_step = step + 1;
          break;
        }
      }
      progress.finish();
      if (!left_at_boundary) {
        if (saved_step != end_step) save_checkpoint(end_step);
        checkpoints->wait();
        if (elastic && world.rank == 0) elastic->report_done();
        break;
      }
      checkpoints->wait();
    } catch (const PeerLost& e) {
      if (!elastic) throw;
      spdlog::warn("worker {}: generation {} ended ({}); keeping the state of step {}", elastic->worker_id(),
                   generation, e.what(), committed);
      elastic->report_failure(generation);
      // Work in flight may still use these groups: abandon them, never wait for them.
      if (runner) runner->abandon_groups();
      (void)comm.release();
    }
    // The generation ended: keep the state, wait for the next one.
    if (runner && optimizer && state_valid) {
      held = hold_state(*runner, optimizer->state(), committed, run.history);
      start.step = committed;
    }
    checkpoints.reset();
    members = elastic->next_generation(generation);
    if (!members) break;
  }
  const double seconds = seconds_since(started);
  result.last_step = end_step;
  if (!result.losses.empty()) {
    result.first_loss = result.losses.front();
    result.last_loss = result.losses.back();
  }
  result.tokens_per_second = seconds > 0 ? static_cast<double>(steps_run) *
                                               static_cast<double>(options.global_batch * options.seq_len) / seconds
                                         : 0;
  return result;
}

}  // namespace fleet::sailor::runtime
