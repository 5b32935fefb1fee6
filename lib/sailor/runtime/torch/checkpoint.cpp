#include "sailor/runtime/torch/checkpoint.h"

#include <algorithm>
#include <span>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/fnv_hash.h"
#include "common/logging.h"
#include "common/output_path.h"
#include "common/safetensors.h"
#include "common/signal_cleanup.h"
#include "model/torch/tensor_bridge.h"
#include "model/train_options.h"
#include "sailor/runtime/torch/communicator.h"
#include "sailor/runtime/trainer_state.h"

namespace fleet::sailor::runtime {
namespace {

namespace fs = std::filesystem;
constexpr std::uint64_t kMaxShardBytes = 4ull << 30;

std::string shard_name(const std::string& stem, int stage, int stages) {
  return safetensors_shard_name(stem, static_cast<std::size_t>(stage), static_cast<std::size_t>(stages));
}

// One stage's tensors: `<stem>.safetensors` (sharded above 4 GiB) for a
// single stage, else the stage's own shard.
void write_tensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors, const fs::path& dir,
                   const std::string& stem, int stage, int stages) {
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  // The snapshot's tensors are contiguous CPU copies that outlive the write:
  // the writer reads their memory directly instead of copying it once more.
  for (const auto& [name, t] : tensors) {
    const auto* begin = static_cast<const std::byte*>(t.data_ptr());
    writer.add(name, model::dtype_of(t.scalar_type()), t.sizes().vec(),
               std::span<const std::byte>(begin, static_cast<std::size_t>(t.nbytes())));
  }
  if (stages == 1) {
    writer.write_sharded(dir, kMaxShardBytes, stem);
  } else {
    writer.write(dir / shard_name(stem, stage, stages));
  }
}

// The index Hugging Face readers follow, built from the shards' own headers.
void write_shard_index(const fs::path& dir, const std::string& stem, int stages) {
  std::vector<std::pair<std::string, std::string>> weight_map;
  std::uint64_t total = 0;
  for (int s = 0; s < stages; ++s) {
    const std::string file = shard_name(stem, s, stages);
    SafetensorsFile shard(dir / file);
    for (const auto& t : shard.tensors()) {
      weight_map.emplace_back(t.name, file);
      total += t.nbytes();
    }
  }
  write_safetensors_index(dir, stem, weight_map, total);
}

// A checkpoint folder is built as one of the output's temporaries, so the
// rules for those apply: removed by a signal, by the next run, and named
// within NAME_MAX whatever the output's name.
fs::path real_output(const fs::path& output) {
  const OutputTarget target = resolve_output(output);
  if (target.kind != OutputKind::kReplace || (target.exists && !target.is_folder))
    throw UsageError("exists and is not a folder", ErrorContext{output.string(), "", std::nullopt});
  return target.path;
}

}  // namespace

namespace {

// A file's size and FNV-1a 64 digest, as trainer_state.json lists them.
nlohmann::json file_digest(const fs::path& path) {
  const MappedFile file(path);
  Fnv1a64 hash;
  hash.add(file.bytes());
  return {{"bytes", file.size()}, {"fnv1a64", fmt::format("{:016x}", hash.value)}};
}

}  // namespace

nlohmann::json checkpoint_file_digests(const fs::path& dir) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.find(".safetensors") != std::string::npos)
      files[name] = file_digest(entry.path());
  }
  return files;
}

void verify_checkpoint_files(const fs::path& dir, const nlohmann::json& state) {
  const auto it = state.find("files");
  if (it == state.end()) return;  // written before the digests were kept
  for (const auto& [name, expected] : it->items()) {
    const fs::path path = dir / name;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      throw InputError("the checkpoint lists " + name + ", which is missing",
                       {trainer_state_path(dir).string(), "files", std::nullopt});
    const nlohmann::json actual = file_digest(path);
    if (actual.at("bytes") != expected.at("bytes") || actual.at("fnv1a64") != expected.at("fnv1a64"))
      throw InputError(
          "does not match its digest in trainer_state.json: the checkpoint is damaged (resume from a copy, "
          "or start again with --force)",
          {path.string(), "", std::nullopt});
  }
}

