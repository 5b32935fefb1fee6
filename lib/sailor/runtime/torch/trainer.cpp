#include "sailor/runtime/torch/trainer.h"

#include <unistd.h>

#include <algorithm>
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
#include "model/model_folder.h"
#include "model/torch/compute_device.h"
#include "model/torch/llama.h"
#include "model/torch/tensor_bridge.h"
#include "model/torch/tensor_parallel.h"
#include "model/torch/torch_compat.h"
#include "model/torch/training_parts.h"
#include "sailor/pipeline_schedule.h"
#include "sailor/runtime/gpu_energy.h"
#include "sailor/runtime/layout.h"
#include "sailor/runtime/torch/checkpoint.h"
#include "sailor/runtime/torch/communicator.h"
#include "sailor/runtime/torch/control_store.h"
#include "sailor/runtime/torch/elastic.h"
#include "sailor/runtime/torch/elastic_worker.h"
#include "sailor/runtime/torch/stage_runner.h"
#include "sailor/runtime/trainer_state.h"
#include "sailor/runtime/world.h"
#include "text/tokenizer.h"

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
std::uint64_t model_files_fingerprint(const model::ModelFolder& folder) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  std::vector<fs::path> files{folder.path() / "config.json"};
  for (const auto& f : folder.weights().files()) files.push_back(f);
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

// SIGTERM (a preemption notice, scancel, the launcher stopping its workers)
// ends the job at the next step boundary with a checkpoint of that step, so
// no finished step is lost.
void leave_at_next_boundary_on_sigterm() {
  struct sigaction action {};
  action.sa_handler = request_leave;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);
}

// What one generation builds (a job that is not elastic in place has one):
// its communicators, this rank's stage and optimizer, its checkpoint writer.
// Members are destroyed in reverse order: the writer first, the
// communicators last.
struct Generation {
  int number = 0;
  PlanSource plan_source;
  std::int64_t committed = 0;  ///< the last step every rank applied
  std::int64_t saved_step = -1;
  bool state_valid = false;  ///< the runner's parameters and moments are the job's state
  Clock::time_point started = Clock::now();
  std::unique_ptr<Communicator> member_comm;  ///< the hand-over's (in-place generations after the first)
  std::unique_ptr<Communicator> comm;         ///< the training ranks' (several ranks only)
  std::optional<Layout> layout;
  std::optional<model::LlamaModel> model;
  std::optional<StageRunner> runner;
  std::optional<model::AdamW> optimizer;
  std::optional<CheckpointWriter> checkpoints;
  std::ofstream metrics;
};

// How a generation ended for this worker.
enum class GenerationEnd {
  kFinished,  ///< the job's last step (or --stop-after) is done and saved
  kBoundary,  ///< the controller starts a new generation at a step boundary
  kFailed,    ///< a peer was lost: the state of the last committed step is kept
  kSpare,     ///< this worker trains nothing in this generation
  kLeave,     ///< this worker's part of the job is over (the result says why)
};

// What one training step produced, as every rank agrees on it.
struct StepOutcome {
  double loss = 0, grad_norm = 0, lr = 0, seconds = 0;
  StepTimes times;
  std::optional<double> joules_before;  ///< the GPU's energy counter when the step began
  bool asked_to_leave = false;          ///< this rank got SIGTERM
  bool stop_requested = false;          ///< some rank asked to leave, or the controller to regroup
  std::vector<int> leaving;             ///< ranks that asked to leave
};

// A training job on this process: its inputs, read once, and the
// generations it runs (one, or one per re-plan of an in-place elastic job),
// each set up, trained step by step, and ended.
class TrainingSession {
 public:
  explicit TrainingSession(const TrainJob& requested);
  TrainResult run();

