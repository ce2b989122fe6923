// `tierzero export DIR -o model.safetensors`: a training checkpoint's model (its fp32 master
// values, assembled by range from every rank's shards) as a Hugging Face GPT-2 safetensors file,
// one tensor at a time: host memory holds one tensor and one checkpoint block, never the model.
// Every rank's files are checked whole first (open_checkpoint), the output may not be one of them
// nor lie in a checkpoint's directory, and it appears only once written whole (a temporary file
// renamed). Prints the peak resident set size it measured.
#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "commands.hpp"
#include "tierzero/core/dtype.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/train/output_paths.hpp"
#include "tierzero/train/safetensors_gpt2.hpp"
#include "tierzero/train/store_provider.hpp"
#include "tierzero/train/training_checkpoint.hpp"

namespace tierzero::cli {

namespace {

struct ExportFlags {
  std::string checkpoint;
  std::string output;
};

int run_export(const ExportFlags& f) {
  const std::string dir = train::resolve_checkpoint_dir(f.checkpoint);
  // Export writes a temporary file beside the output and renames it: an output among the files
  // it reads, or anywhere in a checkpoint's directory, would replace what it reads.
  train::check_output_file("export output", f.output, {f.checkpoint, dir});
  // Every rank the manifest lists, every field and every range, before anything is read.
  const train::CheckpointContents contents = train::open_checkpoint(dir);
  const nlohmann::json& id = contents.manifest.identity;
  TZ_CHECK(id.value("tp", 1) == 1,
           "checkpoint '" + dir + "' holds tensor-parallel pieces (tp " + id.at("tp").dump() +
               "), which export does not assemble yet",
           "save the model with train --save model.bin (llm.c) instead");
  const nn::GPTConfig config = train::checkpoint_model(contents);
  const nn::ParamLayout layout = nn::gpt_param_layout(config);
  const train::UnitGrouping g = train::group_units(layout, id.value("blocks_per_unit", size_t{1}));
  train::CheckpointRanges ranges(contents);
  size_t tensors = 0, bytes = 0;
  train::write_gpt2_safetensors(f.output, config, [&](const train::Gpt2Tensor& t, float* ours) {
    const nn::ParamTensor& p = layout.get(t.kind, t.layer);
    const size_t unit = g.store_unit[p.unit];
    const size_t at = g.offset[p.unit] + layout.offset_in_unit(p);
    TZ_CHECK(ranges.read(g.specs[unit].name, {"master", "params_full", "param_shard"},
                         dtype_name(DType::f32), at, p.numel, ours),
             "checkpoint '" + dir + "' holds no fp32 values of unit " + g.specs[unit].name,
             "export a checkpoint written by train --save-dir");
    ++tensors;
    bytes += t.numel() * sizeof(float);
  });
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf(
      "exported %zu tensors (%.1f MB, GPT-2 %s) from '%s' to '%s'; peak resident memory %.1f "
      "MB\n",
      tensors, static_cast<double>(bytes) / 1e6, config.str().c_str(), dir.c_str(),
      f.output.c_str(), static_cast<double>(usage.ru_maxrss) / 1024.0);
  return 0;
}

}  // namespace

Command add_export_command(CLI::App& app) {
  auto f = std::make_shared<ExportFlags>();
  CLI::App* sub = app.add_subcommand(
      "export", "a training checkpoint's model as a Hugging Face GPT-2 safetensors file");
  sub->add_option("checkpoint", f->checkpoint, "a step directory, or a --save-dir (its latest)")
      ->required();
  sub->add_option("-o,--output", f->output, "the safetensors file to write")->required();
  return {sub, [f] { return run_export(*f); }};
}

}  // namespace tierzero::cli
