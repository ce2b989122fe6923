// Hugging Face model directories in-process (issue 30): written by write_hf_directory in BF16,
// F16 and F32 with shards of a few KB (several of them), read back whole and by random ranges with
// tiny blocks (HfDirectoryRanges) equal to the values written, rounded to the dtype; the block
// buffer stays bounded; one shard is model.safetensors without an index; malformed directories
// (a missing shard, a tensor the index lists but its shard lacks, one the index lacks, a wrong
// dtype, a wrong shape, an unknown architecture or another one's config, a config key missing, an
// unknown tensor) are Errors naming the file and the key or tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "scratch_dir.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/train/hf_directory.hpp"

using namespace tierzero;
namespace fs = std::filesystem;

namespace {

nn::GPTConfig tiny() {
  nn::GPTConfig c;
  c.vocab_size = 37;
  c.padded_vocab_size = 48;
  c.max_seq_len = 9;
  c.num_layers = 3;
  c.num_heads = 4;
  c.channels = 20;
  return c;
}

std::string temp_dir(const std::string& name) {
  const std::string d = tierzero::testing::scratch_dir("tz_hfdir") + "/" + name;
  fs::remove_all(d);
  return d;
}

// A value for every element k of our tensor (kind, layer), distinct per tensor and row.
float value(nn::ParamKind kind, int layer, size_t k) {
  const double id = static_cast<double>(kind) * 31.0 + layer + 0.5;
  return static_cast<float>(std::sin(0.37 * static_cast<double>(k) + 1.3 * id) *
                            (1.0 + 0.1 * static_cast<double>(layer + 1)));
}

train::HfExportSummary write_dir(const std::string& dir, const nn::GPTConfig& c, DType dtype,
                                 uint64_t shard_bytes) {
  train::HfExportOptions o;
  o.dtype = dtype;
  o.max_shard_bytes = shard_bytes;
  return train::write_hf_directory(
      dir, c, o, [](const train::HfTensor& t, size_t row, size_t rows, float* ours) {
        for (size_t k = 0; k < rows * t.cols; ++k)
          ours[k] = value(t.kind, t.layer, row * t.cols + k);
      });
}

// The flat buffer the directory should load as: every value rounded through `dtype`.
std::vector<float> expected(const nn::GPTConfig& c, const nn::ParamLayout& layout, DType dtype) {
  std::vector<float> out(layout.total_numel(), 0.0f);
  std::vector<uint8_t> raw;
  for (const train::HfTensor& t : train::hf_architecture_of(c).tensors(c)) {
    const nn::ParamTensor& p = layout.get(t.kind, t.layer);
    for (const train::HfRowSpan& sp : t.spans) {
      float* dst = out.data() + p.offset + sp.row * t.cols;  // (sp.rows, cols)
      const size_t n = sp.rows * t.cols;
      for (size_t k = 0; k < n; ++k) dst[k] = value(t.kind, t.layer, sp.row * t.cols + k);
      raw.resize(n * dtype_size(dtype));
      convert_from_f32(raw.data(), dtype, dst, n);
      convert_to_f32(dst, raw.data(), dtype, n);
    }
  }
  return out;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_has(const std::string& e, const std::vector<std::string>& parts) {
  for (const std::string& p : parts)
    EXPECT_NE(e.find(p), std::string::npos) << e << "\nlacks: " << p;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(HfDirectory, ShardedDirectoriesReadBackByRangeInEveryDtype) {
  const nn::GPTConfig c = tiny();
  const nn::ParamLayout layout = nn::gpt_param_layout(c);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const std::string dir = temp_dir(std::string("round_") + dtype_name(dtype));
    const train::HfExportSummary sum = write_dir(dir, c, dtype, 4000);
    EXPECT_GT(sum.shards, 2u) << "several shards";
    EXPECT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
    EXPECT_FALSE(fs::exists(dir + ".tmp-export"));
    EXPECT_EQ(train::read_hf_directory_config(dir).str(), c.str());
    const std::vector<float> want = expected(c, layout, dtype);
    std::vector<float> whole(layout.total_numel(), -1.0f);
    train::HfDirectoryRanges(dir, layout).read(0, whole.size(), whole.data());
    size_t wrong = 0;
    for (size_t i = 0; i < whole.size(); ++i) wrong += whole[i] != want[i];
    EXPECT_EQ(wrong, 0u) << dtype_name(dtype);
    // Tiny blocks: transposed tensors gathered in many pieces, 16-bit ones converted in many.
    const size_t block = 7;
    train::HfDirectoryRanges small(dir, layout, block);
    std::mt19937 rng(5);
    double max_err = 0.0;
    for (int trial = 0; trial < 300; ++trial) {
      const size_t begin = rng() % whole.size();
      const size_t count = 1 + rng() % std::min<size_t>(whole.size() - begin, 900);
      std::vector<float> got(count, -1.0f);
      small.read(begin, count, got.data());
      for (size_t k = 0; k < count; ++k)
        max_err = std::max(max_err, static_cast<double>(std::abs(got[k] - whole[begin + k])));
    }
    EXPECT_LE(small.buffer_bytes(), block * sizeof(float));
    std::printf("%s: %zu shards, ranges vs whole read max abs error %g\n", dtype_name(dtype),
                sum.shards, max_err);
    EXPECT_EQ(max_err, 0.0);
  }
}

TEST(HfDirectory, OneShardIsModelSafetensorsWithoutIndex) {
  const nn::GPTConfig c = tiny();
  const std::string dir = temp_dir("single");
  EXPECT_EQ(write_dir(dir, c, DType::bf16, 5'000'000'000).shards, 1u);
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));
  const nn::ParamLayout layout = nn::gpt_param_layout(c);
  std::vector<float> got(layout.total_numel());
  train::open_model_ranges(dir, layout)->read(0, got.size(), got.data());
  EXPECT_EQ(got, expected(c, layout, DType::bf16));
  // Export never writes into a directory that holds anything.
  expect_has(error_of([&] { write_dir(dir, c, DType::bf16, 1000); }), {dir, "not empty"});
}

TEST(HfDirectory, MalformedDirectoriesAreRefusedNamingFileAndKey) {
  const nn::GPTConfig c = tiny();
  const std::string base = temp_dir("base");
  write_dir(base, c, DType::bf16, 4000);
  const auto copy = [&](const std::string& name) {
    const std::string d = temp_dir(name);
    fs::copy(base, d);
    return d;
  };
  const auto load = [&](const std::string& d) {
    return error_of([&] { train::read_hf_directory_config(d); });
  };
  const std::string index = "/model.safetensors.index.json";
  const nlohmann::json map = read_json(base + index)["weight_map"];
  const std::string fc = "transformer.h.2.mlp.c_fc.weight";
  const std::string fc_shard = map.at(fc);

  {  // a shard missing
    const std::string d = copy("missing_shard");
    fs::remove(d + "/" + fc_shard);
    expect_has(load(d), {d + "/" + fc_shard});
  }
  {  // the index lists a tensor in a shard that lacks it
    const std::string d = copy("listed_absent");
    nlohmann::json j = read_json(d + index);
    const std::string other = map.at("transformer.wte.weight");
    ASSERT_NE(other, fc_shard);
    j["weight_map"][fc] = other;
    write_text(d + index, j.dump());
    expect_has(load(d), {"'" + d + "/" + other + "' lacks tensor " + fc,
                         "(listed in model.safetensors.index.json)"});
  }
  {  // the index lacks a tensor
    const std::string d = copy("index_lacks");
    nlohmann::json j = read_json(d + index);
    j["weight_map"].erase(fc);
    write_text(d + index, j.dump());
    expect_has(load(d), {d + index, "lacks tensor " + fc});
  }
  {  // a dtype this reader does not convert (same size, so the offsets stay valid)
    const std::string d = copy("dtype");
    std::string bytes = read_bytes(d + "/" + fc_shard);
    const size_t at = bytes.find("\"BF16\"");
    ASSERT_NE(at, std::string::npos);
    bytes.replace(at, 6, "\"I16\" ");
    std::ofstream(d + "/" + fc_shard, std::ios::binary | std::ios::trunc) << bytes;
    expect_has(load(d), {d + "/" + fc_shard, "is I16, expected BF16, F16 or F32"});
  }
  {  // config.json and the tensors disagree on a shape
    const std::string d = copy("shape");
    nlohmann::json j = read_json(d + "/config.json");
    j["n_positions"] = 8;
    write_text(d + "/config.json", j.dump());
    expect_has(load(d), {"transformer.wpe.weight", "has shape [9,20], expected [8,20]"});
  }
  {  // an architecture this build does not know, and one it does not have yet
    const std::string d = copy("arch");
    nlohmann::json j = read_json(d + "/config.json");
    j["architectures"] = {"FalconForCausalLM"};
    write_text(d + "/config.json", j.dump());
    expect_has(load(d), {d + "/config.json", "architecture 'FalconForCausalLM' is not supported"});
    j["architectures"] = {"LlamaForCausalLM"};  // a GPT-2 config.json under Llama's name
    write_text(d + "/config.json", j.dump());
    expect_has(load(d), {"lacks key 'hidden_size' (needed for LlamaForCausalLM)"});
  }
  {  // config.json missing a key, and one with a value we cannot run
    const std::string d = copy("key");
    nlohmann::json j = read_json(d + "/config.json");
    j.erase("n_head");
    write_text(d + "/config.json", j.dump());
    expect_has(load(d), {d + "/config.json", "lacks key 'n_head'", "GPT2LMHeadModel"});
    j = read_json(base + "/config.json");
    j["layer_norm_epsilon"] = 1e-6;
    write_text(d + "/config.json", j.dump());
    expect_has(load(d), {d + "/config.json", "layer_norm_epsilon"});
  }
  {  // a tensor the architecture does not have (config.json says 2 layers, the files hold 3)
    const std::string d = copy("extra");
    nlohmann::json j = read_json(d + "/config.json");
    j["n_layer"] = 2;
    write_text(d + "/config.json", j.dump());
    expect_has(load(d), {"holds tensor transformer.h.2.", "does not have"});
  }
  {  // neither weights file
    const std::string d = copy("no_weights");
    fs::remove(d + index);
    expect_has(load(d), {d, "neither model.safetensors nor model.safetensors.index.json"});
    fs::remove(d + "/config.json");
    expect_has(load(d), {d, "has no config.json"});
  }
  fs::remove_all(fs::path(base).parent_path());
}
