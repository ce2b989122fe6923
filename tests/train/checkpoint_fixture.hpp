// Small valid training checkpoints for the robustness and fuzz tests, written by the real code: a
// tiny model trained in-process for 2 steps (the reference path: ZeRO's store would start MPI),
// and a 2-rank ZeRO-style checkpoint (each rank one half of every unit's shards) written by two
// CheckpointWriters in one process, as two ranks would.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "scratch_dir.hpp"
#include "tierzero/train/train_config.hpp"
#include "tierzero/train/trainer.hpp"
#include "tierzero/train/training_checkpoint.hpp"

namespace tz_test {

inline std::string scratch_dir(const std::string& name) {
  const std::string d = tierzero::testing::scratch_dir("tz_ckrob") + "/" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline tierzero::train::TrainConfig tiny_run(int64_t stage, int64_t steps) {
  tierzero::train::TrainConfig c = tierzero::train::TrainConfig::defaults();
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_embd = 16;
  c.model.context_length = 16;
  c.seq_len = 16;
  c.micro_batch_size = 2;
  c.steps = steps;
  c.threads = 1;
  c.val_batches = 0;
  c.zero.stage = stage;
  return c;
}

// Trains the tiny model for `steps` steps saving into `save_dir` (every `every` steps, and at the
// end); returns the last step directory.
inline std::string train_checkpoint(const std::string& save_dir, int64_t stage, int64_t steps = 2,
                                    int64_t every = 0, int64_t blocks_per_unit = 1) {
  tierzero::train::TrainConfig c = tiny_run(stage, steps);
  c.blocks_per_unit = blocks_per_unit;
  c.checkpoint.save_dir = save_dir;
  c.checkpoint.save_every = every;
  tierzero::train::Trainer(c).run(nullptr);
  return tierzero::train::resolve_checkpoint_dir(save_dir);
}

// Two ranks' files of one checkpoint: units u0 (100 elements) and u1 (37), each rank holding half
// of each (rounded up, the last shard padded) as param_shard and adam_m in fp32, and the whole unit
// as params_full (a replica on both ranks).
inline std::string write_two_rank_checkpoint(const std::string& save_dir, int64_t step) {
  using tierzero::train::CheckpointWriter;
  nlohmann::ordered_json identity = {
      {"model", "synthetic"}, {"ranks", 2}, {"dp", 2}, {"sp", 1},
      {"zero_stage", 3},      {"tp", 1},    {"pp", 1}, {"blocks_per_unit", 1}};
  CheckpointWriter w0(save_dir, step, 0, nullptr), w1(save_dir, step, 1, nullptr);
  CheckpointWriter* writers[2] = {&w0, &w1};
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  const std::pair<const char*, size_t> units[2] = {{"u0", 100}, {"u1", 37}};
  for (const auto& [unit, numel] : units) {
    tensors.push_back({{"tensor", std::string(unit) + ".w"},
                       {"unit", unit},
                       {"offset", 0},
                       {"shape", nlohmann::ordered_json::array({numel})},
                       {"tp_rank", 0},
                       {"tp_size", 1}});
    std::vector<float> full(numel);  // (numel)
    for (size_t i = 0; i < numel; ++i) full[i] = static_cast<float>(i) * 0.25f + 1.0f;
    const size_t shard = (numel + 1) / 2;
    for (int r = 0; r < 2; ++r) {
      std::vector<float> mine(shard, 0.0f);  // (shard) padded past numel
      for (size_t i = 0; i < shard && r * shard + i < numel; ++i) mine[i] = full[r * shard + i];
      const auto add = [&](const char* kind, size_t begin, const std::vector<float>& v) {
        nlohmann::ordered_json meta = {{"unit", unit},   {"kind", kind},   {"dtype", "fp32"},
                                       {"tier", "host"}, {"begin", begin}, {"elems", v.size()}};
        writers[r]->add_block(std::string(unit) + "." + kind, meta, v.data(),
                              v.size() * sizeof(float));
      };
      add("params_full", 0, full);
      add("param_shard", r * shard, mine);
      add("adam_m", r * shard, mine);
    }
  }
  tierzero::train::ResumePoint point;
  point.step = step;
  point.steps_taken = step;
  w1.commit(identity, point, 0, tensors);  // rank 1 first: rank 0 then renames the directory
  return w0.commit(identity, point, 0, tensors);
}

}  // namespace tz_test
