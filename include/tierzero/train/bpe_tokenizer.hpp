// Byte-level BPE, as GPT-2, Llama 3 and Qwen 2 tokenize: read from a Hugging Face `tokenizers`
// tokenizer.json, giving the same ids as `tokenizers` does with add_special_tokens=False (the
// post-processor's BOS is the caller's business: prepare-data puts its own document token).
//
// Encoding: added (special) tokens are cut out of the text first, leftmost-longest, and kept
// whole; each piece between them goes through the file's Unicode normalizer (NFC, ...; ICU),
// then the pre-tokenizer's regex splits (PCRE2); each
// pre-token's bytes start as GPT-2's byte-level symbols and merge by rank. A BpeTokenizer is
// immutable and shared; each thread encodes through its own BpeEncoder (regex match state and a
// cache of pre-tokens already merged).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tierzero::train {

class BpeTokenizer {
 public:
  struct Tables;  // vocabulary, merges, patterns (bpe_tokenizer.cpp)

  // Reads and checks `path` (Error naming the file and key when it is malformed or asks for
  // something TierZero does not implement).
  static std::shared_ptr<const BpeTokenizer> load(const std::string& path);
  ~BpeTokenizer();

  const std::string& path() const;
  // One more than the largest id (vocabulary and added tokens): what a model's vocab_size must
  // be at least, and whether shards need 32-bit tokens.
  size_t vocab_size() const;
  // The id of an added token with exactly this content.
  std::optional<uint32_t> added_token(std::string_view content) const;
  // The file's normalizer: "none", "NFC", "Sequence[NFD, NFC]", ...
  std::string normalizer() const;
  // `text` (valid UTF-8) as encoding sees it after the normalizer: each piece between the added
  // tokens that are not `normalized` normalized, those tokens kept. What decode(encode(text))
  // gives back; `text` itself when there is no normalizer.
  std::string normalize(std::string_view text) const;
  // The text of `ids` (added tokens as their content). Error for an id no token has.
  std::string decode(const uint32_t* ids, size_t count) const;

  const Tables& tables() const { return *tables_; }

 private:
  explicit BpeTokenizer(std::unique_ptr<Tables> tables);
  std::unique_ptr<Tables> tables_;
};

class BpeEncoder {
 public:
  explicit BpeEncoder(std::shared_ptr<const BpeTokenizer> tokenizer);
  ~BpeEncoder();
  BpeEncoder(const BpeEncoder&) = delete;
  BpeEncoder& operator=(const BpeEncoder&) = delete;

  // Appends the ids of `text` to *out. Error when the text is not valid UTF-8 (the byte offset).
  void encode(std::string_view text, std::vector<uint32_t>* out);

 private:
  struct State;
  std::shared_ptr<const BpeTokenizer> tokenizer_;
  std::unique_ptr<State> state_;
};

// The byte offset of the first invalid UTF-8 sequence in `text`, or npos when it is valid
// (overlong forms, surrogates and code points past U+10FFFF are invalid, as in Python's codec).
size_t find_invalid_utf8(std::string_view text);

}  // namespace tierzero::train
