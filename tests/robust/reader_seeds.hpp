// Small valid inputs for the readers' tests, made by TierZero's own writers: an llm.c model file
// (save_checkpoint), a GPT-2 safetensors file (write_gpt2_safetensors), a token shard
// (write_token_shard), a config, and a profile with its timeline (write_profile).
#pragma once

#include <string>

#include "tierzero/nn/gpt_config.hpp"

namespace tierzero::test {

// L 2, NH 2, C 16, V 60 (padded 64), T 16: a few KB of weights.
nn::GPTConfig tiny_model();
// Token ids of the seed shard are below this.
constexpr size_t kSeedVocab = 60;

std::string file_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::string& bytes);

// Each writes a valid file at `path` and returns its bytes.
std::string write_seed_model_file(const std::string& path);
std::string write_seed_safetensors(const std::string& path);
std::string write_seed_shard(const std::string& path, size_t tokens = 512);
std::string write_seed_config(const std::string& path);
std::string write_seed_profile(const std::string& path);

// A scratch directory for this process (removed at exit).
const std::string& scratch_dir();

}  // namespace tierzero::test