 private:
  void read_inputs();
  void open_energy_meter();
  GenerationEnd run_generation(Generation& g);
  std::optional<GenerationEnd> join_as_member(Generation& g);
  void build_stage(Generation& g);
  void take_over_state(Generation& g);
  void open_checkpoints(Generation& g);
  void save_checkpoint(Generation& g, std::int64_t step_done);
  GenerationEnd save_handed_over_state(Generation& g);
  bool train_steps(Generation& g);
  StepOutcome train_step(Generation& g, std::int64_t step);
  void record_step(Generation& g, std::int64_t step, const StepOutcome& o);
  void abandon(Generation& g, const PeerLost& e);
  TrainResult finish() const;

  const TrainOptions& options() const { return run_.options; }
  bool leading() const { return world_.rank == 0; }

  TrainJob job_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<ElasticWorker> elastic_;
  std::optional<Membership> members_;
  WorldInfo world_;
  bool elastic_job_ = false;
  RunState run_;
  model::ComputeDevice device_ = model::ComputeDevice::kCpu;
  torch::Device on_device_{torch::kCPU};
  std::optional<model::LlamaConfig> config_;
  std::optional<model::TrainingData> data_;
  int model_layers_ = 0;
  std::string model_fingerprint_;  ///< of the files trained from, compared between ranks
  std::int64_t end_step_ = 0;
  TrainResult result_;
  Clock::time_point started_ = Clock::now();
  std::int64_t steps_run_ = 0;
  HeldState held_;
  StartingPoint start_;
  // Energy per step for the metrics: measured on the GPU where the driver
  // reports it (only single-process runs train on a GPU), else the plan's prediction.
  std::unique_ptr<GpuEnergyMeter> energy_meter_;
  std::optional<double> predicted_energy_;
  RetiredGroups retired_;  // destroyed before elastic_, whose interrupts the groups hold
};

TrainingSession::TrainingSession(const TrainJob& requested)
    : job_(requested),
      timeout_(static_cast<std::int64_t>(requested.timeout_seconds * 1000)),
      elastic_(ElasticWorker::from_environment(timeout_)) {
  // In-place elastic jobs run generation after generation in this process;
  // every other job runs one.
  if (elastic_) members_ = elastic_->first_membership();
  if (members_ && members_->generation > 0 && !job_.resume && !job_.force) {
    // A worker that joins a running job takes the run's options from its
    // checkpoint (or accepts the folder of a run not checkpointed yet); its
    // state comes from the hand-over.
    if (has_trainer_state(job_.output))
      job_.resume = true;
    else
      job_.force = true;
  }
  world_ = world_from_environment();
  elastic_job_ = std::getenv(kEnvElastic) != nullptr || elastic_;
  run_ = read_run_state(job_, leading() && !elastic_job_);
  read_inputs();
  end_step_ = options().steps;
  if (job_.stop_after > 0) end_step_ = std::min(end_step_, run_.start_step + job_.stop_after);
  leave_at_next_boundary_on_sigterm();
  result_.first_step = run_.start_step;
  start_ = StartingPoint{run_.start_step, run_.source, job_.resume, false};
  open_energy_meter();
}

