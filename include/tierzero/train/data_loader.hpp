// DataLoader: batches of (B, T) inputs and next-token targets from token shards, llm.c style.
// Rank r of w reads the windows r, r + w, r + 2w, ... of B*T tokens in each shard, so ranks see
// disjoint data; at the end of the last shard it starts over (a new epoch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tierzero/train/token_shards.hpp"

namespace tierzero::train {

class DataLoader {
 public:
  DataLoader(std::vector<std::unique_ptr<TokenShard>> shards, size_t B, size_t T, size_t vocab,
             int rank = 0, int world_size = 1);

  // Fills inputs and targets, each (B, T). Error if a token id is >= vocab (names shard, index).
  void next_batch(int32_t* inputs, int32_t* targets);
  void reset();  // back to the first batch
  // Reads the first `batches` batches (checking every token against the vocabulary, as
  // next_batch does) and goes back to the first: a validation set's bad token is found before
  // training starts, not after it, when validation first reads it.
  void check_batches(size_t batches);
  size_t batches_per_epoch() const;
  // Where the next batch comes from (a checkpoint saves it; resuming continues from it).
  struct Position {
    size_t shard = 0;
    size_t position = 0;  // token offset in the shard
  };
  Position position() const { return {shard_, position_}; }
  // Throws Error when the position is outside the shards (a checkpoint of other data).
  void seek(const Position& p);
  // Continues from where rank 0 of another data-parallel world was (`p`): this rank reads the
  // windows after it, rank windows on, with its own stride (resuming in another layout).
  void seek_from_first_rank(const Position& p);

 private:
  std::vector<std::unique_ptr<TokenShard>> shards_;
  size_t B_, T_, vocab_;
  size_t rank_, world_;
  size_t shard_ = 0;
  size_t position_ = 0;
  std::vector<uint32_t> buffer_;  // (B*T + 1)
};

}  // namespace tierzero::train