CheckpointWriter::CheckpointWriter(fs::path output, const WorldInfo& world, std::vector<int> writers, std::string token,
                                   std::chrono::milliseconds timeout)
    : output_(real_output(output)),
      world_(world),
      writers_(std::move(writers)),
      token_(std::move(token)),
      timeout_(timeout) {
  auto it = std::find(writers_.begin(), writers_.end(), world.rank);
  if (it != writers_.end()) stage_ = static_cast<int>(it - writers_.begin());
  if (world.distributed()) store_ = open_store("the rendezvous", world.master_addr, world.master_port, false, timeout);
}

CheckpointWriter::~CheckpointWriter() {
  cancelled_ = true;
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::remove_stale_staging(const fs::path& output) { remove_stale_temporaries(real_output(output)); }

fs::path CheckpointWriter::staging(std::int64_t step) const {
  const fs::path parent = output_.parent_path().empty() ? fs::path(".") : output_.parent_path();
  return parent / fmt::format("{}{}-{}", temporary_prefix(output_), token_, step);
}

void CheckpointWriter::write_async(CheckpointSnapshot snapshot) {
  wait();
  if (stage_ < 0 && world_.rank != 0) return;
  thread_ = std::thread([this, snapshot = std::move(snapshot)] {
    try {
      write(snapshot);
    } catch (...) {
      failure_ = std::current_exception();
    }
  });
}

void CheckpointWriter::wait() {
  if (thread_.joinable()) thread_.join();
  if (failure_) {
    auto failure = failure_;
    failure_ = nullptr;
    std::rethrow_exception(failure);
  }
}

void CheckpointWriter::write(const CheckpointSnapshot& snapshot) {
  const fs::path dir = staging(snapshot.step);
  fs::create_directories(dir);
  const RemoveOnSignal removal(dir);  // a Ctrl-C leaves no half-written checkpoint behind
  try {
    write_into(snapshot, dir);
  } catch (...) {
    // Rank 0 owns the folder: a checkpoint that failed leaves nothing behind.
    std::error_code ec;
    if (world_.rank == 0) fs::remove_all(dir, ec);
    throw;
  }
}

void CheckpointWriter::write_into(const CheckpointSnapshot& snapshot, const fs::path& dir) {
  const auto started = std::chrono::steady_clock::now();
  const int stages = static_cast<int>(writers_.size());
  const std::string key_prefix = fmt::format("checkpoint/{}/{}/", token_, snapshot.step);
  if (stage_ >= 0) {
    write_tensors(snapshot.model, dir, "model", stage_, stages);
    write_tensors(snapshot.optimizer, dir, "optimizer", stage_, stages);
    if (store_) store_->set(key_prefix + std::to_string(stage_), std::vector<std::uint8_t>{1});
  }
  if (world_.rank != 0) return;
  // Every stage's shards must be there before the folder is committed.
  for (int s = 0; store_ && s < stages; ++s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      if (store_->check({key_prefix + std::to_string(s)})) break;
      if (interrupt_ != nullptr && interrupt_->raised())
        throw PeerLost(fmt::format("the checkpoint of step {} was abandoned: its generation ended", snapshot.step));
      if (cancelled_ || std::chrono::steady_clock::now() > deadline)
        throw RuntimeFailure(
            fmt::format("the checkpoint of step {} misses stage {}'s shards (rank {} did not "
                        "write them); the previous checkpoint stays",
                        snapshot.step, s, writers_[static_cast<std::size_t>(s)]));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (stages > 1) {
    write_shard_index(dir, "model", stages);
    write_shard_index(dir, "optimizer", stages);
  }
  write_file_atomically(dir / "config.json", snapshot.config_json);
  model::copy_tokenizer_files(snapshot.tokenizer_source, dir);
  nlohmann::json state = snapshot.trainer_state;
  state["files"] = checkpoint_file_digests(dir);
  write_trainer_state(dir, state);
  commit_directory_atomically(dir, output_);
  last_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::debug("checkpoint of step {} written in {:.2f} s", snapshot.step, last_seconds_);
}

}  // namespace fleet::sailor::runtime
