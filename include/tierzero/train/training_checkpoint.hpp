// Training checkpoints: the whole training state, written by every rank for its own shards, so
// a run resumes exactly where it stopped. A checkpoint is a directory DIR/step-<N> holding
//   rank-<r>.bin   the rank's state blocks back to back, each streamed from whatever tier holds
//                  it (working parameters, fp32 masters, Adam m and v), one block in host memory
//                  at a time;
//   rank-<r>.json  the rank's manifest: every block's name, dtype, tier, global range in its unit,
//                  file offset, bytes and CRC32C; every tensor the rank holds (its unit, offset in
//                  the unit, local shape, tensor-parallel piece); and the rank's data position;
//   manifest.json  written last by rank 0: the run's identity (model, world, stage, placement,
//                  precision), the step, the optimizer's step count and the loss scaler.
// It is written as DIR/step-<N>.tmp, every file fsynced, renamed to DIR/step-<N> by rank 0 once all
// ranks are done, the directory fsynced, and DIR/latest (the step directory's name) replaced
// atomically: a failure at any point leaves the previous checkpoint as it was. `keep_last` rotates
// the oldest written out after a successful save (checkpoint_save_dir.hpp). Reading first checks
// every rank's files whole (checkpoint_contents.hpp), then the identity and every block's CRC,
// and names the file and the field, range or block that is wrong.
#pragma once

#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/train/checkpoint_contents.hpp"
#include "tierzero/train/data_loader.hpp"
#include "tierzero/train/loss_scaler.hpp"

namespace tierzero::train {

// What the trainer restores besides the blocks.
struct ResumePoint {
  int64_t step = 0;         // optimizer steps done: the run continues with step + 1
  int64_t steps_taken = 0;  // the optimizer's count (fp16 steps skipped on overflow excluded)
  LossScaler::State scaler;
  DataLoader::Position data;  // this rank's next training batch
  // The learning-rate schedule's length (its total steps) the run followed; a resumed run keeps
  // it. 0: not recorded (checkpoints written before it was).
  int64_t lr_schedule_steps = 0;
};

// The step directory `path` names: itself when it holds manifest.json, else the one its `latest`
// names. Throws Error naming `latest` when it names no step directory there.
std::string resolve_checkpoint_dir(const std::string& path);

// One rank's side of writing a checkpoint.
class CheckpointWriter {
 public:
  // Opens DIR/step-<step>.tmp/rank-<rank>.bin (rank 0 creates the directory first; `group`
  // orders that, null on one rank). Throws Error naming the path when it cannot.
  CheckpointWriter(const std::string& dir, int64_t step, int rank, comm::Communicator* group);
  ~CheckpointWriter();  // an unfinished writer closes its file (the .tmp directory stays invalid)
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Appends one block; `meta` (dtype, tier, unit, range, ...) goes into the rank's manifest with
  // the block's offset, bytes and CRC32C. Names must be unique within a rank.
  void add_block(const std::string& name, nlohmann::ordered_json meta, const void* data,
                 size_t bytes);
  // Collective over `group`: fsyncs the rank's files (its manifest lists `tensors`, the layout
  // metadata of what it holds), and rank 0 writes manifest.json with `identity` and `point`,
  // renames the directory into place, updates DIR/latest and removes the checkpoints
  // beyond keep_last, oldest written first (0: keep all; rotate_checkpoints). Returns the step
  // directory.
  std::string commit(const nlohmann::ordered_json& identity, const ResumePoint& point,
                     size_t keep_last,
                     const nlohmann::ordered_json& tensors = nlohmann::ordered_json::array());

