// The files a training run writes: checked on every rank before the first step (so a bad --save,
// --profile, --memory-json, --metrics or --save-dir is found before hours of training, not
// after), and, when --save still fails at the end (a full disk, a directory removed meanwhile),
// the model written somewhere named instead of lost.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tierzero/train/checkpoint.hpp"
#include "tierzero/train/train_config.hpp"

namespace tierzero::comm {
class Communicator;
}

namespace tierzero::train {

struct RunOutputs {
  std::string save;         // --save (rank 0 writes it)
  std::string metrics;      // --metrics (rank 0)
  std::string memory_json;  // --memory-json (every rank; rank r > 0: <path>.rank<r>)
  std::string profile;      // --profile (every rank; profile::rank_profile_path)
  std::string save_dir;     // --save-dir (every rank writes into it)
};

// What a run reads: the config file, its data shards (globs expanded), the model it loads and the
// checkpoint it resumes.
std::vector<std::string> run_inputs(const TrainConfig& config);

// Every rank checks the outputs it will write (core's check_output_file / check_output_dir, and
// that no two are the same file), then the ranks agree over `group` (null: one rank). On any
// failure every rank throws SameOnEveryRankError; the lowest failing rank's names the flag and the
// path and is the one reported.
void check_run_outputs(const RunOutputs& outputs, const std::vector<std::string>& inputs, int rank,
                       comm::Communicator* group);

// Where the model goes when --save fails: rescue-<time>-<pid>.bin in the save directory (when
// there is one), the working directory, then the system's temporary directory, in that order.
std::vector<std::string> rescue_paths(const std::string& save_dir);

// A ModelFileWriter that keeps its first failure instead of throwing it, so rank 0 goes on taking
// the other ranks' pieces (the save is collective) and the ranks can agree to save again
// elsewhere. failure() is empty after a successful commit().
class TolerantModelWriter {
 public:
  TolerantModelWriter(const std::string& path, const nn::GPTConfig& config,
                      const nn::ParamLayout& layout);
  void write(size_t begin, size_t count, const float* values);
  void commit();
  const std::string& failure() const { return failure_; }

 private:
  std::unique_ptr<ModelFileWriter> writer_;
  std::string failure_;
};

// Saves the model with `save(path)` (collective; returns rank 0's failure, empty on success and on
// the other ranks) to `path`, else to each rescue path in turn, the ranks agreeing after each
// try. Returns "" when `path` was written; else (every rank) the message that says where the
// model went, or that every try failed.
std::string save_or_rescue(const std::string& path, const std::string& save_dir, int rank,
                           comm::Communicator* group,
                           const std::function<std::string(const std::string&)>& save);

}  // namespace tierzero::train
