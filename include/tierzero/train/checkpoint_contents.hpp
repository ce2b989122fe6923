// A training checkpoint's files (training_checkpoint.hpp) as one validated whole, read before any
// state is: manifest.json and every rank's rank-<r>.json with every field checked (type, range,
// against the files on disk and against each other), every rank the manifest lists present, and
// each unit's state of each kind covered exactly once (no gap, no overlap; the same range on
// several ranks is a replica). Resume and export read through it, so a partial, damaged or forged
// checkpoint is an Error naming the file, the field or range, and what was expected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/train/data_loader.hpp"
#include "tierzero/train/loss_scaler.hpp"

namespace tierzero::train {

struct CheckpointBlock {
  std::string name, unit, kind, dtype, tier;
  size_t begin = 0, elems = 0;   // the global range [begin, begin + elems) in the unit
  size_t offset = 0, bytes = 0;  // where it lies in the rank's .bin
  uint32_t crc = 0;              // CRC32C of those bytes
};

struct CheckpointTensor {
  std::string name, unit;
  size_t offset = 0, numel = 0;  // elements in the unit
  int tp_rank = 0, tp_size = 1;
};

struct CheckpointRankFile {
  int rank = 0;
  std::string json_path, bin_path;
  size_t file_bytes = 0;  // the .bin's size, equal to the file's
  DataLoader::Position data;
  int tp_rank = 0;  // the tensor-parallel piece its tensors are
  std::vector<CheckpointBlock> blocks;
  std::vector<CheckpointTensor> tensors;
};

struct CheckpointManifest {
  std::string path;
  int64_t step = 0;             // optimizer steps done (skipped fp16 steps included)
  int64_t optimizer_steps = 0;  // steps the optimizer took: step - scaler.skipped
  LossScaler::State scaler;
  nlohmann::json identity;
  int ranks = 1;                  // rank files the checkpoint has
  int64_t saved_at_ns = -1;       // when it was written (unix time; -1: not recorded)
  int64_t lr_schedule_steps = 0;  // the LR schedule's length (0: not recorded)
};

struct CheckpointContents {
  std::string dir;
  CheckpointManifest manifest;
  std::vector<CheckpointRankFile> ranks;  // [rank]
};

// `step_dir`'s manifest.json, every field checked.
CheckpointManifest read_checkpoint_manifest_checked(const std::string& step_dir);
// The manifest and every rank's files, checked and complete (see above).
CheckpointContents open_checkpoint(const std::string& step_dir);
// The model a checkpoint holds: the identity's shape, checked against its parameter count and
// the tensors the rank files list, each tp rank's against that rank's layout (so export reads
// what was written). A tensor-parallel checkpoint whose rank files list no tensors is an Error
// (which piece each file holds is unknown).
nn::GPTConfig checkpoint_model(const CheckpointContents& c);
// DIR/step-<N>'s name, and N of a name that is exactly one (-1 otherwise: `step-0000000`, `step-1`,
// `step-00000001.tmp` are not).
std::string checkpoint_step_name(int64_t step);
int64_t checkpoint_step_of(const std::string& name);

}  // namespace tierzero::train