 private:
  std::string dir_, tmp_dir_, final_dir_;
  int rank_;
  comm::Communicator* group_;
  std::FILE* file_ = nullptr;
  size_t offset_ = 0;
  nlohmann::ordered_json blocks_ = nlohmann::ordered_json::array();
};

// One rank's side of resuming.
class CheckpointReader {
 public:
  // `path`: a step directory, or a directory with `latest`. Reads manifest.json; throws Error
  // (naming the file and what differs) unless the identity equals `identity` in every field but
  // those in `layout_keys` (the world's data-parallel shape, the ZeRO stage, the placement). When
  // those are equal too it reads this rank's manifest and checks its files are whole (the blocks
  // are then read in order with read_block); else same_layout() is false and the state is read
  // by ranges across every rank's files (CheckpointRanges).
  CheckpointReader(const std::string& path, int rank, const nlohmann::ordered_json& identity,
                   const std::vector<std::string>& layout_keys = {});
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;
  const std::string& directory() const { return dir_; }
  bool same_layout() const { return same_layout_; }
  const ResumePoint& point() const { return point_; }
  // Reads the next block, which must be `name` of `bytes` bytes, and checks its CRC32C. A run
  // that holds no AdamW moments (the reference path taking no steps) asks for none: the file's
  // moment blocks are then passed over, not read.
  void read_block(const std::string& name, void* data, size_t bytes);
  // Every block was read (Error naming the first one left otherwise).
  void finish();

 private:
  void pass_optimizer_blocks(const std::string* wanted);

  std::string dir_, bin_path_;
  bool same_layout_ = true;
  std::vector<CheckpointBlock> blocks_;
  size_t next_ = 0;
  bool passed_optimizer_state_ = false;  // this run holds no moments
  ResumePoint point_;
  std::FILE* file_ = nullptr;
};

// Every rank's blocks of a checkpoint, read by range: resuming into another world size, stage or
// placement, and export. A block holds elements [begin, begin + elems) of one unit's state of one
// kind, on one tensor-parallel rank (the ranks of a tp group hold different pieces under the same
// unit names, so a range is always one tp rank's); a range is assembled from that tp rank's blocks
// that overlap it, each read whole and CRC-checked (host memory: the last block read of each tp
// rank, kept for the next range, since export alternates between the ranks' pieces of a tensor),
// zero where no block reaches (shard padding).
class CheckpointRanges {
 public:
  explicit CheckpointRanges(const std::string& step_dir);  // opens it (open_checkpoint)
  explicit CheckpointRanges(const CheckpointContents& checkpoint);
  ~CheckpointRanges();
  CheckpointRanges(const CheckpointRanges&) = delete;
  CheckpointRanges& operator=(const CheckpointRanges&) = delete;
  // Elements [begin, begin + count) of `unit`'s state on tensor-parallel rank `tp_rank` (0 at
  // tp 1) into dst (count x the dtype's bytes), from the first of `kinds` that has blocks of
  // `dtype` for the unit there; false when none has.
  bool read(const std::string& unit, const std::vector<std::string>& kinds,
            const std::string& dtype, size_t begin, size_t count, void* dst, size_t tp_rank = 0);
  // The data position of the writer's rank 0.
  DataLoader::Position first_rank_data() const { return first_data_; }

 private:
  struct Block {
    std::string file;  // rank-N.bin path
    std::string unit, kind, dtype;
    size_t tp_rank = 0;  // its rank file's tensor-parallel piece
    size_t begin = 0, elems = 0, offset = 0, bytes = 0;
    uint32_t crc = 0;
  };
  const std::vector<uint8_t>& load(const Block& b);  // whole, CRC-checked

  std::vector<Block> blocks_;
  DataLoader::Position first_data_;
  std::vector<const Block*> cached_;         // (tp ranks) the block each cache_ holds
  std::vector<std::vector<uint8_t>> cache_;  // (tp ranks) (cached_[r]->bytes)
};

// Preemption: while one lives (and `install` was true), SIGTERM and SIGINT only set a flag that
// the training loop reads after each step (it then saves and stops); a second signal ends the
// process at once. The previous handlers come back when it goes.
class StopSignals {
 public:
  explicit StopSignals(bool install);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  static bool requested();  // a signal arrived since install
  static int signal();      // which (0: none)

 private:
  bool installed_ = false;
  struct sigaction old_[2] = {};  // SIGTERM's and SIGINT's handlers before ours
};

}  // namespace tierzero::train
