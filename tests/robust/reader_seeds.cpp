// The readers' seed inputs, written by TierZero's own writers (see reader_seeds.hpp).
#include "reader_seeds.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "scratch_dir.hpp"
#include "synthetic_profile.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/profile/profile_json.hpp"
#include "tierzero/train/checkpoint.hpp"
#include "tierzero/train/safetensors_gpt2.hpp"
#include "tierzero/train/token_shards.hpp"

namespace tierzero::test {

nn::GPTConfig tiny_model() {
  nn::GPTConfig c;
  c.num_layers = 2;
  c.num_heads = 2;
  c.channels = 16;
  c.vocab_size = kSeedVocab;
  c.padded_vocab_size = 64;
  c.max_seq_len = 16;
  return c;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string write_seed_model_file(const std::string& path) {
  const nn::GPTConfig c = tiny_model();
  const nn::ParamLayout layout = nn::gpt_param_layout(c);
  std::vector<float> params(layout.total_numel());  // (layout.total_numel())
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.01f * static_cast<float>(i % 97);
  train::save_checkpoint(path, c, layout, params.data());
  return file_bytes(path);
}

std::string write_seed_safetensors(const std::string& path) {
  train::write_gpt2_safetensors(path, tiny_model(), [](const train::Gpt2Tensor& t, float* ours) {
    for (size_t i = 0; i < t.rows * t.cols; ++i) ours[i] = 0.001f * static_cast<float>(i % 89);
  });
  return file_bytes(path);
}

std::string write_seed_shard(const std::string& path, size_t tokens) {
  std::vector<uint16_t> t(tokens);
  for (size_t i = 0; i < tokens; ++i) t[i] = static_cast<uint16_t>((i * 7) % kSeedVocab);
  train::write_token_shard(path, t.data(), t.size());
  return file_bytes(path);
}

std::string write_seed_config(const std::string& path) {
  const std::string text = R"({
  // a DeepSpeed-style config with TierZero's section
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "betas": [0.9, 0.95], "eps": 1e-8,
                "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 2, "total_num_steps": 10}},
  "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                        "offload_param": {"device": "cpu"}},
  "bf16": {"enabled": false},
  "tierzero": {"steps": 2, "seq_len": 16, "val_batches": 2, "seed": 7,
               "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "context_length": 16}}
})";
  write_bytes(path, text);
  return text;
}

std::string write_seed_profile(const std::string& path) {
  profile::write_profile(profile::synthetic::synthetic_profile(3, 3, true), path);
  return file_bytes(path);
}

const std::string& scratch_dir() {
  return tierzero::testing::scratch_dir("tz_readers");
}

}  // namespace tierzero::test
