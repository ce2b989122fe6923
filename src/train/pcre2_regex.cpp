// PCRE2 pattern compilation (once, with the JIT where the platform has one) and matching.
#include "pcre2_regex.hpp"

#include "tierzero/core/error.hpp"

namespace tierzero::train {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof buf);
  if (n < 0) return "PCRE2 error " + std::to_string(code);
  return std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

Pcre2Pattern::Pcre2Pattern(const std::string& pattern, const std::string& source, bool literal)
    : source_(source) {
  // UCP: \s, \d, \w and the POSIX classes follow Unicode properties, as Oniguruma's (the regex
  // engine of Hugging Face tokenizers) do.
  uint32_t options = PCRE2_UTF | PCRE2_UCP;
  if (literal) options |= PCRE2_LITERAL;
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err,
                        &offset, nullptr);
  if (code_ == nullptr)
    TZ_THROW(source_ + ": the pattern does not compile at offset " + std::to_string(offset) + ": " +
                 pcre2_message(err),
             "give a PCRE-compatible regex (the ones GPT-2, Llama 3 and Qwen 2 use compile)");
  const int jit = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
  // No JIT on this platform (PCRE2_ERROR_JIT_BADOPTION): pcre2_match interprets the pattern,
  // slower but the same matches. Any other failure is an Error.
  if (jit != 0 && jit != PCRE2_ERROR_JIT_BADOPTION) {
    pcre2_code_free(code_);
    TZ_THROW(source_ + ": PCRE2 cannot JIT-compile the pattern: " + pcre2_message(jit),
             "is the process short of memory?");
  }
}

Pcre2Pattern::~Pcre2Pattern() {
  pcre2_code_free(code_);
}

Pcre2Matcher::Pcre2Matcher(const Pcre2Pattern& pattern) : pattern_(pattern) {
  data_ = pcre2_match_data_create_from_pattern(pattern.code(), nullptr);
  context_ = pcre2_match_context_create(nullptr);
  // PCRE2's default JIT stack is 32 KiB on the machine stack; a pattern with nested groups over
  // a long run of one class could exceed it, so each matcher has its own, up to 8 MiB.
  jit_stack_ = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  if (data_ == nullptr || context_ == nullptr || jit_stack_ == nullptr) {
    pcre2_match_data_free(data_);
    pcre2_match_context_free(context_);
    pcre2_jit_stack_free(jit_stack_);
    TZ_THROW(pattern_.source() + ": cannot allocate PCRE2 match state", "out of memory?");
  }
  pcre2_jit_stack_assign(context_, nullptr, jit_stack_);
}

Pcre2Matcher::~Pcre2Matcher() {
  pcre2_match_data_free(data_);
  pcre2_match_context_free(context_);
  pcre2_jit_stack_free(jit_stack_);
}

bool Pcre2Matcher::find(std::string_view subject, size_t start, size_t* begin, size_t* end) {
  const int rc = pcre2_match(pattern_.code(), reinterpret_cast<PCRE2_SPTR>(subject.data()),
                             subject.size(), start, PCRE2_NO_UTF_CHECK, data_, context_);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0)
    TZ_THROW(pattern_.source() + ": matching failed at byte " + std::to_string(start) + " of a " +
                 std::to_string(subject.size()) + "-byte piece: " + pcre2_message(rc),
             "the pattern backtracks too much on this input; simplify the pattern");
  // rc == 0 would mean the ovector is too small, impossible for match data made from the pattern.
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data_);
  // \K in a lookbehind can report an end before the start; a split has no meaning for it.
  TZ_CHECK(ov[0] <= ov[1] && ov[1] <= subject.size(),
           pattern_.source() + ": the pattern reported a match that ends before it starts",
           "remove \\K from the pattern");
  *begin = ov[0];
  *end = ov[1];
  return true;
}

}  // namespace tierzero::train
