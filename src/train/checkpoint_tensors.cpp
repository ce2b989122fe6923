// Whole tensors from a checkpoint's shards and tensor-parallel pieces (checkpoint_tensors.hpp).
#include "tierzero/train/checkpoint_tensors.hpp"

#include <algorithm>
#include <cstring>

#include "tierzero/core/dtype.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt_modules.hpp"

namespace tierzero::train {

namespace {

// One run of a tp rank's piece inside the range read: `n` elements from `local` (elements into the
// rank's tensor) to `at` (elements into the range).
struct PieceRun {
  size_t local, at, n;
};

}  // namespace

CheckpointTensors::CheckpointTensors(const CheckpointContents& checkpoint,
                                     const nn::GPTConfig& model)
    : dir_(checkpoint.dir), whole_(nn::gpt_param_layout(model)), ranges_(checkpoint) {
  const nlohmann::json& id = checkpoint.manifest.identity;
  const size_t tp = id.value("tp", size_t{1});
  const size_t bpu = id.value("blocks_per_unit", size_t{1});
  for (size_t r = 0; r < tp; ++r) {
    pieces_.push_back(nn::gpt_param_layout(model, {tp, r}));
    units_.push_back(group_units(pieces_.back(), bpu));
  }
}

void CheckpointTensors::read_piece(size_t r, const nn::ParamTensor& local, size_t begin,
                                   size_t count, float* dst) {
  const UnitGrouping& g = units_[r];
  const std::string& unit = g.specs[g.store_unit[local.unit]].name;
  const size_t at = g.offset[local.unit] + pieces_[r].offset_in_unit(local) + begin;
  TZ_CHECK(ranges_.read(unit, {"master", "params_full", "param_shard"}, dtype_name(DType::f32), at,
                        count, dst, r),
           "checkpoint '" + dir_ + "' holds no fp32 values of unit " + unit +
               (tp() > 1 ? " (tp rank " + std::to_string(r) + ")" : ""),
           "export a checkpoint written by train --save-dir");
}

void CheckpointTensors::read(nn::ParamKind kind, int layer, size_t first, size_t count,
                             float* out) {
  const nn::ParamTensor& whole = whole_.get(kind, layer);
  TZ_CHECK(first <= whole.numel && count <= whole.numel - first,
           "elements [" + std::to_string(first) + ", " + std::to_string(first + count) +
               ") of tensor " + whole.name() + " are not among its " + std::to_string(whole.numel),
           "internal error: export asked for elements the tensor does not have");
  if (count == 0) return;
  const size_t begin = first, end = first + count;  // elements of the whole tensor
  if (tp() == 1 || whole.replicated()) {            // tp rank 0 holds it whole
    read_piece(0, pieces_[0].get(kind, layer), begin, end - begin, out);
    return;
  }
  // Each tp rank's runs (TensorMeta's mapping) clipped to the range. Its runs lie back to back in
  // its piece and in increasing order in the whole tensor, so those inside the range are one
  // contiguous range of its piece: one read, then placed run by run.
  size_t placed = 0;
  std::vector<PieceRun> runs;
  for (size_t r = 0; r < tp(); ++r) {
    const nn::ParamTensor& local = pieces_[r].get(kind, layer);
    runs.clear();
    local.for_each_local_run({tp(), r}, [&](size_t full, size_t lo, size_t n) {
      const size_t from = std::max(begin, full), to = std::min(end, full + n);
      if (from < to) runs.push_back({lo + (from - full), from - begin, to - from});
    });
    if (runs.empty()) continue;
    const size_t start = runs.front().local;  // in the rank's piece
    const size_t span = runs.back().local + runs.back().n - start;
    if (runs.size() == 1) {  // e.g. a column-parallel piece's rows: straight into place
      read_piece(r, local, start, span, out + runs.front().at);
      placed += span;
      continue;
    }
    staging_.resize(span);
    read_piece(r, local, start, span, staging_.data());
    size_t next = start;
    for (const PieceRun& run : runs) {
      TZ_CHECK(run.local == next,
               "tensor " + whole.name() + ": tp rank " + std::to_string(r) +
                   "'s piece is not contiguous within elements [" + std::to_string(begin) + ", " +
                   std::to_string(end) + ")",
               "internal error in the tensor-parallel mapping");
      std::memcpy(out + run.at, staging_.data() + (run.local - start), run.n * sizeof(float));
      next += run.n;
      placed += run.n;
    }
  }
  TZ_CHECK(placed == end - begin,
           "tensor " + whole.name() + ": the tp ranks' pieces fill " + std::to_string(placed) +
               " of elements [" + std::to_string(begin) + ", " + std::to_string(end) + ")",
           "internal error in the tensor-parallel mapping");
}

}  // namespace tierzero::train
