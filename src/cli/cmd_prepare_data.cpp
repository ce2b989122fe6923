// `tierzero prepare-data`: a text file -> llm.c token shards with the byte-level tokenizer.
// The first val_fraction of the tokens become val_000000.bin, the rest train_NNNNNN.bin.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "commands.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/byte_tokenizer.hpp"
#include "tierzero/train/token_shards.hpp"

namespace tierzero::cli {

namespace {

struct PrepareFlags {
  std::string input;
  std::string output = "data";
  double val_fraction = 0.1;
  int64_t shard_tokens = 100000000;
};

int run_prepare(const PrepareFlags& f) {
  std::ifstream in(f.input, std::ios::binary);
  if (!in)
    TZ_THROW("cannot read input text '" + f.input + "': " + errno_string(), "check the path");
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<uint16_t> tokens = train::byte_tokenize(ss.str());
  tokens.insert(tokens.begin(), train::kEotToken);
  TZ_CHECK(tokens.size() >= 2, "input text '" + f.input + "' is empty", "give a non-empty file");
  std::error_code ec;
  std::filesystem::create_directories(f.output, ec);
  if (ec) TZ_THROW("cannot create output directory '" + f.output + "': " + ec.message(), "");

  const auto n_val = static_cast<size_t>(static_cast<double>(tokens.size()) * f.val_fraction);
  size_t written = 0;
  if (n_val > 0) {
    const std::string path = f.output + "/val_000000.bin";
    train::write_token_shard(path, tokens.data(), n_val);
    std::fprintf(stderr, "wrote %s (%zu tokens)\n", path.c_str(), n_val);
    written = n_val;
  }
  const auto per_shard = static_cast<size_t>(f.shard_tokens);
  for (size_t shard = 0; written < tokens.size(); ++shard) {
    const size_t n = std::min(per_shard, tokens.size() - written);
    char name[32];
    std::snprintf(name, sizeof name, "/train_%06zu.bin", shard);
    const std::string path = f.output + name;
    train::write_token_shard(path, tokens.data() + written, n);
    std::fprintf(stderr, "wrote %s (%zu tokens)\n", path.c_str(), n);
    written += n;
  }
  std::fprintf(stderr, "vocabulary: byte-level, vocab_size %lld (256 bytes + end-of-text %d)\n",
               static_cast<long long>(train::kByteVocabSize), train::kEotToken);
  return 0;
}

}  // namespace

Command add_prepare_data_command(CLI::App& app) {
  auto flags = std::make_shared<PrepareFlags>();
  CLI::App* sub = app.add_subcommand("prepare-data", "turn a text file into llm.c token shards");
  sub->add_option("input", flags->input, "UTF-8 (or any) text file")->required();
  sub->add_option("-o,--output", flags->output, "output directory")->capture_default_str();
  sub->add_option("--val-fraction", flags->val_fraction, "share of tokens for validation")
      ->check(CLI::Range(0.0, 0.9))
      ->capture_default_str();
  sub->add_option("--shard-tokens", flags->shard_tokens, "tokens per training shard")
      ->check(CLI::Range(int64_t{1024}, int64_t{2000000000}))
      ->capture_default_str();
  return {sub, [flags] { return run_prepare(*flags); }};
}

}  // namespace tierzero::cli
