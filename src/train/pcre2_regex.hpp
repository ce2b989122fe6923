// A pre-tokenizer regex through PCRE2 (UTF-8 mode, Unicode properties for \p{L} \s \d, JIT).
// The field's tokenizers split text with patterns such as GPT-2's and Llama 3's, which need
// Unicode properties and lookahead (`\s+(?!\S)`); std::regex has neither, PCRE2 has both.
// A Pcre2Pattern is compiled once and shared by threads; each thread matches through its own
// Pcre2Matcher (match data, match context and JIT stack are per-thread state in PCRE2).
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace tierzero::train {

class Pcre2Pattern {
 public:
  // `source` names the pattern in errors (the file and key it came from). `literal`: the pattern
  // is a plain string (a Split's {"String": ...}), not a regex.
  Pcre2Pattern(const std::string& pattern, const std::string& source, bool literal = false);
  ~Pcre2Pattern();
  Pcre2Pattern(const Pcre2Pattern&) = delete;
  Pcre2Pattern& operator=(const Pcre2Pattern&) = delete;

  const pcre2_code* code() const { return code_; }
  const std::string& source() const { return source_; }

 private:
  pcre2_code* code_ = nullptr;
  std::string source_;
};

class Pcre2Matcher {
 public:
  explicit Pcre2Matcher(const Pcre2Pattern& pattern);
  ~Pcre2Matcher();
  Pcre2Matcher(const Pcre2Matcher&) = delete;
  Pcre2Matcher& operator=(const Pcre2Matcher&) = delete;

  // The first match in `subject` at or after byte `start` (a code point boundary): true and
  // [*begin, *end) when there is one, false when there is none. The subject must be valid UTF-8
  // (checked by the caller once for the whole text). Error when PCRE2 fails otherwise.
  bool find(std::string_view subject, size_t start, size_t* begin, size_t* end);

 private:
  const Pcre2Pattern& pattern_;
  pcre2_match_data* data_ = nullptr;
  pcre2_match_context* context_ = nullptr;
  pcre2_jit_stack* jit_stack_ = nullptr;
};

// PCRE2's message for an error code.
std::string pcre2_message(int code);

}  // namespace tierzero::train
