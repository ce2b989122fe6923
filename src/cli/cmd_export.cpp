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
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/train/safetensors_gpt2.hpp"
#include "tierzero/train/store_provider.hpp"
#include "tierzero/train/training_checkpoint.hpp"

namespace tierzero::cli {

namespace {

struct ExportFlags {
  std::string checkpoint;
  std::string output;
};

namespace fs = std::filesystem;

bool is_checkpoint_dir(const fs::path& p) {
  const std::string name = p.filename().string();
  if (train::checkpoint_step_of(name) >= 0) return true;  // ours, or being written (.tmp)
  if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 &&
      train::checkpoint_step_of(name.substr(0, name.size() - 4)) >= 0)
    return true;
  std::ifstream m(p / "manifest.json");
  char head[256] = {};
  m.read(head, sizeof head - 1);
  return std::string(head).find("tierzero-checkpoint") != std::string::npos;
}

// Export writes a temporary file beside the output and renames it: an output among the files it
// reads, or anywhere in a checkpoint's directory, would replace what it reads.
void check_output(const std::string& output, const std::string& given, const std::string& dir) {
  std::error_code ec;
  const fs::path out = fs::weakly_canonical(fs::absolute(output), ec);
  TZ_CHECK(!ec && !fs::is_directory(out), "export output '" + output + "' is a directory",
           "give -o a file name, e.g. model.safetensors");
  const fs::path step = fs::weakly_canonical(dir, ec), top = fs::weakly_canonical(given, ec);
  TZ_CHECK(out != top && out != top / "latest",
           "export output '" + output + "' is the checkpoint it reads ('" + given + "')",
           "write the safetensors file outside the checkpoint");
  for (fs::path p = out.parent_path(); !p.empty(); p = p.parent_path()) {
    TZ_CHECK(p != step && !is_checkpoint_dir(p),
             "export output '" + output + "' lies inside the checkpoint directory '" + p.string() +
                 "' (writing there would damage the checkpoint)",
             "write the safetensors file outside the checkpoint, e.g. -o model.safetensors");
    if (p == p.root_path()) break;
  }
}

int run_export(const ExportFlags& f) {
  const std::string dir = train::resolve_checkpoint_dir(f.checkpoint);
  check_output(f.output, f.checkpoint, dir);
  // Every rank the manifest lists, every field and every range, before anything is read.
  const train::CheckpointContents contents = train::open_checkpoint(dir);
  const nlohmann::json& id = contents.manifest.identity;
  TZ_CHECK(id.value("tp", 1) == 1,
           "checkpoint '" + dir + "' holds tensor-parallel pieces (tp " + id.at("tp").dump() +
               "), which export does not assemble yet",
           "save the model with train --save model.bin (llm.c) instead");
  const nn::GPTConfig config = train::checkpoint_model(contents);
  const nn::ParamLayout layout(config);
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
