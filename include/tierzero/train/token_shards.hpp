// llm.c token shards: a 256 x int32 header (magic, version, token count) followed by the tokens.
// Users already hold data in these formats, so TierZero reads and writes them as llm.c does:
//   magic 20240520, version 1: uint16 tokens (GPT-2's; vocabularies up to 65,536)
//   magic 20240801, version 7: uint32 tokens (llm.c's Llama 3 files; larger vocabularies)
// prepare-data writes the 16-bit kind whenever the vocabulary fits, so llm.c's GPT-2 readers
// keep reading them. Every problem (missing file, bad magic, truncation) is an Error naming the
// file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tierzero::train {

constexpr int32_t kShardMagic = 20240520;  // uint16 tokens
constexpr int32_t kShardVersion = 1;
constexpr int32_t kShard32Magic = 20240801;  // uint32 tokens
constexpr int32_t kShard32Version = 7;
constexpr size_t kShardHeaderInts = 256;

// A sequence of tokens that can be read at any position.
class TokenShard {
 public:
  virtual ~TokenShard() = default;
  virtual const std::string& name() const = 0;
  virtual size_t size() const = 0;                                       // tokens
  virtual void read(size_t pos, size_t count, uint32_t* out) const = 0;  // out (count)
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
// uint16 tokens: magic 20240520 version 1; uint32 tokens: magic 20240801 version 7.
void write_token_shard(const std::string& path, const uint16_t* tokens, size_t count);
void write_token_shard(const std::string& path, const uint32_t* tokens, size_t count);

}  // namespace tierzero::train
