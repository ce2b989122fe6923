// What TierZero reads from a Hugging Face `tokenizers` tokenizer.json for byte-level BPE (GPT-2,
// Llama 3, Qwen 2): the Unicode normalizer (NFC and its kin), the pre-tokenizer's regex splits,
// its ByteLevel step, the BPE vocabulary and merges, and the added (special) tokens. Everything
// else the file may say and TierZero would not do as `tokenizers` does (another normalizer, BPE
// dropout, a subword prefix, lstrip on an added token, ...) is an Error naming the file and the
// key, never silently different ids.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tierzero/train/unicode_normalizer.hpp"

namespace tierzero::train {

struct SplitStep {
  std::string pattern;
  bool literal = false;  // {"String": ...}: the text itself, not a regex
  std::string key;       // where it is in the file, for errors
};

struct AddedTokenSpec {
  uint32_t id = 0;
  std::string content;
  bool normalized = false;  // matched in the normalized text, its content normalized too
  bool special = false;
};

struct TokenizerSpec {
  std::string path;
  // "normalizer": NFC, NFD, NFKC, NFKD, or a Sequence of them, flattened; empty for null.
  std::vector<NormalizationForm> normalizers;
  std::vector<SplitStep> splits;  // Split steps, in order, before the ByteLevel step
  bool add_prefix_space = false;  // ByteLevel: " " before each piece not starting with one
  bool byte_level_regex = false;  // ByteLevel use_regex: GPT-2's pattern after the splits
  std::vector<std::pair<std::string, uint32_t>> vocab;      // byte-level-mapped strings
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  bool ignore_merges = false;  // a piece that is a vocabulary entry is that token
  std::vector<AddedTokenSpec> added;
};

// Reads and checks `path`. Error naming the file and the key for bad JSON, a missing model, an
// unknown pre-tokenizer type, or an option TierZero does not implement.
TokenizerSpec read_tokenizer_json(const std::string& path);

}  // namespace tierzero::train
