// The Unicode normalizer of tokenizer.json (NFC, NFD, NFKC, NFKD) against Hugging Face
// `tokenizers`: its four forms of the characters whose normalization changed after Unicode 9.0
// (the version of `tokenizers`' tables) and of random sequences of combining marks
// (tests/data/tokenizer/normalizer_forms.expected.json), normalizing in chunks, the copy-free
// path for text already normalized, invalid UTF-8, seeded random mark sequences through the
// tokenizer, and prepare-data and bench tokenize with Qwen 2's NFC.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "cli_runner.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/bpe_tokenizer.hpp"
#include "tierzero/train/token_shards.hpp"
#include "tierzero/train/unicode_normalizer.hpp"

namespace {

namespace fs = std::filesystem;
using tierzero::Error;
using tierzero::train::BpeEncoder;
using tierzero::train::BpeTokenizer;
using tierzero::train::NormalizationForm;
using tierzero::train::UnicodeNormalizer;

const std::string kData = TIERZERO_TOKENIZER_DATA;
constexpr NormalizationForm kForms[] = {NormalizationForm::kNFC, NormalizationForm::kNFD,
                                        NormalizationForm::kNFKC, NormalizationForm::kNFKD};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "U+0041 U+030A": what a mismatch shows, since most of these strings do not print.
std::string code_points(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? b : b & (0x7Fu >> len);
    for (size_t k = 1; k < len && i + k < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
    char buf[16];
    std::snprintf(buf, sizeof buf, "U+%04X ", cp);
    out += buf;
    i += len;
  }
  return out;
}

std::string normalized(const UnicodeNormalizer& n, const std::string& text) {
  std::string buffer;
  return std::string(n.normalize(text, &buffer));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(UnicodeNormalizer, FormsMatchTokenizersWhereUnicodeVersionsDiffer) {
  const auto fixture =
      nlohmann::json::parse(read_text(kData + "/normalizer_forms.expected.json"))["cases"];
  size_t compared = 0, mismatches = 0;
  for (const NormalizationForm form : kForms) {
    const UnicodeNormalizer n({form});
    const char* name = tierzero::train::normalization_form_name(form);
    for (const auto& c : fixture) {
      const std::string text = c["text"].get<std::string>();
      const std::string want = c[name].get<std::string>();
      const std::string got = normalized(n, text);
      ++compared;
      if (got == want) continue;
      ++mismatches;
      ADD_FAILURE() << name << " of " << code_points(text) << "\n  ours:   " << code_points(got)
                    << "\n  theirs: " << code_points(want);
    }
  }
  std::printf("normalizer_forms: %zu cases x 4 forms, %zu identical to tokenizers\n",
              fixture.size(), compared - mismatches);
  EXPECT_GE(fixture.size(), 200u);
}

// The texts of the Qwen-2-style NFC fixture, one after another: accents, Hangul, marks.
std::string nfc_fixture_text() {
  const auto fixture = nlohmann::json::parse(read_text(kData + "/qwen2_nfc.expected.json"));
  std::string text;
  for (const auto& c : fixture["cases"]) text += c["text"].get<std::string>() + "\n";
  return text;
}

TEST(UnicodeNormalizer, ChunkedNormalizationEqualsWhole) {
  const std::string text = nfc_fixture_text();
  for (const NormalizationForm form : kForms) {
    const UnicodeNormalizer whole({form});
    const UnicodeNormalizer chunked({form}, 16);  // cut every 16 bytes or less, at boundaries
    EXPECT_EQ(normalized(chunked, text), normalized(whole, text))
        << tierzero::train::normalization_form_name(form);
  }
  // A run of marks longer than a 4 KiB segment is cut after it, where the next starter is.
  std::string long_run = "e", want = "\xc3\xa9";
  for (int i = 0; i < 3000; ++i) long_run += "\xcc\x81";  // U+0301 (e-acute then 2999 of them)
  for (int i = 0; i < 2999; ++i) want += "\xcc\x81";
  EXPECT_EQ(normalized(UnicodeNormalizer({NormalizationForm::kNFC}), long_run + "e\xcc\x81x"),
            want + "\xc3\xa9x");
  // A run of marks longer than a chunk has no place to cut: an Error, not a different text.
  const UnicodeNormalizer chunked({NormalizationForm::kNFC}, 16);
  std::string marks = "e";
  for (int i = 0; i < 20; ++i) marks += "\xcc\x81";  // U+0301
  const std::string msg = error_of([&] { normalized(chunked, marks); });
  EXPECT_NE(msg.find("without a place where it may be cut"), std::string::npos) << msg;
}

TEST(UnicodeNormalizer, NormalizedTextIsNotCopiedAndSequencesApplyInOrder) {
  const UnicodeNormalizer nfc({NormalizationForm::kNFC});
  std::string buffer;
  const std::string ascii = "plain ASCII text", composed = "Caf\xc3\xa9 \xed\x95\x9c";
  EXPECT_EQ(nfc.normalize(ascii, &buffer).data(), ascii.data());
  EXPECT_EQ(nfc.normalize(composed, &buffer).data(), composed.data());
  EXPECT_EQ(nfc.normalize("Cafe\xcc\x81", &buffer), "Caf\xc3\xa9");
  EXPECT_EQ(nfc.describe(), "NFC");
  // NFKC then NFD: the ligature becomes "fi", the precomposed e-acute splits again.
  const UnicodeNormalizer seq({NormalizationForm::kNFKC, NormalizationForm::kNFD});
  EXPECT_EQ(seq.describe(), "Sequence[NFKC, NFD]");
  EXPECT_EQ(normalized(seq,
                       "\xef\xac\x81"
                       "Caf\xc3\xa9"),
            "fiCafe\xcc\x81");
  EXPECT_EQ(normalized(UnicodeNormalizer({}), "Cafe\xcc\x81"), "Cafe\xcc\x81");
}

TEST(UnicodeNormalizer, InvalidUtf8NeitherCrashesNorPassesEncode) {
  // The normalizer's contract is valid UTF-8 (encode checks it first), but ill-formed bytes
  // must not crash it.
  for (const NormalizationForm form : kForms)
    for (const std::string bad : {"ok \xff", "e\xcc", "\xc0\x80\xcc\x81", "\xed\xa0\x80\xcc\x81"}) {
      std::string buffer;
      try {
        UnicodeNormalizer({form}).normalize(bad, &buffer);
      } catch (const Error&) {
      }
    }
  const auto tok = BpeTokenizer::load(kData + "/qwen2_nfc.tokenizer.json");
  EXPECT_EQ(tok->normalizer(), "NFC");
  BpeEncoder encoder(tok);
  std::vector<uint32_t> ids;
  for (const std::string bad : {"ok \xff", "ok \xcc", "ok \xed\xa0\x80"}) {
    const std::string msg = error_of([&] { encoder.encode("e\xcc\x81" + bad, &ids); });
    EXPECT_NE(msg.find("not valid UTF-8 at byte 6"), std::string::npos) << msg;
  }
}

// Seeded random strings of marks, jamo, composable letters and special tokens through the NFC
// and NFKC tokenizers: never a crash, ids that decode to BpeTokenizer::normalize(text), and
// normalizing that again changes nothing (TIERZERO_FUZZ_SEED reproduces a run).
TEST(UnicodeNormalizer, RandomMarkSequencesEncodeToTheirNormalizedText) {
  const char* pool[] = {"e",
                        "A",
                        " ",
                        "\n",
                        "\xcc\x81",
                        "\xcc\xa7",
                        "\xcc\x8a",
                        "\xcc\xa3",
                        "\xcc\x87",
                        "\xe1\x84\x80",
                        "\xe1\x85\xa1",
                        "\xe1\x86\xa8",
                        "\xea\xb0\x80",
                        "\xe2\x84\xab",
                        "\xef\xac\x81",
                        "\xef\xbc\x91",
                        "\xe3\x8b\xbf",
                        "\xf0\x9e\x82\x8f",
                        "<|endoftext|>",
                        "\xe0\xa4\x95",
                        "\xe0\xa4\xbc",
                        "1",
                        "'s"};
  const char* s = std::getenv("TIERZERO_FUZZ_SEED");
  std::mt19937_64 rng(s ? std::strtoull(s, nullptr, 10) : 30);
  for (const char* file : {"qwen2_nfc", "qwen2_nfkc_like"}) {
    std::string path = kData + "/qwen2_nfc.tokenizer.json";
    char tmpl[] = "/tmp/tz_normalizer_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    if (std::string(file) == "qwen2_nfkc_like") {
      auto j = nlohmann::json::parse(read_text(path));
      j["normalizer"] = {{"type", "NFKC"}};
      path = std::string(tmpl) + "/tokenizer.json";
      std::ofstream(path) << j.dump();
    }
    const auto tok = BpeTokenizer::load(path);
    BpeEncoder encoder(tok);
    for (int i = 0; i < 300; ++i) {
      std::string text;
      for (size_t k = rng() % 40; k > 0; --k) text += pool[rng() % std::size(pool)];
      std::vector<uint32_t> ids;
      encoder.encode(text, &ids);
      const std::string normal = tok->normalize(text);
      EXPECT_EQ(tok->decode(ids.data(), ids.size()), normal) << file << ": " << code_points(text);
      EXPECT_EQ(tok->normalize(normal), normal) << file << ": " << code_points(text);
    }
    fs::remove_all(tmpl);
  }
}

// prepare-data with the Qwen-2-style NFC tokenizer writes the ids of the normalized text.
TEST(PrepareData, NfcTokenizerWritesTheIdsOfTheNormalizedText) {
  char tmpl[] = "/tmp/tz_normalizer_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string text = nfc_fixture_text();
  std::ofstream(dir + "/input.txt", std::ios::binary) << text;
  const std::string tokenizer = kData + "/qwen2_nfc.tokenizer.json";
  const auto r = tierzero::test::run_tierzero("prepare-data " + dir + "/input.txt -o " + dir +
                                              "/shards --val-fraction 0 --tokenizer " + tokenizer);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto tok = BpeTokenizer::load(tokenizer);
  std::vector<uint32_t> want = {*tok->added_token("<|endoftext|>")};
  BpeEncoder(tok).encode(text, &want);
  std::vector<uint32_t> nfc_ids;
  BpeEncoder(tok).encode(tok->normalize(text), &nfc_ids);
  EXPECT_EQ(std::vector<uint32_t>(want.begin() + 1, want.end()), nfc_ids);
  const auto shard = tierzero::train::open_token_shard(dir + "/shards/train_000000.bin");
  std::vector<uint32_t> got(shard->size());
  shard->read(0, got.size(), got.data());
  EXPECT_EQ(got, want);
  // bench tokenize checks the ids against the normalized corpus and reports the normalizer.
  const auto bench = tierzero::test::run_tierzero("bench tokenize --tokenizer " + tokenizer +
                                                  " --input " + dir + "/input.txt --repeats 1");
  EXPECT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_NE(bench.output.find("\"normalizer\":\"NFC\",\"normalize_MBps\":"), std::string::npos)
      << bench.output;
  fs::remove_all(dir);
}

}  // namespace
