// The tables behind a BpeTokenizer, built once from a TokenizerSpec: GPT-2's byte-level alphabet,
// the merges as an (id, id) -> (rank, id) hash table, the vocabulary by raw bytes, the added
// tokens by first byte, the compiled pre-tokenizer patterns and the Unicode normalizer.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pcre2_regex.hpp"
#include "tierzero/train/bpe_tokenizer.hpp"
#include "tierzero/train/unicode_normalizer.hpp"

namespace tierzero::train {

// GPT-2's bytes_to_unicode: byte b is the code point byte_to_code_point(b), so every byte has a
// printable stand-in and the vocabulary is text.
uint32_t byte_to_code_point(uint8_t b);

// Open addressing over 64-bit pair keys: a merge lookup is the inner loop of BPE.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    uint32_t id = 0;  // the merged token
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  void reserve(size_t merges);
  void insert(uint32_t left, uint32_t right, uint32_t rank, uint32_t id);  // a later one wins
  const Entry* find(uint32_t left, uint32_t right) const {
    const uint64_t key = (uint64_t{left} << 32) | right;
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Entry& e = entries_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }

 private:
  size_t slot(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
  }
  std::vector<Entry> entries_;
  size_t mask_ = 0;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using BytesToId = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;

// Added tokens of one matching pass, leftmost-longest as `tokenizers` matches them.
struct AddedTokenSet {
  struct Token {
    std::string content;
    uint32_t id;
  };
  std::array<std::vector<Token>, 256> by_first_byte;  // longest first
  bool empty = true;
  // The leftmost-longest match in text[from, end): true with its start and token.
  bool find(std::string_view text, size_t from, size_t* at, const Token** token) const;
};

struct BpeTokenizer::Tables {
  std::string path;
  // The file's normalizer (NFC, ...); null when it has none. It applies to the text between the
  // added tokens that are not `normalized`, before the normalized ones are matched.
  std::unique_ptr<UnicodeNormalizer> normalizer;
  std::vector<std::unique_ptr<Pcre2Pattern>> splits;  // Split steps, in order
  std::unique_ptr<Pcre2Pattern> byte_level_regex;     // GPT-2's pattern, when use_regex
  bool add_prefix_space = false;
  bool ignore_merges = false;
  std::array<uint32_t, 256> byte_ids{};  // the token of each single byte
  MergeTable merges;
  BytesToId vocab;  // raw bytes -> id
  // id -> raw bytes, for decoding: a map, since ids may be sparse (a file's largest id, not its
  // size, must not decide how much memory this takes).
  std::unordered_map<uint32_t, std::string> id_text;
  // Not normalized, then normalized (their order); the normalized ones' contents are normalized,
  // as `tokenizers` matches them in normalized text.
  std::array<AddedTokenSet, 2> added;
  BytesToId added_ids;  // content -> id
  size_t vocab_size = 0;
};

std::unique_ptr<BpeTokenizer::Tables> build_bpe_tables(const std::string& path);

}  // namespace tierzero::train
