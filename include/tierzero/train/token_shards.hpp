// llm.c token shards: a 256 x int32 header (magic 20240520, version 1, token count) followed by
// uint16 tokens. Users already hold data in this format, so TierZero reads and writes it as is.
// Every problem (missing file, bad magic, truncation) is an Error naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tierzero::train {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr size_t kShardHeaderInts = 256;

// A sequence of tokens that can be read at any position.
class TokenShard {
 public:
  virtual ~TokenShard() = default;
  virtual const std::string& name() const = 0;
  virtual size_t size() const = 0;                                       // tokens
  virtual void read(size_t pos, size_t count, uint16_t* out) const = 0;  // out (count)
};

// A validated shard file, read with pread.
std::unique_ptr<TokenShard> open_token_shard(const std::string& path);
// The files matching `pattern` (glob), sorted; empty when none does or the search fails (a
// directory in the pattern that cannot be read).
std::vector<std::string> token_shard_paths(const std::string& pattern);
// Every file matching `pattern` (glob), sorted; Error if none matches.
std::vector<std::unique_ptr<TokenShard>> open_token_shards(const std::string& pattern);
// Tokens held in memory (the built-in corpus).
std::unique_ptr<TokenShard> make_memory_shard(std::string name, std::vector<uint16_t> tokens);

// Writes a shard atomically (temporary file + rename): a crash never leaves half a shard.
void write_token_shard(const std::string& path, const uint16_t* tokens, size_t count);

}  // namespace tierzero::train
