// Byte-level BPE against Hugging Face `tokenizers`: the ids of the fixtures in
// tests/data/tokenizer (made by scripts/reference/make_tokenizer_fixture.py with `tokenizers`;
// GPT-2-, Llama-3- and Qwen-2-style tokenizers, Qwen 2's with its NFC normalizer and with NFKC
// or a Sequence in its place) must be identical, decoding must give the (normalized) text back,
// malformed tokenizer.json files must be refused naming the file and key, and prepare-data
// --tokenizer must write shards the data loader reads back (32-bit ones for a vocabulary over
// 65,536). The normalizer's own tests are in test_normalizer.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
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

// The fixture's tokenizer: its file, or (a "replace" object in the fixture) a copy of it with
// those top-level keys replaced, written to `dir` (the NFKC and Sequence variants of qwen2_nfc).
std::string fixture_tokenizer(const nlohmann::json& fixture, const std::string& dir) {
  const std::string path = kData + "/" + fixture["tokenizer"].get<std::string>();
  if (!fixture.contains("replace")) return path;
  nlohmann::json j = nlohmann::json::parse(read_text(path));
  for (const auto& [key, value] : fixture["replace"].items()) j[key] = value;
  const std::string copy = dir + "/tokenizer.json";
  std::ofstream(copy) << j.dump();
  return copy;
}