// The device, the model's configuration and tokenizer, and the training
// data, checked against each other and against a checkpoint's record.
void TrainingSession::read_inputs() {
  for (const auto& f : run_.data_files) check_input_file(f);
  device_ = model::resolve_device(job_.device);
  if (world_.distributed() && device_ == model::ComputeDevice::kCuda) {
    if (job_.device == "cuda")
      throw UsageError("training on several processes runs on the CPU (Gloo) so far; use --device cpu");
    device_ = model::ComputeDevice::kCpu;
  }
  on_device_ = model::torch_device(device_);
  const model::ModelFolder folder(run_.source);
  config_ = folder.config();
  const auto tokenizer = folder.load_tokenizer();
  if (tokenizer.vocab_size() > config_->vocab_size)
    throw InputError("the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                     " tokens, more than the model's vocab_size " + std::to_string(config_->vocab_size));
  data_ = model::load_training_data(run_.data_files, tokenizer, *config_, run_.options);
  if (run_.expected_fingerprint && data_->fingerprint != *run_.expected_fingerprint)
    throw InputError("the training data changed since the checkpoint in " + job_.output.string() +
                     " (token fingerprint differs); resume needs the same files");
  model_layers_ = config_->num_hidden_layers + 2;
  // The ranks of the first generation compare it (an in-place elastic job
  // learns its ranks from the controller); a worker that joins later takes
  // its state from the hand-over and need not read every weight file.
  const bool first_generation = !members_ || members_->generation == 0;
  if (first_generation && (world_.distributed() || elastic_))
    model_fingerprint_ = fmt::format("{:016x}", model_files_fingerprint(folder));
}

void TrainingSession::open_energy_meter() {
  if (!leading() || job_.metrics.empty()) return;
  std::string why;
  if (device_ == model::ComputeDevice::kCuda) energy_meter_ = GpuEnergyMeter::open(&why);
  if (!energy_meter_) predicted_energy_ = predicted_step_energy(job_.plan);
  if (device_ == model::ComputeDevice::kCuda && !energy_meter_)
    spdlog::info("no measured GPU energy in the metrics: {}", why);
}

TrainResult TrainingSession::run() {
  for (;;) {
    Generation g;
    g.number = members_ ? members_->generation : 0;
    g.plan_source = PlanSource{job_.plan, std::nullopt, {}};
    g.committed = start_.step;
    GenerationEnd end;
    try {
      end = run_generation(g);
    } catch (const PeerLost& e) {
      if (!elastic_) throw;
      abandon(g, e);
      end = GenerationEnd::kFailed;
    }
    if (end == GenerationEnd::kLeave) return result_;
    if (end == GenerationEnd::kFinished) break;
    // The generation ended: keep the state, wait for the next one.
    if (g.runner && g.optimizer && g.state_valid) {
      held_ = hold_state(*g.runner, g.optimizer->state(), g.committed, run_.history);
      start_.step = g.committed;
    }
    g.checkpoints.reset();
    members_ = elastic_->next_generation(g.number);
    if (!members_) {
      if (end == GenerationEnd::kSpare) return result_;  // a spare to the end reports nothing
      break;
    }
  }
  return finish();
}

GenerationEnd TrainingSession::run_generation(Generation& g) {
  if (members_)
    if (const auto end = join_as_member(g)) return *end;
  build_stage(g);
  if (g.member_comm) take_over_state(g);
  if (start_.checkpoint)
    g.optimizer->load(start_.source,
                      [&](const std::string& name, const torch::Tensor& t) { return g.runner->slice_of(name, t); });
  g.state_valid = true;
  if (elastic_ && g.number > 0 && leading())
    elastic_->report_ready(g.number, seconds_since(g.started),
                           start_.in_memory    ? "memory"
                           : start_.checkpoint ? "checkpoint"
                                               : "model");
  open_checkpoints(g);
  if (members_ && members_->save_only) return save_handed_over_state(g);
  if (train_steps(g)) {
    g.checkpoints->wait();
    return GenerationEnd::kBoundary;
  }
  if (g.saved_step != end_step_) save_checkpoint(g, end_step_);
  g.checkpoints->wait();
  if (elastic_ && leading()) elastic_->report_done();
  return GenerationEnd::kFinished;
}

// This worker's place in an in-place elastic generation: a training rank
// (nothing returned; world_ is set), or a spare or leaving worker, which
// hands its state over first.
std::optional<GenerationEnd> TrainingSession::join_as_member(Generation& g) {
  g.plan_source.published = members_->plan;
  g.plan_source.published_name = fmt::format("the plan of generation {}", g.number);
  const int member_rank = members_->member_rank_of(elastic_->worker_id());
  if (member_rank < 0)
    throw UsageError("this worker is not a member of the job's generation " + std::to_string(g.number));
  if (g.number > 0)
    g.member_comm = std::make_unique<Communicator>(
        WorldInfo{member_rank, members_->members(), 0, elastic_->address(), elastic_->port(), "elastic"},
        control_keys::generation_prefix(g.number) + "members/", timeout_, &elastic_->interrupt());
  const int rank = members_->rank_of(elastic_->worker_id());
  if (rank >= 0) {
    world_ = WorldInfo{rank,     static_cast<int>(members_->training.size()), 0, elastic_->address(), elastic_->port(),
                       "elastic"};
    return std::nullopt;
  }
  result_.rank = -1;    // reports nothing
  if (g.member_comm) {  // a spare of the first generation holds nothing yet
    hand_over_state(*g.member_comm, held_, {});
    g.member_comm.reset();
  }
  const auto& leaving = members_->leaving;
  if (std::find(leaving.begin(), leaving.end(), elastic_->worker_id()) != leaving.end()) {
    result_.stop_code = kExitPreempted;
    result_.last_step = held_.step;
    return GenerationEnd::kLeave;
  }
  spdlog::info("worker {}: a spare in generation {}", elastic_->worker_id(), g.number);
  return GenerationEnd::kSpare;
}

// The layout, this rank's stage of the model, the training communicator,
// the stage runner and its optimizer.
void TrainingSession::build_stage(Generation& g) {
  g.layout = make_layout(g.plan_source, run_.options, model_layers_, world_.world_size);
  const Layout& layout = *g.layout;
  const auto& own = layout.stages[static_cast<std::size_t>(layout.place(world_.rank).stage)];
  if (g.member_comm) {
    // The state comes from the previous generation's members: only the shapes here.
    g.model.emplace(model::LlamaModel::uninitialized(*config_));
    g.model->keep_only_layers(own.first, own.last);
  } else {
    // Each rank reads only its stage's weights.
    g.model.emplace(model::LlamaModel::load_layers(start_.source, own.first, own.last, torch::kFloat32, on_device_));
    check_finite_weights(*g.model, own.first, own.last, start_.source);
  }
  if (world_.distributed())
    g.comm = members_ ? std::make_unique<Communicator>(world_, control_keys::generation_prefix(g.number) + "train/",
                                                       timeout_, &elastic_->interrupt())
                      : std::make_unique<Communicator>(world_, timeout_);
  if (g.comm && g.number == 0)
    check_same_inputs(*g.comm, model_fingerprint_, fmt::format("{:016x}", data_->fingerprint),
                      options().to_json().dump() + " " + layout.describe() + " " + job_.output.string());
  if (leading())
    spdlog::info("{}training {} on {} rank(s): {}", members_ ? fmt::format("generation {}: ", g.number) : "",
                 start_.source.string(), world_.world_size, layout.describe());
  g.runner.emplace(layout, world_.rank, g.comm.get(), *g.model, *data_, options(), on_device_);
  g.optimizer.emplace(g.runner->parameters(), options());
}

// Parameters and moments from the members that hold them (this rank's
// tensor-parallel slice of each), point to point; the checkpoint or the
// initial model when some part is held by nobody.
void TrainingSession::take_over_state(Generation& g) {
  std::vector<HandOverTarget> targets;
  const NamedTensors moments = g.optimizer->state();  // the optimizer's own tensors
  for (const auto* list : {&g.runner->parameters(), &moments})
    for (const auto& [name, t] : *list) targets.push_back({name, t, g.runner->slice_spec(name)});
  const auto step = hand_over_state(*g.member_comm, held_, targets);
  g.member_comm.reset();
  if (step) {
    start_ = {*step, run_.source, false, true};
    run_.history = nlohmann::json::array();
    for (const auto& h : held_.history)
      if (h.at("step").get<std::int64_t>() <= *step) run_.history.push_back(h);
  } else if (members_->save_only) {
    start_.in_memory = start_.checkpoint = false;  // nothing to write: the last checkpoint stays
  } else {
    const std::int64_t saved = trainer_state_step(job_.output);
    spdlog::warn("generation {}: some layer has no surviving holder; every rank reloads {}", g.number,
                 saved >= 0 ? "the checkpoint of step " + std::to_string(saved) : std::string("the initial model"));
    start_ = saved >= 0 ? StartingPoint{saved, job_.output, true, false} : StartingPoint{0, job_.model, false, false};
    run_.history = saved >= 0 ? read_trainer_state(job_.output).root().at("history").raw() : nlohmann::json::array();
    g.runner->load_parameters(start_.source);
  }
  g.runner->after_update();  // a tied head's copy follows the embedding
  g.committed = start_.step;
}

void TrainingSession::open_checkpoints(Generation& g) {
  // Replica 0 of each stage writes that stage's shards.
  std::vector<int> writers;
  for (int st = 0; st < g.layout->pipeline_stages(); ++st) writers.push_back(g.layout->rank_of(st, 0, 0));
  // Rank 0 clears what earlier runs left half-written before anyone
  // writes: the token's all-gather is the barrier (a save-only
  // generation writes at once, with no step in between).
  if (leading()) CheckpointWriter::remove_stale_staging(job_.output);
  std::string token = fmt::format("{:08x}", std::random_device()());
  if (g.comm) token = g.comm->all_gather_strings("token", token).front();
  g.checkpoints.emplace(job_.output, world_, writers, token, timeout_);
  if (elastic_) g.checkpoints->set_interrupt(&elastic_->interrupt());
}

// Copies taken between two steps; the files are written while training goes on.
void TrainingSession::save_checkpoint(Generation& g, std::int64_t step_done) {
  g.saved_step = step_done;
  CheckpointSnapshot snapshot;
  snapshot.step = step_done;
  auto& runner = *g.runner;
  auto copy = [&](const NamedTensors& tensors, NamedTensors& into) {
    for (const auto& [name, t] : tensors) {
      // A tied head on a later stage: the first stage writes the embedding.
      if (runner.holds_tied_copy() && name.find(kTiedName) != std::string::npos) continue;
      auto whole = runner.gather_whole(name, t);
      if (runner.writes_checkpoint()) into.emplace_back(name, std::move(whole));
    }
  };
  if (runner.gathers_checkpoint()) {
    copy(runner.parameters(), snapshot.model);
    copy(g.optimizer->state(), snapshot.optimizer);
  }
  if (leading()) {
    auto cfg = g.model->config();
    cfg.torch_dtype = "float32";
    snapshot.config_json = model::llama_config_json(cfg);
    snapshot.tokenizer_source = run_.source;
    std::vector<std::string> names;
    // "-" stays "-": a resumed run reads standard input again (the fingerprint checks it is the same text).
    for (const auto& f : run_.data_files) names.push_back(is_stdio(f) ? f.string() : fs::absolute(f).string());
    snapshot.trainer_state = make_trainer_state(step_done, {{"options", options().to_json()},
                                                            {"data", names},
                                                            {"data_fingerprint", data_->fingerprint},
                                                            {"layout", g.layout->describe()},
                                                            {"history", run_.history}});
  }
  g.checkpoints->write_async(std::move(snapshot));
}

// The workers left admit no plan: write the state they handed over, then stop.
GenerationEnd TrainingSession::save_handed_over_state(Generation& g) {
  if (start_.in_memory) {
    save_checkpoint(g, start_.step);
    g.checkpoints->wait();
  }
  if (leading()) elastic_->report_saved(g.number, start_.in_memory ? start_.step : -1);
  result_.rank = world_.rank;
  result_.stop_code = kExitNoPlan;
  result_.last_step = start_.in_memory ? start_.step : -1;
  return GenerationEnd::kLeave;
}

// The generation's steps, with checkpoints as asked. True when it ended at a
// step boundary for a new generation (the state is handed over, not saved).
bool TrainingSession::train_steps(Generation& g) {
  if (leading() && !job_.metrics.empty()) {
    g.metrics.open(job_.metrics, job_.resume || g.number > 0 ? std::ios::app : std::ios::trunc);
    if (!g.metrics) throw IoError("cannot write --metrics " + job_.metrics.string());
  }
  result_.rank = world_.rank;
  result_.world_size = world_.world_size;
  result_.layout = g.layout->describe();
  Progress progress("train", static_cast<std::uint64_t>(std::max<std::int64_t>(0, end_step_ - start_.step)), "steps",
                    leading() ? ProgressStyle::kAuto : ProgressStyle::kSilent);
  for (std::int64_t step = start_.step; step < end_step_; ++step) {
    const StepOutcome o = train_step(g, step);
    record_step(g, step, o);
    progress.advance();
    const bool stop_here = o.stop_requested && step + 1 < end_step_;
    if (elastic_ && stop_here) {
      // A new generation at this boundary: hand the state over instead of checkpointing.
      std::vector<int> leaving;
      for (const int r : o.leaving) leaving.push_back(members_->training[static_cast<std::size_t>(r)]);
      if (leading()) elastic_->report_boundary(g.number, step + 1, leaving);
      progress.finish();
      return true;
    }
    if (job_.checkpoint_every > 0 && (step + 1) % job_.checkpoint_every == 0 && step + 1 < end_step_)
      save_checkpoint(g, step + 1);
    if (stop_here) {
      // A preemption notice: everyone checkpoints this step and leaves, so no step is redone.
      if (!elastic_job_ && o.asked_to_leave)
        result_.stop_code = kExitTerminated;
      else
        result_.stop_code = o.asked_to_leave ? kExitPreempted : kExitStoppedWithPeers;
      end_step_ = step + 1;
      break;
    }
  }
  progress.finish();
  return false;
}

// One step: forwards and backwards, the global norm and loss, the commit
// (elastic), clipping and the optimizer's update.
StepOutcome TrainingSession::train_step(Generation& g, std::int64_t step) {
  StepOutcome o;
  const auto step_started = Clock::now();
  o.joules_before = energy_meter_ ? energy_meter_->total_joules() : std::nullopt;
  o.times.step_start = step_started;
  o.times.tracing = !job_.trace.empty() && step + 1 == end_step_;
  double loss_part = 0;
  {
    // Weights, gradients and optimizer state stay float32; on a GPU the
    // matrix products run in bfloat16 under autocast (mixed precision).
    // The guard ends with the step's forward and backward passes: autocast
    // caches each weight's bfloat16 copy until it is switched off, so a
    // guard held across optimizer steps would train on stale weights.
    std::optional<model::compat::CudaAutocast> autocast;
    if (device_ == model::ComputeDevice::kCuda) autocast.emplace(torch::kBFloat16);
    loss_part = g.runner->run_step(step, o.times);
  }
  // One all-reduce carries the gradient norm's parts, the loss, whether
  // the job stops after this step (a rank asked to leave, or the elastic
  // controller wants a new generation), and which ranks asked to leave.
  o.asked_to_leave = g_leave_requested.load() != 0;
  const bool regroup_asked = elastic_ && leading() && elastic_->stop_requested(g.number);
  auto totals = torch::zeros({3 + world_.world_size}, torch::kFloat64);
  totals[0] = g.runner->gradient_sum_of_squares();
  totals[1] = loss_part;
  totals[2] = o.asked_to_leave || regroup_asked ? 1.0 : 0.0;
  totals[3 + world_.rank] = o.asked_to_leave ? 1.0 : 0.0;
  if (g.comm) {
    auto t = Clock::now();
    g.comm->world().all_reduce_sum(totals);
    o.times.add(o.times.allreduce, t, "loss and norm all-reduce", "allreduce");
  }
  // Every replica of a stage holds the same summed gradients: count one.
  o.grad_norm = std::sqrt(totals[0].item<double>() / g.layout->dp);
  o.loss = totals[1].item<double>();
  o.stop_requested = totals[2].item<double>() > 0;
  for (int r = 0; r < world_.world_size; ++r)
    if (totals[3 + r].item<double>() > 0) o.leaving.push_back(r);
  if (!std::isfinite(o.loss))
    throw RuntimeFailure("the loss became " + std::to_string(o.loss) + " at step " + std::to_string(step + 1) +
                         "; lower --lr");
  // Every training rank applies the step, or none does (a rank lost
  // mid-step leaves the survivors' states at the same step).
  if (elastic_ && !elastic_->commit(g.number, step, world_.world_size))
    throw PeerLost(fmt::format("step {} was not committed: the generation ended", step + 1));
  model::clip_gradients(g.runner->parameters(), o.grad_norm, options().clip_norm);
  o.lr = model::learning_rate(options(), step);
  auto t = Clock::now();
  g.optimizer->step(o.lr, step + 1);
  g.committed = step + 1;
  if (held_.step >= 0) held_ = HeldState{};  // superseded by this generation's state
  o.times.add(o.times.compute, t, "optimizer step", "update");
  g.runner->after_update();
  if (o.times.tracing) write_trace(job_.trace, g.comm.get(), *g.layout, world_.rank, o.times.spans);
  o.seconds = seconds_since(step_started);
  return o;
}

// The step in the run's history, the metrics file and the log.
void TrainingSession::record_step(Generation& g, std::int64_t step, const StepOutcome& o) {
  ++steps_run_;
  result_.losses.push_back(o.loss);
  run_.history.push_back({{"step", step + 1}, {"loss", o.loss}, {"lr", o.lr}, {"grad_norm", o.grad_norm}});
  const double tokens_per_step = static_cast<double>(options().global_batch * options().seq_len);
  const StepTimes& times = o.times;
  if (g.metrics.is_open()) {
    const double idle = std::max(0.0, o.seconds - times.compute - times.send - times.recv - times.allreduce);
    nlohmann::json line = {{"step", step + 1},
                           {"loss", o.loss},
                           {"lr", o.lr},
                           {"grad_norm", o.grad_norm},
                           {"tokens_per_s", tokens_per_step / o.seconds},
                           {"step_s", o.seconds},
                           {"compute_s", times.compute},
                           {"send_s", times.send},
                           {"recv_wait_s", times.recv},
                           {"allreduce_s", times.allreduce},
                           {"idle_s", idle}};
    if (members_) line["generation"] = g.number;
    const std::optional<double> joules_after = energy_meter_ ? energy_meter_->total_joules() : std::nullopt;
    if (o.joules_before && joules_after) {
      line["energy_j"] = *joules_after - *o.joules_before;
      line["energy_source"] = "nvml";
    } else if (predicted_energy_) {
      line["energy_j"] = *predicted_energy_;
      line["energy_source"] = "model";
    }
    g.metrics << line.dump() << "\n" << std::flush;
  }
  if (leading() && job_.log_every > 0 && ((step + 1) % job_.log_every == 0 || step + 1 == end_step_))
    spdlog::info(
        "step {}/{}: loss {:.4f}, lr {:.3g}, grad norm {:.3g}, {:.0f} tokens/s (compute {:.0f}%, "
        "send {:.0f}%, all-reduce {:.0f}%)",
        step + 1, options().steps, o.loss, o.lr, o.grad_norm, tokens_per_step / o.seconds,
        100 * times.compute / o.seconds, 100 * times.send / o.seconds, 100 * times.allreduce / o.seconds);
}

// A peer was lost: the generation's groups may still have work in flight
// with it, so they are destroyed on the retired groups' thread, never waited for here.
void TrainingSession::abandon(Generation& g, const PeerLost& e) {
  spdlog::warn("worker {}: generation {} ended ({}); keeping the state of step {}", elastic_->worker_id(), g.number,
               e.what(), g.committed);
  elastic_->report_failure(g.number);
  if (g.runner) g.runner->retire_groups(retired_);
  retired_.retire(std::move(g.comm));
  retired_.retire(std::move(g.member_comm));
}

TrainResult TrainingSession::finish() const {
  TrainResult result = result_;
  const double seconds = seconds_since(started_);
  result.last_step = end_step_;
  if (!result.losses.empty()) {
    result.first_loss = result.losses.front();
    result.last_loss = result.losses.back();
  }
  result.tokens_per_second = seconds > 0 ? static_cast<double>(steps_run_) *
                                               static_cast<double>(options().global_batch * options().seq_len) / seconds
                                         : 0;
  return result;
}

}  // namespace

TrainResult train(const TrainJob& job) { return TrainingSession(job).run(); }

}  // namespace fleet::sailor::runtime
