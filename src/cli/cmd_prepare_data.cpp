// `tierzero prepare-data`: a text file -> llm.c token shards, with the byte-level tokenizer or,
// with --tokenizer, a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3, Qwen 2).
// Shards hold uint16 tokens when the vocabulary fits, uint32 ones beyond 65,536 ids
// (token_shards.hpp). The first val_fraction of the tokens become val_000000.bin, the rest
// train_NNNNNN.bin. A
// manifest in the directory lists what it wrote, so a later run replaces exactly those shards
// (and refuses to touch shard-like files it did not write).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "commands.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/input_file.hpp"
#include "tierzero/core/output_files.hpp"
#include "tierzero/train/bpe_tokenizer.hpp"
#include "tierzero/train/byte_tokenizer.hpp"
#include "tierzero/train/output_paths.hpp"
#include "tierzero/train/token_shards.hpp"

namespace tierzero::cli {

namespace {

namespace fs = std::filesystem;

struct PrepareFlags {
  std::string input;
  std::string output = "data";
  std::string tokenizer;  // tokenizer.json; empty: byte-level
  std::string doc_token;  // added token put before the text; empty: the tokenizer's usual one
  double val_fraction = 0.1;
  int64_t shard_tokens = 100000000;
};

// What an earlier prepare-data wrote into the output directory: its manifest's shard names, so a
// new run replaces exactly those and never mixes stale shards into a glob.
constexpr const char* kManifestName = "tierzero-prepare-data.json";

// The manifest's text as it is (empty when there is none): parsed for its files, and put back
// as it was after a failed run.
std::string read_manifest_text(const fs::path& dir) {
  std::ifstream in(dir / kManifestName, std::ios::binary);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::set<std::string> manifest_files(const fs::path& dir, const std::string& text) {
  if (text.empty()) return {};
  try {
    return nlohmann::json::parse(text).at("files").get<std::set<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    TZ_THROW("the prepare-data manifest '" + (dir / kManifestName).string() +
                 "' is damaged: " + e.what(),
             "remove the directory's shards and the manifest, or write into a new directory");
  }
}

// A shard's name while it is written: hidden, and not shard-like, so no glob takes it.
std::string staged_name(const std::string& name) {
  return ".staging-" + name;
}
bool is_staged(const std::string& name) {
  return name.rfind(".staging-", 0) == 0;
}

void restore_manifest(const fs::path& dir, const std::string& text) {
  std::error_code ec;
  if (text.empty())
    fs::remove(dir / kManifestName, ec);
  else
    write_file_atomic((dir / kManifestName).string(), text);
}

void write_manifest(const fs::path& dir, const std::string& input,
                    const std::set<std::string>& files) {
  const nlohmann::json j = {
      {"format", "tierzero-prepare-data"}, {"version", 1}, {"input", input}, {"files", files}};
  write_file_atomic((dir / kManifestName).string(), j.dump(1) + "\n");
}

// Names a glob over this directory's shards would match (val_*.bin, train_*.bin).
bool shard_like(const std::string& name) {
  const bool bin = name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0;
  return bin && (name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0);
}

// Refuses when the directory holds shard-like files an earlier prepare-data did not write: they
// are someone else's, and removing or keeping them would both be wrong.
void check_no_foreign_shards(const fs::path& dir, const std::set<std::string>& ours) {
  std::vector<std::string> foreign;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (shard_like(name) && ours.count(name) == 0) foreign.push_back(name);
  }
  TZ_CHECK(!ec, "cannot list '" + dir.string() + "': " + ec.message(), "check the directory");
  if (foreign.empty()) return;
  std::sort(foreign.begin(), foreign.end());
  std::string names;
  for (size_t i = 0; i < foreign.size() && i < 5; ++i) names += (i ? ", " : "") + foreign[i];
  if (foreign.size() > 5) names += ", ... (" + std::to_string(foreign.size()) + " in all)";
  TZ_THROW("output directory '" + dir.string() + "' already holds shards prepare-data did not " +
               "write (" + names + "); a glob over the directory would mix them in",
           "remove them, or give another -o directory");
}

// The shards' names and token ranges, in order: val_000000.bin first (when any), then train_*.
struct ShardPlan {
  std::string name;
  size_t begin, count;
};

std::vector<ShardPlan> plan_shards(size_t tokens, size_t n_val, size_t per_shard) {
  std::vector<ShardPlan> plan;
  if (n_val > 0) plan.push_back({"val_000000.bin", 0, n_val});
  for (size_t shard = 0, at = n_val; at < tokens; ++shard) {
    const size_t n = std::min(per_shard, tokens - at);
    char name[32];
    std::snprintf(name, sizeof name, "train_%06zu.bin", shard);
    plan.push_back({name, at, n});
    at += n;
  }
  return plan;
}

// The input's tokens, led by a document token, and the vocabulary they come from.
struct Tokenized {
  std::vector<uint32_t> tokens;
  size_t vocab_size = 0;
  std::string vocabulary;  // for the closing message
};

// The added token that starts a document: --doc-token, else GPT-2's and Qwen 2's
// <|endoftext|> or Llama 3's <|begin_of_text|> (what llm.c's data scripts put before each one).
uint32_t document_token(const train::BpeTokenizer& tok, const std::string& wanted) {
  for (const char* name : {"<|endoftext|>", "<|begin_of_text|>"})
    if (wanted.empty() && tok.added_token(name)) return *tok.added_token(name);
  const std::optional<uint32_t> id = tok.added_token(wanted);
  TZ_CHECK(!wanted.empty() && id.has_value(),
           wanted.empty() ? "tokenizer '" + tok.path() +
                                "' has neither <|endoftext|> nor <|begin_of_text|> to start a "
                                "document with"
                          : "tokenizer '" + tok.path() + "' has no added token '" + wanted + "'",
           "name one of its added_tokens with --doc-token");
  return *id;
}

Tokenized tokenize(const PrepareFlags& f, const std::string& text) {
  Tokenized t;
  if (f.tokenizer.empty()) {
    TZ_CHECK(f.doc_token.empty(), "--doc-token needs --tokenizer",
             "the byte-level tokenizer starts documents with its own end-of-text token");
    const std::vector<uint16_t> bytes = train::byte_tokenize(text);
    t.tokens.reserve(bytes.size() + 1);
    t.tokens.push_back(train::kEotToken);
    t.tokens.insert(t.tokens.end(), bytes.begin(), bytes.end());
    t.vocab_size = static_cast<size_t>(train::kByteVocabSize);
    t.vocabulary = "byte-level, vocab_size 257 (256 bytes + end-of-text 256)";
    return t;
  }
  const auto tok = train::BpeTokenizer::load(f.tokenizer);
  const size_t bad = train::find_invalid_utf8(text);
  TZ_CHECK(bad == std::string::npos,
           "input text '" + f.input + "' is not valid UTF-8 at byte " + std::to_string(bad),
           "a tokenizer.json tokenizes UTF-8 text; convert the file (e.g. with iconv)");
  t.tokens.push_back(document_token(*tok, f.doc_token));
  train::BpeEncoder(tok).encode(text, &t.tokens);
  t.vocab_size = tok->vocab_size();
  t.vocabulary = "tokenizer '" + f.tokenizer + "', vocab_size " + std::to_string(t.vocab_size) +
                 (t.vocab_size > 65536 ? " (uint32 token shards)" : " (uint16 token shards)") +
                 "; the model's vocab_size must be at least that";
  return t;
}

// Writes tokens [begin, begin + count) in the narrowest width the vocabulary allows.
void write_shard(const std::string& path, const Tokenized& t, size_t begin, size_t count) {
  if (t.vocab_size > 65536) return train::write_token_shard(path, t.tokens.data() + begin, count);
  const std::vector<uint16_t> narrow(t.tokens.begin() + static_cast<ptrdiff_t>(begin),
                                     t.tokens.begin() + static_cast<ptrdiff_t>(begin + count));
  train::write_token_shard(path, narrow.data(), count);
}

int run_prepare(const PrepareFlags& f) {
  train::check_output_dir("-o", f.output);
  const fs::path dir(f.output);
  const std::string manifest_before = read_manifest_text(dir);
  const std::set<std::string> before = manifest_files(dir, manifest_before);
  check_no_foreign_shards(dir, before);
  // A FIFO or a directory is refused, never waited on. The text is tokenized in memory: a bound
  // far above any corpus one machine tokenizes, so only a mistake meets it.
  constexpr size_t kMaxTextBytes = size_t{1} << 40;
  const Tokenized tokenized = tokenize(
      f, read_input_file(f.input, "input text", "give prepare-data a text file", kMaxTextBytes));
  const std::vector<uint32_t>& tokens = tokenized.tokens;
  TZ_CHECK(tokens.size() >= 2, "input text '" + f.input + "' is empty", "give a non-empty file");

  const auto n_val = static_cast<size_t>(static_cast<double>(tokens.size()) * f.val_fraction);
  const std::vector<ShardPlan> plan =
      plan_shards(tokens.size(), n_val, static_cast<size_t>(f.shard_tokens));
  std::set<std::string> now;
  for (const ShardPlan& p : plan) {
    TZ_CHECK(!train::same_file((dir / p.name).string(), f.input),
             "input text '" + f.input + "' is the shard '" + p.name + "' this would write",
             "write the shards into another -o directory");
    now.insert(p.name);
  }
  // The new shards are written under staging names first and renamed over the old ones only once
  // every one is whole: a run that fails part way (a full disk) leaves the earlier dataset as it
  // was, never new shards beside old ones. The manifest names the old, the new and the staged
  // files meanwhile, so a run killed outright leaves only files the next run knows as its own.
  std::set<std::string> both = before;
  for (const std::string& name : now) both.insert({name, staged_name(name)});
  write_manifest(dir, f.input, both);
  std::vector<std::string> staged;
  try {
    for (const ShardPlan& p : plan) {
      staged.push_back((dir / staged_name(p.name)).string());
      write_shard(staged.back(), tokenized, p.begin, p.count);
    }
  } catch (...) {
    std::error_code ec;
    for (const std::string& path : staged) fs::remove(path, ec);
    try {  // (with the staged files gone there is room again; if not, the error below stands)
      restore_manifest(dir, manifest_before);
      std::fprintf(stderr, "the earlier contents of '%s' are unchanged\n", dir.string().c_str());
    } catch (const Error&) {
      std::fprintf(stderr,
                   "the earlier shards of '%s' are unchanged; its manifest could not be "
                   "put back\n",
                   dir.string().c_str());
    }
    throw;
  }
  for (size_t i = 0; i < plan.size(); ++i) {
    const std::string path = (dir / plan[i].name).string();
    std::error_code ec;
    fs::rename(staged[i], path, ec);  // (a rename within a directory needs no space)
    TZ_CHECK(!ec,
             "cannot rename the staged shard '" + staged[i] + "' to '" + path + "': " +
                 ec.message() + " (" + std::to_string(i) + " of " + std::to_string(plan.size()) +
                 " new shards are in place; the manifest names the old and the new)",
             "run prepare-data again into this directory, or into a new one");
    std::fprintf(stderr, "wrote %s (%zu tokens)\n", path.c_str(), plan[i].count);
  }
  for (const std::string& stale : before)
    if (now.count(stale) == 0 && (shard_like(stale) || is_staged(stale)) && fs::remove(dir / stale))
      std::fprintf(stderr, "removed %s (from an earlier prepare-data)\n",
                   (dir / stale).string().c_str());
  write_manifest(dir, f.input, now);
  std::fprintf(stderr, "vocabulary: %s\n", tokenized.vocabulary.c_str());
  return 0;
}

}  // namespace

Command add_prepare_data_command(CLI::App& app) {
  auto flags = std::make_shared<PrepareFlags>();
  CLI::App* sub = app.add_subcommand("prepare-data", "turn a text file into llm.c token shards");
  sub->add_option("input", flags->input, "UTF-8 (or any) text file")->required();
  sub->add_option("-o,--output", flags->output, "output directory")->capture_default_str();
  sub->add_option("--tokenizer", flags->tokenizer,
                  "Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3, Qwen 2); "
                  "default: byte-level tokens");
  sub->add_option("--doc-token", flags->doc_token,
                  "added token put before the text (default: <|endoftext|> or <|begin_of_text|>)");
  sub->add_option("--val-fraction", flags->val_fraction, "share of tokens for validation")
      ->check(finite_in(0.0, 0.9))
      ->capture_default_str();
  sub->add_option("--shard-tokens", flags->shard_tokens, "tokens per training shard")
      ->check(CLI::Range(int64_t{1024}, int64_t{2000000000}))
      ->capture_default_str();
  return {sub, [flags] { return run_prepare(*flags); }};
}

}  // namespace tierzero::cli