class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, IdsMatchHuggingFaceTokenizersAndDecodeBack) {
  const nlohmann::json fixture = expected(GetParam());
  TempDir dir;
  const auto tok = BpeTokenizer::load(fixture_tokenizer(fixture, dir.path));
  BpeEncoder encoder(tok);
  size_t cases = 0, tokens = 0, normalized = 0, identical = 0;
  for (const auto& c : fixture["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<uint32_t> want = c["ids"].get<std::vector<uint32_t>>();
    // What `tokenizers` decodes the ids to: the text, normalized where the tokenizer has a
    // normalizer that changes it.
    const std::string decoded = c.value("decoded", text);
    std::vector<uint32_t> got;
    encoder.encode(text, &got);
    EXPECT_EQ(got, want) << "text: \"" << text << "\"\n  ours:   " << ids_text(got)
                         << "\n  theirs: " << ids_text(want);
    EXPECT_EQ(tok->decode(got.data(), got.size()), decoded) << "text: \"" << text << "\"";
    EXPECT_EQ(tok->normalize(text), decoded) << "text: \"" << text << "\"";
    // Encoding again (now from the encoder's cache) gives the same ids.
    std::vector<uint32_t> again;
    encoder.encode(text, &again);
    EXPECT_EQ(again, got);
    ++cases;
    tokens += want.size();
    normalized += decoded != text;
    identical += got == want;
  }
  std::printf(
      "%s (normalizer %s): %zu cases (%zu changed by it), %zu tokens; %zu cases identical to "
      "tokenizers\n",
      GetParam().c_str(), tok->normalizer().c_str(), cases, normalized, tokens, identical);
  EXPECT_GE(cases, 20u);
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, Parity,
                         ::testing::Values("gpt2", "llama3", "qwen2", "qwen2_nfc", "qwen2_nfkc",
                                           "qwen2_nfd_sequence"));

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
  expect_has(load_error([](auto& j) {
               j["normalizer"] = {{"type", "Lowercase"}};
             }),
             "key 'normalizer.type': normalizer type 'Lowercase' is not supported");
  expect_has(load_error([](auto& j) {
               j["normalizer"] = {
                   {"type", "Sequence"},
                   {"normalizers", {{{"type", "NFC"}}, {{"type", "BertNormalizer"}}}}};
             }),
             "key 'normalizer.normalizers[1].type': normalizer type 'BertNormalizer'");
  expect_has(load_error([](auto& j) {
               j["normalizer"] = {{"type", "Sequence"}};
             }),
             "key 'normalizer.normalizers': is missing");
  expect_has(load_error([](auto& j) { j["normalizer"] = "NFC"; }),
             "key 'normalizer': is not an object");
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

namespace {

// Seeded damage to a file's bytes: flips, truncations, insertions, and (for JSON) numbers and
// keys swapped. Every damaged file must load and work or be an Error: never a crash, a hang or
// another exception (TIERZERO_FUZZ_SEED reproduces a run).
std::string damage(const std::string& s, std::mt19937_64& rng, std::string* what) {
  std::string d = s;
  const auto at = [&] { return static_cast<size_t>(rng() % std::max<size_t>(d.size(), 1)); };
  switch (rng() % 5) {
    case 0: {
      const size_t i = at();
      d[i] = static_cast<char>(rng());
      *what = "byte " + std::to_string(i) + " changed";
      break;
    }
    case 1:
      d.resize(at());
      *what = "truncated to " + std::to_string(d.size());
      break;
    case 2: {
      const size_t i = at();
      d.insert(i, std::string(1 + rng() % 8, static_cast<char>(rng())));
      *what = "bytes inserted at " + std::to_string(i);
      break;
    }
    case 3: {  // a digit run replaced by a big number (ids, ranks)
      const size_t i = d.find_first_of("0123456789", at());
      if (i == std::string::npos) break;
      const char* big[] = {"4294967295", "2147483647", "128255", "99999999999", "-1", "1e9"};
      d.replace(i, 1, big[rng() % 6]);
      *what = "number at " + std::to_string(i) + " made big";
      break;
    }
    default: {  // a quote removed or added
      const size_t i = d.find('"', at());
      if (i == std::string::npos) break;
      d.erase(i, 1);
      *what = "quote at " + std::to_string(i) + " removed";
    }
  }
  return d;
}

uint64_t fuzz_seed() {
  const char* s = std::getenv("TIERZERO_FUZZ_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 30;
}

TEST(TokenizerFuzz, DamagedTokenizerJsonLoadsOrIsAnError) {
  const std::string seed_text = read_text(kData + "/llama3.tokenizer.json");
  TempDir dir;
  const std::string path = dir.path + "/t.json";
  std::mt19937_64 rng(fuzz_seed());
  size_t loaded = 0, refused = 0;
  for (int i = 0; i < 150; ++i) {
    std::string what;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << damage(seed_text, rng, &what);
    try {
      const auto tok = BpeTokenizer::load(path);
      std::vector<uint32_t> ids;
      BpeEncoder(tok).encode("Hello TierZero, 123 \xe4\xb8\xad <|eot_id|>\r\n", &ids);
      tok->decode(ids.data(), ids.size());
      ++loaded;
    } catch (const Error&) {
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "case " << i << " (" << what << "): not an Error: " << e.what();
    }
  }
  std::printf("damaged tokenizer.json: %zu loaded, %zu refused\n", loaded, refused);
  EXPECT_GT(refused, 0u);
}

TEST(TokenizerFuzz, Damaged32BitShardsReadOrAreAnError) {
  TempDir dir;
  const std::string seed_path = dir.path + "/seed.bin", path = dir.path + "/case.bin";
  std::vector<uint32_t> tokens(300);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 977 % 128256);
  tierzero::train::write_token_shard(seed_path, tokens.data(), tokens.size());
  const std::string seed = read_text(seed_path);
  std::mt19937_64 rng(fuzz_seed());
  size_t read = 0, refused = 0;
  for (int i = 0; i < 200; ++i) {
    std::string what, bytes;
    if (rng() % 2 == 0) {  // a header field (magic, version, count) set to a chosen value
      bytes = seed;
      const int32_t values[] = {20240520, 20240801, 1,   7,   0,   -1, INT32_MAX,
                                299,      300,      301, 600, 150, 2,  3};
      const int32_t v = values[rng() % 14];
      const size_t field = rng() % 3;
      std::memcpy(&bytes[field * 4], &v, 4);
      what = "header[" + std::to_string(field) + "] = " + std::to_string(v);
    } else {
      bytes = damage(seed, rng, &what);
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    try {
      tierzero::train::DataLoader loader(tierzero::train::open_token_shards(path), 2, 8, 128256);
      std::vector<int32_t> x(16), y(16);
      for (size_t b = 0; b <= loader.batches_per_epoch(); ++b)
        loader.next_batch(x.data(), y.data());
      ++read;
    } catch (const Error&) {
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "case " << i << " (" << what << "): not an Error: " << e.what();
    }
  }
  std::printf("damaged shards: %zu read, %zu refused\n", read, refused);
  EXPECT_GT(refused, 0u);
  EXPECT_GT(read, 0u);
}

}  // namespace
