// DataLoader: rank-strided windows over validated token shards.
#include "tierzero/train/data_loader.hpp"

#include "tierzero/core/checked_math.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::train {

DataLoader::DataLoader(std::vector<std::unique_ptr<TokenShard>> shards, size_t B, size_t T,
                       size_t vocab, int rank, int world_size)
    : shards_(std::move(shards)),
      B_(B),
      T_(T),
      vocab_(vocab),
      rank_(static_cast<size_t>(rank)),
      world_(static_cast<size_t>(world_size)) {
  TZ_CHECK(!shards_.empty(), "data loader has no shards", "");
  TZ_CHECK(rank >= 0 && world_size > 0 && rank < world_size, "bad rank for the data loader", "");
  // Checked: the buffer below is sized from this, and only after every shard is known to hold
  // it (so the data on disk, not a number, bounds the allocation).
  const size_t need = checked_add(checked_mul(checked_mul(B_, T_, "batch tokens (B x T)"), world_,
                                              "tokens per step over all ranks"),
                                  1, "tokens per step over all ranks");
  for (const auto& s : shards_)
    if (s->size() < need)
      TZ_THROW("data shard '" + s->name() + "' holds " + std::to_string(s->size()) +
                   " tokens, fewer than one batch needs (" + std::to_string(need) + " = B " +
                   std::to_string(B_) + " x T " + std::to_string(T_) + " x ranks " +
                   std::to_string(world_) + " + 1)",
               "use more data per shard or a smaller batch");
  buffer_.resize(B_ * T_ + 1);
  reset();
}

void DataLoader::reset() {
  shard_ = 0;
  position_ = B_ * T_ * rank_;
}

size_t DataLoader::batches_per_epoch() const {
  size_t n = 0;
  for (const auto& s : shards_) n += (s->size() - 1) / (B_ * T_ * world_);
  return n;
}

void DataLoader::next_batch(int32_t* inputs, int32_t* targets) {
  const size_t n = B_ * T_;
  if (position_ + n + 1 > shards_[shard_]->size()) {
    shard_ = (shard_ + 1) % shards_.size();
    position_ = n * rank_;
  }
  const TokenShard& s = *shards_[shard_];
  s.read(position_, n + 1, buffer_.data());
  for (size_t i = 0; i <= n; ++i)
    if (buffer_[i] >= vocab_)
      TZ_THROW("token id " + std::to_string(buffer_[i]) + " at token " +
                   std::to_string(position_ + i) + " of data shard '" + s.name() +
                   "' is >= the vocabulary size " + std::to_string(vocab_),
               "the data was tokenized for a different vocabulary than the model's vocab_size");
  for (size_t i = 0; i < n; ++i) {
    inputs[i] = buffer_[i];
    targets[i] = buffer_[i + 1];
  }
  position_ += n * world_;
}

void DataLoader::check_batches(size_t batches) {
  std::vector<int32_t> inputs(B_ * T_), targets(B_ * T_);  // (B, T) each
  for (size_t k = 0; k < batches; ++k) next_batch(inputs.data(), targets.data());
  reset();
}

void DataLoader::seek_from_first_rank(const Position& p) {
  seek(p);
  position_ += B_ * T_ * rank_;  // past the shard's end: next_batch moves to the next shard
}

void DataLoader::seek(const Position& p) {
  TZ_CHECK(p.shard < shards_.size() && p.position < shards_[p.shard]->size(),
           "data position (shard " + std::to_string(p.shard) + ", token " +
               std::to_string(p.position) + ") is outside this run's " +
               std::to_string(shards_.size()) + " data shard(s)",
           "resume with the data the checkpoint was trained on");
  shard_ = p.shard;
  position_ = p.position;
}

}  // namespace tierzero::train
