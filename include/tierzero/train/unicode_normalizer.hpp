// Unicode normalization (NFC, NFD, NFKC, NFKD, and sequences of them), as Hugging Face
// `tokenizers` applies a tokenizer.json's "normalizer" to the text before pre-tokenization
// (Qwen 2's file asks for NFC). ICU does the work (unicode_normalizer.cpp says why ICU and why
// only Unicode 9.0's characters are touched); this header keeps ICU out of everyone else's way.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tierzero::train {

enum class NormalizationForm { kNFC, kNFD, kNFKC, kNFKD };

// "NFC", "NFD", "NFKC", "NFKD": the names tokenizer.json uses.
const char* normalization_form_name(NormalizationForm form);

// Immutable once built; one instance is shared by the threads that encode.
class UnicodeNormalizer {
 public:
  // ICU takes at most 2^31 - 1 bytes per call. Text is normalized in segments (of 4 KiB where a
  // form has a boundary, normalizing the pieces apart giving the same text), none over this.
  static constexpr size_t kMaxChunkBytes = size_t{1} << 30;

  // The forms applied one after the other (a tokenizer.json "Sequence"); none: the identity.
  // Error when ICU cannot load its normalization data. `max_chunk_bytes` is for tests.
  explicit UnicodeNormalizer(std::vector<NormalizationForm> steps,
                             size_t max_chunk_bytes = kMaxChunkBytes);
  ~UnicodeNormalizer();
  UnicodeNormalizer(const UnicodeNormalizer&) = delete;
  UnicodeNormalizer& operator=(const UnicodeNormalizer&) = delete;

  // "NFC", or "Sequence[NFD, NFC]" for several steps; "none" for none.
  std::string describe() const;

  // `text` (UTF-8, checked by the caller as for the pre-tokenizer regexes; ill-formed bytes do
  // not crash it but their result is unspecified) normalized: `text` itself when it is already
  // normalized (ASCII always is; no copy), else a view of *buffer, which holds the result.
  // Error when ICU fails, or when over max_chunk_bytes of text has no place to cut it.
  std::string_view normalize(std::string_view text, std::string* buffer) const;

 private:
  struct Step;
  std::vector<std::unique_ptr<const Step>> steps_;
  std::vector<NormalizationForm> forms_;
  size_t max_chunk_bytes_;
};

}  // namespace tierzero::train
