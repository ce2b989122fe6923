// `tierzero export DIR -o model.safetensors`: a training checkpoint's model (its fp32 master
// values, assembled by range from every rank's shards and, under tensor parallelism, from every tp
// rank's pieces: CheckpointTensors) as a Hugging Face GPT-2 safetensors file, one tensor at a
// time: host memory holds one tensor and one checkpoint block per tp rank, never the model.
// Every rank's files are checked whole first (open_checkpoint), the output may not be one of them
// nor lie in a checkpoint's directory, and it appears only once written whole (a temporary file
// renamed). Prints the peak resident set size it measured. With --hf-dir (or -o naming a
// directory) it writes a Hugging Face model directory instead (hf_directory.hpp): bf16, fp16 or
// fp32, sharded by --max-shard-size.
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "commands.hpp"
#include "tierzero/core/dtype.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/checkpoint_tensors.hpp"
#include "tierzero/train/hf_directory.hpp"
#include "tierzero/train/output_paths.hpp"
#include "tierzero/train/safetensors_gpt2.hpp"
#include "tierzero/train/training_checkpoint.hpp"

namespace tierzero::cli {

namespace {

struct ExportFlags {
  std::string checkpoint;
  std::string output;
  bool hf_dir = false;                   // write a Hugging Face model directory
  std::string dtype = "bf16";            // of the directory's tensors
  std::string max_shard_size = "5GB";    // of each of its shards
  bool directory_options_given = false;  // --dtype or --max-shard-size on the command line
};

// "5GB", "100MB", "64KiB", "4096": bytes, in decimal (KB, MB, GB, as transformers reads them) or
// binary (KiB, MiB, GiB) units.
uint64_t parse_size(const std::string& text) {
  size_t end = 0;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  const std::string unit = text.substr(end);
  static const std::pair<const char*, uint64_t> kUnits[] = {{"", 1},
                                                            {"B", 1},
                                                            {"KB", 1000},
                                                            {"MB", 1000'000},
                                                            {"GB", 1000'000'000},
                                                            {"KiB", 1u << 10},
                                                            {"MiB", 1u << 20},
                                                            {"GiB", uint64_t{1} << 30}};
  for (const auto& [name, scale] : kUnits)
    if (end > 0 && end <= 12 && unit == name) {
      const uint64_t n = std::stoull(text.substr(0, end));
      if (n > 0) return n * scale;
    }
  TZ_THROW("--max-shard-size '" + text + "' is not a positive size",
           "write it as e.g. 5GB, 200MB, 64KiB or a byte count");
}

// ", assembled from tp N pieces" for a tensor-parallel checkpoint.
std::string tp_note(const train::CheckpointTensors& model) {
  return model.tp() > 1 ? ", assembled from tp " + std::to_string(model.tp()) + " pieces" : "";
}

// The output is a Hugging Face directory when asked, or when -o names one (or ends in '/').
bool directory_output(const ExportFlags& f) {
  return f.hf_dir || (!f.output.empty() && f.output.back() == '/') ||
         std::filesystem::is_directory(f.output);
}

// The model as a Hugging Face directory: the checkpoint read tensor part by tensor part.
int export_directory(const ExportFlags& f, const std::string& dir, const nn::GPTConfig& config,
                     train::CheckpointTensors& model) {
  train::HfExportOptions options;
  TZ_CHECK(f.dtype == "bf16" || f.dtype == "fp16" || f.dtype == "fp32",
           "--dtype '" + f.dtype + "' is not one of bf16, fp16, fp32", "");
  options.dtype = f.dtype == "bf16" ? DType::bf16 : f.dtype == "fp16" ? DType::f16 : DType::f32;
  options.max_shard_bytes = parse_size(f.max_shard_size);
  const train::HfExportSummary sum = train::write_hf_directory(
      f.output, config, options,
      [&](const train::HfTensor& t, size_t row, size_t rows, float* ours) {
        model.read(t.kind, t.layer, row * t.cols, rows * t.cols, ours);
      });
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf(
      "exported %zu tensors (%.1f MB of %s in %zu shards, %s %s%s) from '%s' to directory '%s'; "
      "peak resident memory %.1f MB\n",
      sum.tensors, static_cast<double>(sum.bytes) / 1e6, f.dtype.c_str(), sum.shards,
      train::hf_architecture_of(config).name.c_str(), config.str().c_str(), tp_note(model).c_str(),
      dir.c_str(), f.output.c_str(), static_cast<double>(usage.ru_maxrss) / 1024.0);
  return 0;
}

int run_export(const ExportFlags& f) {
  const std::string dir = train::resolve_checkpoint_dir(f.checkpoint);
  const bool to_directory = directory_output(f);
  TZ_CHECK(to_directory || !f.directory_options_given,
           "--dtype and --max-shard-size apply to a Hugging Face directory output",
           "add --hf-dir (the single safetensors file is always fp32)");
  // Export writes a temporary file beside the output and renames it: an output among the files
  // it reads, or anywhere in a checkpoint's directory, would replace what it reads.
  if (to_directory) {
    const std::filesystem::path out = std::filesystem::weakly_canonical(f.output),
                                in = std::filesystem::weakly_canonical(dir);
    const auto [o, i] = std::mismatch(out.begin(), out.end(), in.begin(), in.end());
    TZ_CHECK(o != out.end(),
             "export output '" + f.output + "' holds the checkpoint '" + dir + "' it reads",
             "name a new or empty directory: export never replaces files");
    train::check_output_dir("export output", f.output);
  } else
    train::check_output_file("export output", f.output, {f.checkpoint, dir});
  // Every rank the manifest lists, every field and every range, before anything is read.
  const train::CheckpointContents contents = train::open_checkpoint(dir);
  // Every tp rank's tensors where its layout puts them (checkpoint_model checks), so each whole
  // tensor is assembled from the ranks' pieces.
  const nn::GPTConfig config = train::checkpoint_model(contents);
  train::CheckpointTensors model(contents, config);
  if (to_directory) return export_directory(f, dir, config, model);
  size_t tensors = 0, bytes = 0;
  train::write_gpt2_safetensors(f.output, config, [&](const train::Gpt2Tensor& t, float* ours) {
    model.read(t.kind, t.layer, 0, t.rows * t.cols, ours);
    ++tensors;
    bytes += t.numel() * sizeof(float);
  });
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf(
      "exported %zu tensors (%.1f MB, GPT-2 %s%s) from '%s' to '%s'; peak resident memory "
      "%.1f MB\n",
      tensors, static_cast<double>(bytes) / 1e6, config.str().c_str(), tp_note(model).c_str(),
      dir.c_str(), f.output.c_str(), static_cast<double>(usage.ru_maxrss) / 1024.0);
  return 0;
}

}  // namespace

Command add_export_command(CLI::App& app) {
  auto f = std::make_shared<ExportFlags>();
  CLI::App* sub = app.add_subcommand(
      "export",
      "a training checkpoint's model as a Hugging Face GPT-2 safetensors file or model directory");
  sub->add_option("checkpoint", f->checkpoint, "a step directory, or a --save-dir (its latest)")
      ->required();
  sub->add_option(
         "-o,--output", f->output,
         "the safetensors file to write, or a Hugging Face model directory (with --hf-dir, "
         "or a path ending in '/', or an existing empty directory)")
      ->required();
  sub->add_flag("--hf-dir", f->hf_dir,
                "write a Hugging Face model directory (config.json, sharded safetensors, "
                "model.safetensors.index.json) that transformers loads");
  // Given, not merely different from their defaults: --dtype bf16 on a single file is refused too.
  CLI::Option* dtype = sub->add_option("--dtype", f->dtype,
                                       "the directory's tensor type: bf16 (default), fp16, fp32");
  CLI::Option* shard =
      sub->add_option("--max-shard-size", f->max_shard_size,
                      "the directory's largest shard, e.g. 5GB (default), 200MB, 64KiB");
  return {sub, [f, dtype, shard] {
            f->directory_options_given = dtype->count() > 0 || shard->count() > 0;
            return run_export(*f);
          }};
}

}  // namespace tierzero::cli
