// `estimate --hf-config` and `plan --hf-config` (issue 30, "will it fit"): a Hugging Face
// config.json alone, or the directory holding it, sizes the model it describes, with its
// architecture (the Llama fixture: GQA, SwiGLU, an untied head) and no weights read; a config
// with a key missing is one clear error naming the file and the key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.hpp"
#include "scratch_dir.hpp"

namespace {

using tierzero::test::RunResult;

const std::string kLlamaDir = std::string(TIERZERO_SOURCE_DIR) + "/tests/data/llama/llama_tiny";

RunResult tierzero_cli(const std::string& args) {
  return tierzero::test::run_tierzero(args, "env ASAN_OPTIONS=detect_leaks=0 ");
}

nlohmann::json estimate_json(const std::string& model_args) {
  const RunResult r = tierzero_cli("estimate " + model_args + " --json --seq 16 --micro-batch 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find('{');
  return at == std::string::npos ? nlohmann::json() : nlohmann::json::parse(r.output.substr(at));
}

TEST(HfConfigCli, EstimateSizesTheModelAConfigJsonDescribes) {
  const nlohmann::json by_file = estimate_json("--hf-config " + kLlamaDir + "/config.json");
  ASSERT_TRUE(by_file.is_object());
  EXPECT_EQ(by_file["model"]["layers"], 2);
  EXPECT_EQ(by_file["model"]["heads"], 4);
  EXPECT_EQ(by_file["model"]["channels"], 32);
  EXPECT_EQ(by_file["model"]["vocab"], 256);
  // The fixture's parameters, counted from its shapes: embeddings and untied head 2 x 256 x 32,
  // per block q 32x32, k and v 16x32 each (2 kv heads of 8), o 32x32, gate/up/down 3 x 64x32,
  // two RMSNorm gains of 32; a final gain of 32.
  const size_t block = 32 * 32 + 2 * 16 * 32 + 32 * 32 + 3 * 64 * 32 + 2 * 32;
  EXPECT_EQ(by_file["model_parameters"].get<size_t>(), 2 * 256 * 32 + 2 * block + 32);
  // The directory names the same model.
  EXPECT_EQ(estimate_json("--hf-config " + kLlamaDir), by_file);
}

TEST(HfConfigCli, AConfigWithAKeyMissingIsOneClearError) {
  const std::string dir = tierzero::testing::scratch_dir("tz_hf_config");
  nlohmann::json c = nlohmann::json::parse(std::ifstream(kLlamaDir + "/config.json"));
  c.erase("num_hidden_layers");
  std::ofstream(dir + "/config.json") << c.dump(2);
  const RunResult r = tierzero_cli("estimate --hf-config " + dir + "/config.json");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("num_hidden_layers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir + "/config.json"), std::string::npos) << r.output;
  const RunResult both = tierzero_cli("estimate --hf-config " + kLlamaDir + " --model gpt2");
  EXPECT_NE(both.exit_code, 0) << both.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
