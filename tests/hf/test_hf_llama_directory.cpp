// Llama-family Hugging Face directories (issue 30) with h-llama's fixtures (tests/data/llama,
// written by transformers): the Llama (GQA, llama3 rope, untied head) and Qwen 2 (q/k/v biases,
// tied) directories read by range into exactly the layout the parity test builds from the same
// weights through hf_llama_names; their config.json read into the shape the parity test uses; an
// export in BF16 with small shards reads back within bf16 rounding and names its architecture.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "fixture_reader.hpp"
#include "scratch_dir.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/train/hf_directory.hpp"
#include "tierzero/train/hf_llama_names.hpp"

using namespace tierzero;
namespace fs = std::filesystem;

namespace {

std::string fixture_dir(const std::string& name) {
  return std::string(TIERZERO_SOURCE_DIR) + "/tests/data/llama/" + name;
}

// The flat buffer of the fixture's weights, placed by h-llama's table (not by the reader).
std::vector<float> scattered(const std::string& name, const nn::GPTConfig& c,
                             const nn::ParamLayout& layout) {
  const tierzero::testing::Fixture fx =
      tierzero::testing::Fixture::load(fixture_dir(name) + "/reference.tzfx");
  std::vector<float> flat(layout.total_numel(), 0.0f);
  for (const train::HfLlamaTensor& t : train::hf_llama_tensors(c))
    train::hf_to_full(t, fx.get("w." + t.hf_name).f32.data(),
                      flat.data() + layout.get(t.kind, t.layer).offset);
  return flat;
}

void check_fixture(const std::string& name) {
  const std::string dir = fixture_dir(name);
  const nn::GPTConfig c = train::read_hf_directory_config(dir);
  std::printf("%s: %s\n", name.c_str(), c.str().c_str());
  EXPECT_FALSE(c.is_gpt2());
  EXPECT_EQ(c.kv_heads(), 2u);
  EXPECT_EQ(c.hidden(), 64u);
  EXPECT_EQ(c.max_seq_len, 64u);
  EXPECT_EQ(c.arch.qkv_bias, name == "qwen2_tiny");
  EXPECT_EQ(c.arch.tie_embeddings, name == "qwen2_tiny");
  EXPECT_EQ(c.arch.rope_scaling.llama3, name == "llama_tiny");
  EXPECT_EQ(c.arch.norm_eps, name == "qwen2_tiny" ? 1e-6 : 1e-5);
  const nn::ParamLayout layout = nn::gpt_param_layout(c);
  const std::vector<float> want = scattered(name, c, layout);
  std::vector<float> got(layout.total_numel(), -1.0f);
  train::HfDirectoryRanges(dir, layout).read(0, got.size(), got.data());
  EXPECT_EQ(got, want) << name;
  // By small ranges and tiny blocks, too.
  train::HfDirectoryRanges small(dir, layout, 5);
  size_t wrong = 0;
  for (size_t begin = 0; begin < got.size(); begin += 97) {
    std::vector<float> part(std::min<size_t>(97, got.size() - begin));
    small.read(begin, part.size(), part.data());
    for (size_t k = 0; k < part.size(); ++k) wrong += part[k] != want[begin + k];
  }
  EXPECT_EQ(wrong, 0u);

  // Export in bf16, several shards, and read back.
  const std::string out = tierzero::testing::scratch_dir("tz_hfllama") + "/" + name;
  fs::remove_all(out);
  train::HfExportOptions o;
  o.dtype = DType::bf16;
  o.max_shard_bytes = 8000;
  const train::HfExportSummary sum = train::write_hf_directory(
      out, c, o, [&](const train::HfTensor& t, size_t row, size_t rows, float* ours) {
        const float* src = want.data() + layout.get(t.kind, t.layer).offset + row * t.cols;
        std::copy(src, src + rows * t.cols, ours);
      });
  EXPECT_GT(sum.shards, 2u);
  std::ifstream cfg(out + "/config.json");
  const nlohmann::json j = nlohmann::json::parse(cfg);
  EXPECT_EQ(j["architectures"][0], name == "qwen2_tiny" ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
  const nn::GPTConfig back = train::read_hf_directory_config(out);
  EXPECT_EQ(back.str(), c.str());
  EXPECT_TRUE(back.arch == c.arch);
  std::vector<float> again(layout.total_numel());
  train::HfDirectoryRanges(out, layout).read(0, again.size(), again.data());
  double max_rel = 0.0;
  for (size_t i = 0; i < again.size(); ++i) {
    const double ref = want[i];
    max_rel = std::max(max_rel, std::fabs(again[i] - ref) / std::max(std::fabs(ref), 1e-3));
  }
  std::printf("%s: bf16 export in %zu shards, max relative error %.3g\n", name.c_str(), sum.shards,
              max_rel);
  EXPECT_LE(max_rel, 1.0 / 256);
  fs::remove_all(out);
}

}  // namespace

TEST(HfLlamaDirectory, LlamaFixtureLoadsAsTheParityLayout) {
  check_fixture("llama_tiny");
}

TEST(HfLlamaDirectory, Qwen2FixtureLoadsAsTheParityLayout) {
  check_fixture("qwen2_tiny");
}

TEST(HfLlamaDirectory, UnsupportedLlamaKeysAreRefused) {
  const std::string dir = tierzero::testing::scratch_dir("tz_hfllama") + "/keys";
  fs::remove_all(dir);
  fs::copy(fixture_dir("llama_tiny"), dir);
  std::ifstream in(dir + "/config.json");
  const nlohmann::json base = nlohmann::json::parse(in);
  const auto refused = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json j = base;
    if (value.is_discarded())
      j.erase(key);
    else
      j[key] = value;
    std::ofstream(dir + "/config.json", std::ios::trunc) << j.dump();
    try {
      train::read_hf_directory_config(dir);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string cfg = dir + "/config.json";
  for (const auto& [key, value, expect] :
       std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"num_attention_heads", nlohmann::json(nlohmann::json::value_t::discarded),
            "lacks key 'num_attention_heads' (needed for LlamaForCausalLM)"},
           {"attention_bias", true, "attention_bias"},
           {"hidden_act", "gelu", "hidden_act"},
           {"rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}}, "rope_type 'yarn'"}}) {
    const std::string e = refused(key, value);
    EXPECT_NE(e.find(cfg), std::string::npos) << e;
    EXPECT_NE(e.find(expect), std::string::npos) << e;
  }
  fs::remove_all(dir);
}
