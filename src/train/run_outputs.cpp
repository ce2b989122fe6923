// A training run's outputs checked before its first step, and --save's rescue (run_outputs.hpp).
#include "tierzero/train/run_outputs.hpp"

#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/error_report.hpp"
#include "tierzero/core/output_files.hpp"
#include "tierzero/profile/rank_profiles.hpp"
#include "tierzero/train/output_paths.hpp"
#include "tierzero/train/rank_agreement.hpp"

namespace tierzero::train {

namespace {

void add_glob(const std::string& pattern, std::vector<std::string>& out) {
  if (pattern.empty()) return;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
}

// The save directory holds the run's own files: `latest`, its lock, its step-N directories (and
// their .tmp / .removing forms while written or removed) and rescue-*.bin. An output at one of
// those names (or inside a step directory) would replace one of them (--save onto `latest`
// made the directory unresumable) or be replaced (--metrics as the lock ended empty); any
// other name in the directory is the user's.
void check_outside_save_dir(const std::string& flag, const std::string& path,
                            const std::string& save_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(fs::absolute(save_dir, ec), ec);
  const fs::path file = fs::weakly_canonical(fs::absolute(path, ec), ec);
  const auto [d, f] = std::mismatch(dir.begin(), dir.end(), file.begin(), file.end());
  if (d != dir.end() || f == file.end()) return;  // outside the directory
  const std::string name = f->string();           // its entry in the save directory
  const bool ours = name == "latest" || name == "tierzero.lock" || name.rfind("step-", 0) == 0 ||
                    name.rfind("rescue-", 0) == 0;
  TZ_CHECK(!ours,
           flag + " '" + path + "' would be '" + name + "' in --save-dir '" + save_dir +
               "', a name the run's checkpoints use (latest, tierzero.lock, step-N, rescue-*)",
           "give it another name, or write it outside the save directory");
}

// The message of this rank's first output that cannot be written; empty when all can.
std::string first_output_problem(const RunOutputs& o, const std::vector<std::string>& inputs,
                                 int rank) {
  std::vector<std::pair<std::string, std::string>> files;
  if (rank == 0 && !o.save.empty()) files.emplace_back("--save", o.save);
  if (rank == 0 && !o.metrics.empty()) files.emplace_back("--metrics", o.metrics);
  if (!o.memory_json.empty())
    files.emplace_back("--memory-json",
                       rank == 0 ? o.memory_json : o.memory_json + ".rank" + std::to_string(rank));
  if (!o.profile.empty())
    files.emplace_back("--profile", profile::rank_profile_path(o.profile, rank));
  try {
    if (!o.save_dir.empty()) check_output_dir("--save-dir", o.save_dir);
    check_distinct_outputs(files);
    for (const auto& [flag, path] : files) check_output_file(flag, path, inputs);
    if (!o.save_dir.empty())
      for (const auto& [flag, path] : files) check_outside_save_dir(flag, path, o.save_dir);
  } catch (const Error& e) {
    return error_message(e, false);
  }
  return "";
}

std::string time_stamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%d-%H%M%S", &tm);
  return text;
}

}  // namespace

std::vector<std::string> run_inputs(const TrainConfig& c) {
  std::vector<std::string> in;
  if (!c.config_file.empty()) in.push_back(c.config_file);
  add_glob(c.train_data, in);
  add_glob(c.val_data, in);
  if (!c.load_checkpoint.empty()) in.push_back(c.load_checkpoint);
  if (!c.checkpoint.resume.empty()) in.push_back(c.checkpoint.resume);
  return in;
}

void check_run_outputs(const RunOutputs& outputs, const std::vector<std::string>& inputs, int rank,
                       comm::Communicator* group) {
  throw_if_any_rank_failed(first_output_problem(outputs, inputs, rank), rank, group);
}

std::vector<std::string> rescue_paths(const std::string& save_dir) {
  const std::string name = "rescue-" + time_stamp() + "-" + std::to_string(::getpid()) + ".bin";
  std::vector<std::string> dirs;
  if (!save_dir.empty()) dirs.push_back(save_dir);
  std::error_code ec;
  dirs.push_back(std::filesystem::current_path(ec).string());
  dirs.push_back(std::filesystem::temp_directory_path(ec).string());
  std::vector<std::string> paths;
  for (const std::string& d : dirs)
    if (!d.empty()) paths.push_back((std::filesystem::path(d) / name).string());
  return paths;
}

TolerantModelWriter::TolerantModelWriter(const std::string& path, const nn::GPTConfig& config,
                                         const nn::ParamLayout& layout) {
  try {
    writer_ = std::make_unique<ModelFileWriter>(path, config, layout);
  } catch (const Error& e) {
    failure_ = error_message(e, false);  // what and hint, not the source line
  }
}

void TolerantModelWriter::write(size_t begin, size_t count, const float* values) {
  if (!failure_.empty()) return;
  try {
    writer_->write(begin, count, values);
  } catch (const Error& e) {
    failure_ = error_message(e, false);  // what and hint, not the source line
    writer_.reset();  // removes its temporary: a full disk gets its space back for the rescue
  }
}

void TolerantModelWriter::commit() {
  if (!failure_.empty()) return;
  try {
    writer_->commit();
  } catch (const Error& e) {
    failure_ = error_message(e, false);  // what and hint, not the source line
  }
  writer_.reset();
}

std::string save_or_rescue(const std::string& path, const std::string& save_dir, int rank,
                           comm::Communicator* group,
                           const std::function<std::string(const std::string&)>& save) {
  // The rescue names are rank 0's; the other ranks only need as many tries.
  const std::vector<std::string> rescues = rescue_paths(save_dir);
  std::string first_failure = save(path);
  if (rank_failures(!first_failure.empty(), rank, group)[0] == 0.0f) return "";
  std::string tried;
  for (const std::string& rescue : rescues) {
    const std::string failed = save(rescue);
    if (rank_failures(!failed.empty(), rank, group)[0] == 0.0f)
      return "--save '" + path + "' could not be written (" + first_failure +
             "); the trained model was saved to '" + rescue + "' instead";
    tried += "; '" + rescue + "': " + failed;
  }
  return "--save '" + path + "' could not be written (" + first_failure + "), nor any rescue file" +
         tried + ": the trained model is lost";
}

}  // namespace tierzero::train
