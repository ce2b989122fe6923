// A run's settings as a canonical list of (name, value) pairs: everything the ranks of one job
// must agree on (the resolved TrainConfig, the data files it reads, the tierzero build), so that
// ranks launched with different configs or flags (an MPMD launch, a stale config on one node)
// are refused at start-up with the first differing setting named (rank_agreement.hpp) instead of
// training on different batches, failing with MPI_ERR_TRUNCATE or waiting out a timeout.
//
// Left out on purpose, because they may differ from node to node without changing what the ranks
// compute or which collectives they issue: the NVMe paths (a node's local drive), aio.* (a node's
// I/O tuning), threads, log_level, the GPU index of "cuda:N", the device and host memory budgets
// (a node's hardware), and keys that change nothing (DeepSpeed's activation_checkpointing
// section, the ignored logging keys). Input files are compared by name and size, not by path, so
// per-node copies of the data at other paths agree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tierzero/train/train_config.hpp"

namespace tierzero::train {

struct RunSetting {
  std::string name;   // the config key's path, e.g. "tierzero.steps"
  std::string value;  // canonical text: numbers shortest round-trip, strings JSON-quoted
  bool operator==(const RunSetting&) const = default;
};
using RunSettings = std::vector<RunSetting>;

// The settings every rank must share, in a fixed order (the build first). Never throws for a
// file it cannot read or list: that becomes the value, so that ranks still compare.
RunSettings run_settings(const TrainConfig& c);

// "name\0value\0..." (no setting name or value holds a NUL), and back; parse throws Error on text
// that is not such a list.
std::string settings_text(const RunSettings& settings);
RunSettings parse_settings_text(const std::string& text);
uint64_t settings_digest(const std::string& text);  // FNV-1a, 64 bits

// The index of the first setting where `other` differs from `reference` (another name or value,
// or one list ending first); none when they are equal.
std::optional<size_t> first_difference(const RunSettings& reference, const RunSettings& other);

// "tierzero.steps (--steps) is 3 on rank 0 but 4 on rank 1", for the difference at `index`.
std::string describe_difference(const RunSettings& reference, int reference_rank,
                                const RunSettings& other, int other_rank, size_t index);

}  // namespace tierzero::train
