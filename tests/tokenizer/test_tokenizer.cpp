// Byte-level BPE against Hugging Face `tokenizers`: the ids of the fixtures in
// tests/data/tokenizer (made by scripts/reference/make_tokenizer_fixture.py with `tokenizers`;
// GPT-2-, Llama-3- and Qwen-2-style tokenizers) must be identical, decoding must give the text
// back, malformed tokenizer.json files must be refused naming the file and key, and
// prepare-data --tokenizer must write shards the data loader reads back (32-bit ones for a
// vocabulary over 65,536).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_runner.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/bpe_tokenizer.hpp"
#include "tierzero/train/data_loader.hpp"
#include "tierzero/train/token_shards.hpp"

namespace {

namespace fs = std::filesystem;
using tierzero::Error;
using tierzero::train::BpeEncoder;
using tierzero::train::BpeTokenizer;

const std::string kData = TIERZERO_TOKENIZER_DATA;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json expected(const std::string& name) {
  return nlohmann::json::parse(read_text(kData + "/" + name + ".expected.json"));
}

std::string ids_text(const std::vector<uint32_t>& ids) {
  std::string s;
  for (uint32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tz_tokenizer_XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    path = d ? d : "/tmp";
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, IdsMatchHuggingFaceTokenizersAndDecodeBack) {
  const nlohmann::json fixture = expected(GetParam());
  const auto tok = BpeTokenizer::load(kData + "/" + fixture["tokenizer"].get<std::string>());
  BpeEncoder encoder(tok);
  size_t cases = 0, tokens = 0;
  for (const auto& c : fixture["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<uint32_t> want = c["ids"].get<std::vector<uint32_t>>();
    std::vector<uint32_t> got;
    encoder.encode(text, &got);
    EXPECT_EQ(got, want) << "text: \"" << text << "\"\n  ours:   " << ids_text(got)
                         << "\n  theirs: " << ids_text(want);
    EXPECT_EQ(tok->decode(got.data(), got.size()), text);
    // Encoding again (now from the encoder's cache) gives the same ids.
    std::vector<uint32_t> again;
    encoder.encode(text, &again);
    EXPECT_EQ(again, got);
    ++cases;
    tokens += want.size();
  }
  std::printf("%s: %zu cases, %zu tokens, identical to tokenizers\n", GetParam().c_str(), cases,
              tokens);
  EXPECT_GE(cases, 20u);
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, Parity, ::testing::Values("gpt2", "llama3", "qwen2"));

TEST(Tokenizer, VocabularySizeAndAddedTokens) {
  const auto gpt2 = BpeTokenizer::load(kData + "/gpt2.tokenizer.json");
  EXPECT_EQ(gpt2->vocab_size(), 1501u);
  EXPECT_EQ(gpt2->added_token("<|endoftext|>"), 1500u);
  EXPECT_FALSE(gpt2->added_token("<|begin_of_text|>").has_value());
  // Llama-3 style: a vocabulary entry at 128255 makes the vocabulary Llama 3's size, and it is
  // reached only through ignore_merges (no merge builds it).
  const auto llama = BpeTokenizer::load(kData + "/llama3.tokenizer.json");
  EXPECT_EQ(llama->vocab_size(), 128256u);
  std::vector<uint32_t> ids;
  BpeEncoder(llama).encode(" TierZero", &ids);
  EXPECT_EQ(ids, std::vector<uint32_t>{128255});
}

TEST(Tokenizer, InvalidUtf8IsAnErrorWithItsOffset) {
  const auto tok = BpeTokenizer::load(kData + "/gpt2.tokenizer.json");
  BpeEncoder encoder(tok);
  std::vector<uint32_t> ids;
  for (const std::string& bad : {std::string("ok \xff"), std::string("ok \xc0\x80"),
                                 std::string("ok \xed\xa0\x80"), std::string("ok \xe2\x82")}) {
    const std::string msg = error_of([&] { encoder.encode(bad, &ids); });
    EXPECT_NE(msg.find("not valid UTF-8 at byte 3"), std::string::npos) << msg;
  }
  EXPECT_EQ(tierzero::train::find_invalid_utf8("h\xc3\xa9 \xf0\x9f\x91\x8b"), std::string::npos);
}

TEST(Tokenizer, DecodingAnUnknownIdIsAnError) {
  const auto tok = BpeTokenizer::load(kData + "/llama3.tokenizer.json");
  const uint32_t unknown = 70000;  // inside vocab_size, but no token has it
  const std::string msg = error_of([&] { tok->decode(&unknown, 1); });
  EXPECT_NE(msg.find("token id 70000"), std::string::npos) << msg;
}

// A copy of the GPT-2-style fixture with one change, loaded: the Error's message.
std::string load_error(const std::function<void(nlohmann::json&)>& edit,
                       const std::string& raw = "") {
  TempDir dir;
  const std::string path = dir.path + "/tokenizer.json";
  std::string text = raw;
  if (raw.empty()) {
    nlohmann::json j = nlohmann::json::parse(read_text(kData + "/gpt2.tokenizer.json"));
    edit(j);
    text = j.dump();
  }
  std::ofstream(path) << text;
  std::string msg = error_of([&] { BpeTokenizer::load(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << "the error names the file: " << msg;
  std::printf("refused: %s\n", msg.c_str());
  return msg;
}

void expect_has(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
}

TEST(TokenizerJson, MalformedFilesAreRefusedNamingFileAndKey) {
  expect_has(load_error({}, "{\"model\": "), "not valid JSON");
  expect_has(load_error([](auto& j) { j.erase("model"); }), "key 'model': is missing");
  expect_has(load_error([](auto& j) { j["model"]["type"] = "WordPiece"; }),
             "key 'model.type': model type 'WordPiece'");
  expect_has(load_error([](auto& j) {
               j["pre_tokenizer"] = {{"type", "Metaspace"}};
             }),
             "key 'pre_tokenizer.type': pre-tokenizer type 'Metaspace' is not supported");
  expect_has(
      load_error([](auto& j) {
        j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}}}}};
      }),
      "key 'pre_tokenizer.pretokenizers[0].type'");
  expect_has(load_error([](auto& j) {
               j["pre_tokenizer"] = {
                   {"type", "Sequence"},
                   {"pretokenizers",
                    {{{"type", "Split"},
                      {"pattern", {{"Regex", "(unclosed"}}},
                      {"behavior", "Isolated"},
                      {"invert", false}},
                     {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
             }),
             "key 'pre_tokenizer.pretokenizers[0].pattern.Regex': the pattern does not compile");
  expect_has(load_error([](auto& j) { j["normalizer"] = {{"type", "NFC"}}; }), "key 'normalizer'");
  expect_has(load_error([](auto& j) { j["model"]["merges"][3] = "Ġ"; }), "key 'model.merges[3]'");
  expect_has(load_error([](auto& j) { j["model"]["merges"][5] = "Ġ zzzzzz"; }),
             "\"zzzzzz\" is not in model.vocab");
  expect_has(load_error([](auto& j) { j["model"]["vocab"].erase("Ġ"); }),
             "has no token for byte 32");
  expect_has(load_error([](auto& j) { j["model"]["vocab"]["x"] = -4; }), "key 'model.vocab.x'");
  expect_has(load_error([](auto& j) { j["model"]["dropout"] = 0.1; }), "key 'model.dropout'");
  expect_has(load_error([](auto& j) { j["added_tokens"][0]["id"] = 9999; }),
             "declares id 9999, but Hugging Face tokenizers gives it id 1500");
  expect_has(load_error([](auto& j) { j["added_tokens"][0]["lstrip"] = true; }),
             "key 'added_tokens[0].lstrip'");
  expect_has(load_error([](auto&) {}, "[1, 2]"), "is not a JSON object");
}

TEST(TokenizerJson, MissingFileIsAClearError) {
  const std::string msg = error_of([] { BpeTokenizer::load("/nonexistent/tokenizer.json"); });
  expect_has(msg, "/nonexistent/tokenizer.json");
}

// prepare-data --tokenizer -> shards -> the data loader: the Llama-3-style vocabulary (128,256)
// needs 32-bit tokens; the GPT-2-style one (1,501) keeps llm.c's 16-bit shards.
std::vector<uint32_t> prepare_and_read(const std::string& name, const std::string& text,
                                       int32_t want_magic, size_t vocab) {
  TempDir dir;
  const std::string input = dir.path + "/input.txt";
  std::ofstream(input, std::ios::binary) << text;
  const auto r = tierzero::test::run_tierzero("prepare-data " + input + " -o " + dir.path +
                                              "/shards --val-fraction 0 --tokenizer " + kData +
                                              "/" + name + ".tokenizer.json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  int32_t header[3] = {};
  std::ifstream(dir.path + "/shards/train_000000.bin", std::ios::binary)
      .read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[0], want_magic);
  auto shards = tierzero::train::open_token_shards(dir.path + "/shards/train_*.bin");
  const size_t n = shards[0]->size();
  tierzero::train::DataLoader loader(std::move(shards), 1, n - 1, vocab);
  std::vector<int32_t> inputs(n - 1), targets(n - 1);
  loader.next_batch(inputs.data(), targets.data());
  std::vector<uint32_t> all(inputs.begin(), inputs.end());
  all.push_back(static_cast<uint32_t>(targets.back()));
  return all;
}

// The fixture's texts, one after another: what prepare-data tokenizes; the ids it must write are
// the document token and our encoder's ids of the whole (each case's ids are tested above).
std::vector<uint32_t> corpus_ids(const std::string& name, uint32_t doc_token, std::string* text) {
  const nlohmann::json fixture = expected(name);
  for (const auto& c : fixture["cases"]) *text += c["text"].get<std::string>();
  std::vector<uint32_t> ids = {doc_token};
  BpeEncoder(BpeTokenizer::load(kData + "/" + name + ".tokenizer.json")).encode(*text, &ids);
  return ids;
}

TEST(PrepareData, Llama3StyleVocabularyWrites32BitShardsTheLoaderReads) {
  std::string text;
  const std::vector<uint32_t> want = corpus_ids("llama3", 1501, &text);  // <|begin_of_text|>
  ASSERT_NE(std::find(want.begin(), want.end(), 128255u), want.end());   // " TierZero", whole
  EXPECT_EQ(prepare_and_read("llama3", text, tierzero::train::kShard32Magic, 128256), want);
  // A model vocabulary too small for the shard's ids is refused by the loader.
  TempDir dir;
  std::vector<uint32_t> big(64, 128255);
  tierzero::train::write_token_shard(dir.path + "/t.bin", big.data(), big.size());
  tierzero::train::DataLoader loader(tierzero::train::open_token_shards(dir.path + "/t.bin"), 1, 8,
                                     2000);
  std::vector<int32_t> x(8), y(8);
  expect_has(error_of([&] { loader.next_batch(x.data(), y.data()); }),
             "token id 128255 at token 0");
}

TEST(PrepareData, Gpt2StyleVocabularyKeepsLlmc16BitShards) {
  std::string text;
  const std::vector<uint32_t> want = corpus_ids("gpt2", 1500, &text);  // <|endoftext|>
  EXPECT_EQ(prepare_and_read("gpt2", text, tierzero::train::kShardMagic, 1501), want);
}

TEST(PrepareData, BadTokenizerOrTextIsOneClearLine) {
  TempDir dir;
  const std::string input = dir.path + "/input.txt";
  std::ofstream(input, std::ios::binary) << "hello \xff world\n";
  auto r = tierzero::test::run_tierzero("prepare-data " + input + " -o " + dir.path +
                                        "/s --tokenizer " + kData + "/gpt2.tokenizer.json");
  EXPECT_NE(r.exit_code, 0);
  expect_has(r.output, "is not valid UTF-8 at byte 6");
  const std::string bad = dir.path + "/bad.json";
  std::ofstream(bad) << "{\"model\": {\"type\": \"BPE\"}, \"pre_tokenizer\": {\"type\": \"Foo\"}}";
  r = tierzero::test::run_tierzero("prepare-data " + input + " -o " + dir.path + "/s --tokenizer " +
                                   bad);
  EXPECT_NE(r.exit_code, 0);
  expect_has(r.output, "tokenizer file '" + bad + "': key 'pre_tokenizer.type'");
  std::ofstream(input, std::ios::binary) << "hello world\n";
  r = tierzero::test::run_tierzero("prepare-data " + input + " -o " + dir.path + "/s --tokenizer " +
                                   kData + "/gpt2.tokenizer.json --doc-token '<|nope|>'");
  EXPECT_NE(r.exit_code, 0);
  expect_has(r.output, "has no added token '<|nope|>'");
}

// 32-bit shards are held to their file size as 16-bit ones are.
TEST(TokenShards32, HeaderIsValidatedAgainstTheFileSize) {
  TempDir dir;
  const std::string path = dir.path + "/s.bin";
  std::vector<uint32_t> tokens(100, 70000);
  tierzero::train::write_token_shard(path, tokens.data(), tokens.size());
  EXPECT_EQ(fs::file_size(path), 1024u + 400u);
  std::vector<uint32_t> back(100);
  tierzero::train::open_token_shard(path)->read(0, 100, back.data());
  EXPECT_EQ(back, tokens);
  fs::resize_file(path, 1024 + 398);
  expect_has(error_of([&] { tierzero::train::open_token_shard(path); }), "is truncated");
  fs::resize_file(path, 1024 + 404);
  expect_has(error_of([&] { tierzero::train::open_token_shard(path); }), "is too long");
  int32_t header[2] = {tierzero::train::kShard32Magic, 1};  // version 1 is the uint16 kind's
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.write(reinterpret_cast<const char*>(header), sizeof header);
  f.close();
  expect_has(error_of([&] { tierzero::train::open_token_shard(path); }), "only version 7");
}

}  // namespace
