// dz-compress: compress a fine-tuned model as a sparse, low-bit delta from its base model, and reconstruct it.
#include "cli/cli.h"
#include "devices/device_info.h"
#include "fleet/config.h"
#if FLEET_WITH_TORCH
#include "deltazip/torch/delta_compressor.h"
#include "dz-compress/compress_command.h"
#include "dz-compress/eval_commands.h"
#include "dz-compress/inspect_command.h"
#endif

#if FLEET_WITH_TORCH
namespace {

// What `compare` and `eval` score, and how: the options both share.
template <typename Command>
void add_scoring_options(CLI::App* command, Command& c, std::vector<std::string>& text) {
  command->add_option("--text", text, "Text file(s) to score ('-': standard input)");
  command->add_option("--task", c.tasks, "Synthetic task(s) to measure: copy, reverse, sort, add");
  command->add_option("--samples", c.samples, "Examples per task")
      ->capture_default_str()
      ->check(fleet::in_range(1, 1e6));
  command->add_option("--seed", c.seed, "Seed of the task examples")
      ->capture_default_str()
      ->check(fleet::in_range(0, 9.2e18));
  command->add_option("--window", c.window, "Tokens per scoring window")
      ->capture_default_str()
      ->check(fleet::in_range(2, 1e6));
  command->add_option("--device", c.device, "cpu, cuda or auto (the GPU when libtorch sees one)")
      ->capture_default_str();
  fleet::add_threads_option(command, &c.threads);
  fleet::add_json_flag(command, &c.json);
}

namespace dz = fleet::deltazip;

// What the subcommands fill from the command line; lives until the tool runs.
struct Commands {
  dz::CompressCommand compress;
  bool compress_json = false;
  dz::DecompressCommand decompress;
  dz::InspectCommand inspect;
  fleet::model::CompareCommand compare;
  std::string base_dir, target_dir, reconstructed_dir;
  std::vector<std::string> compare_text;
  fleet::model::EvalCommand eval;
  std::vector<std::string> eval_text;
};

// The form of each compressed matrix (bits, sparsity, grid, groups), or a
// size budget that chooses it per layer.
void add_form_options(CLI::App* cc, dz::CompressCommand& compress) {
  CLI::Option* bits_option = cc->add_option("--bits", compress.bits,
                                            "Bits per kept weight: 1 (sign x scale), 2, 3, 4 or 8 (--grid ternary: 2)")
                                 ->capture_default_str()
                                 ->check(fleet::in_range(1, 8));
  CLI::Option* sparsity_option =
      cc->add_option("--sparsity", compress.sparsity, "none, N:M (N of every M pruned, e.g. 2:4) or a pruned fraction")
          ->capture_default_str();
  cc->add_option("--rank", compress.rank,
                 "Low rank: each linear layer's delta as two factors of this rank, up [out, R] x down [R, in], "
                 "each dense at --bits (2-8) with one scale per row (no sparsity; 0: full rank)")
      ->capture_default_str()
      ->check(fleet::in_range(0, 1e6));
  cc->add_option("--group-size", compress.group_size, "Input columns per scale (-1: one scale per row)")
      ->capture_default_str()
      ->check(fleet::in_range(-1, 1e6));
  cc->add_flag("--sym,!--asym", compress.symmetric, "Symmetric (default) or asymmetric quantization grid");
  cc->add_option("--grid", compress.grid,
                 "Levels per row or group: minmax (uniform over the range), mse (range clipped to the least squared "
                 "error), ternary (-s, 0, +s) or lloyd (2^bits levels fitted by Lloyd's algorithm, stored as a "
                 "codebook)")
      ->capture_default_str();
  CLI::Option* ratio_option =
      cc->add_option("--target-ratio", compress.target_ratio,
                     "Size budget: the whole file at most the fp16 model's size / R; each linear layer's form (bits "
                     "and sparsity, or low rank) is chosen to meet it (instead of --bits, --sparsity, --grid, "
                     "--group-size, --rank)")
          ->check(fleet::in_range(1, 1e6));
  CLI::Option* max_bytes_option =
      cc->add_option("--max-bytes", compress.max_bytes, "Size budget in bytes for the whole file (as --target-ratio)")
          ->check(fleet::in_range(1, 1e18));
  cc->parse_complete_callback([cc, &compress, bits_option, sparsity_option, ratio_option, max_bytes_option] {
    // Ternary levels are 2-bit codes: no need to say so twice.
    if (compress.grid == "ternary" && bits_option->count() == 0) compress.bits = 2;
    // Factors are dense: the default 2:4 does not apply to them.
    if (compress.rank > 0 && sparsity_option->count() == 0) compress.sparsity = "none";
    if (ratio_option->count() + max_bytes_option->count() == 0) return;
    // Both budgets at once: the library refuses it (checked_options).
    for (const char* fixed : {"--bits", "--sparsity", "--grid", "--group-size", "--asym", "--rank"})
      if (cc->count(fixed) > 0)
        throw CLI::ValidationError(std::string(fixed) +
                                   " fixes what a size budget chooses per layer; give one or the other");
  });
}

void add_compress(fleet::Tool& tool, Commands& c) {
  dz::CompressCommand& compress = c.compress;
  CLI::App* cc = tool.add_command("compress", "Compress TARGET as a sparse low-bit delta from BASE into one HDF5 file",
                                  [&c] { return dz::run_compress(c.compress, c.compress_json); });
  cc->add_option("--base", compress.base, "Base model folder")->required();
  cc->add_option("--target", compress.target, "Fine-tuned model folder (same architecture and shapes)")->required();
  cc->add_option("-o,--output", compress.output, "Delta container to write (.h5)")
      ->transform(fleet::output_path())
      ->required();
  add_form_options(cc, compress);
  cc->add_flag("--act-order", compress.act_order, "Process columns by descending Hessian diagonal");
  cc->add_option("--damp", compress.damp, "Diagonal damping, fraction of the mean diagonal")
      ->capture_default_str()
      ->check(fleet::in_range(0, 1));
  cc->add_option("--block-size", compress.block_size, "Columns per OBS block")
      ->capture_default_str()
      ->check(fleet::in_range(1, 65536));
  cc->add_option("--method", compress.method, "obs (SparseGPT + GPTQ) or rtn (round to nearest, magnitude pruning)")
      ->capture_default_str();
  cc->add_option("--calib", compress.calib, "Calibration text (default: the built-in synthetic corpus)");
  cc->add_option("--calib-samples", compress.calib_samples,
                 "Calibration sequences (0: two tokens per input of the widest linear layer, 8 to 64 sequences)")
      ->capture_default_str()
      ->check(fleet::in_range(0, 1e5));
  cc->add_option("--seq-len", compress.seq_len, "Tokens per calibration sequence")
      ->capture_default_str()
      ->check(fleet::in_range(2, 1e6));
  cc->add_option("--dense-policy", compress.dense_policy,
                 "Embeddings, norms, LM head: delta-zstd (float16 delta) or full (fine-tuned tensor)")
      ->capture_default_str();
  cc->add_option("--embedding-bits", compress.embedding_bits,
                 "delta-zstd: store the embedding's changed rows only, at this many bits with a scale per row (2-8; "
                 "0: the whole delta in float16)")
      ->capture_default_str()
      ->check(fleet::in_range(0, 8));
  cc->add_option("--zstd-level", compress.zstd_level, "zstd level of the lossless stage (1-22)")
      ->capture_default_str()
      ->check(fleet::in_range(1, 22));
  cc->add_option("--device", compress.device, "cpu, cuda or auto: where the calibration forward and OBS sweeps run")
      ->capture_default_str();
  fleet::add_threads_option(cc, &compress.threads);
  cc->add_flag("--force", compress.force, "Replace an existing output");
  fleet::add_json_flag(cc, &c.compress_json);
}

void add_decompress_and_inspect(fleet::Tool& tool, Commands& c) {
  CLI::App* dc = tool.add_command("decompress", "Rebuild the fine-tuned model folder from BASE and a delta",
                                  [&c] { return dz::run_decompress(c.decompress); });
  dc->add_option("delta", c.decompress.delta, "Delta container")->required();
  dc->add_option("--base", c.decompress.base, "Base model folder (must be the one the delta was made from)")
      ->required();
  dc->add_option("-o,--output", c.decompress.output, "Model folder to write")
      ->transform(fleet::output_path())
      ->required();
  dc->add_flag("--force", c.decompress.force, "Replace a non-empty output folder");

  CLI::App* ic = tool.add_command("inspect", "Sizes, bits per weight, ratios, settings and base identity of a delta",
                                  [&c] { return dz::run_inspect(c.inspect); });
  ic->add_option("delta", c.inspect.delta, "Delta container")->required();
  fleet::add_json_flag(ic, &c.inspect.json);
}

void add_scoring_commands(fleet::Tool& tool, Commands& c) {
  CLI::App* cmp =
      tool.add_command("compare", "Perplexity and task accuracy of base, fine-tune and reconstruction", [&c] {
        c.compare.models = {{"base", c.base_dir}, {"target", c.target_dir}, {"reconstructed", c.reconstructed_dir}};
        for (const auto& t : c.compare_text) c.compare.text.emplace_back(t);
        return fleet::model::run_compare(c.compare);
      });
  cmp->add_option("--base", c.base_dir, "Base model folder")->required();
  cmp->add_option("--target", c.target_dir, "Fine-tuned model folder")->required();
  cmp->add_option("--reconstructed", c.reconstructed_dir, "Folder written by decompress")->required();
  add_scoring_options(cmp, c.compare, c.compare_text);

  CLI::App* eval_cmd = tool.add_command("eval", "Perplexity on text and exact-match accuracy on synthetic tasks", [&c] {
    for (const auto& t : c.eval_text) c.eval.text.emplace_back(t);
    return fleet::model::run_eval(c.eval);
  });
  eval_cmd->add_option("--model", c.eval.model, "Model folder (Hugging Face layout)")->required();
  eval_cmd->add_option("--dtype", c.eval.dtype,
                       "Compute dtype: float32 or bfloat16 (default: float32 on the CPU, "
                       "bfloat16 on a GPU)");
  add_scoring_options(eval_cmd, c.eval, c.eval_text);
}

}  // namespace
#endif

int main(int argc, char** argv) {
  fleet::Tool tool("dz-compress",
                   "Compress a fine-tuned model as a sparse, low-bit delta from its base model, and reconstruct it; "
                   "measure models (perplexity, task accuracy).");
  tool.set_version_details(fleet::devices::version_details);
#if FLEET_WITH_TORCH
  Commands commands;
  add_compress(tool, commands);
  add_decompress_and_inspect(tool, commands);
  add_scoring_commands(tool, commands);
#endif
  return tool.run(argc, argv);
}
