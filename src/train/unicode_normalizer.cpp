// Unicode normalization through ICU (libicu-dev).
//
// Why ICU: it is the field's reference implementation of Unicode normalization (maintained with
// the Unicode Consortium; what browsers, databases and libxml2 use), Debian ships it, it works on
// UTF-8 directly (Normalizer2::isNormalizedUTF8 / normalizeUTF8), so text that is already
// normalized (most text) is checked in place without a conversion or a copy, and it can restrict
// a form to a set of code points (FilteredNormalizer2), which parity with `tokenizers` needs.
//
// Why only Unicode 9.0's characters: `tokenizers` normalizes with the tables of its
// unicode-normalization-alignments crate, which are Unicode 9.0's. A character assigned later has
// no decomposition and combining class 0 there, so it passes through and blocks reordering and
// composition around it. ICU 72 knows Unicode 15.0 (under NFKC it turns U+32FF into 令和, and it
// reorders marks such as U+1E08F), so each form here is filtered to [:age=9.0:]:
// FilteredNormalizer2 copies the characters outside the set as they are and normalizes the runs
// between them apart, which is what a class-0 character without a decomposition does. Unicode's
// stability policy keeps the decompositions and classes of older characters the same in later
// versions, so the result is `tokenizers`' (compared by hand over every code point and 60,000
// random sequences of combining marks, all four forms, ICU 72 vs tokenizers 0.23.3; test_normalizer
// keeps the characters where the versions differ).
#include "tierzero/train/unicode_normalizer.hpp"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uniset.h>
#include <unicode/utf8.h>
#include <unicode/utypes.h>

#include <algorithm>
#include <cstdint>

#include "tierzero/core/error.hpp"

namespace tierzero::train {

namespace {

// The Unicode version of `tokenizers`' normalization tables (see above).
constexpr const char* kTokenizersUnicodeSet = "[:age=9.0:]";
// Text is checked and normalized in segments of about this size (cut at boundaries), so that
// the segments without a change are copied instead of rewritten by ICU.
constexpr size_t kSegmentBytes = 4096;

void check_icu(UErrorCode status, const std::string& what) {
  if (U_FAILURE(status))
    TZ_THROW(what + ": ICU error " + u_errorName(status),
             status == U_MEMORY_ALLOCATION_ERROR
                 ? "the process is short of memory"
                 : "is ICU's data library (libicu72 / libicudata) installed and intact?");
}

const icu::Normalizer2* icu_instance(NormalizationForm form, UErrorCode* status) {
  switch (form) {
    case NormalizationForm::kNFC:
      return icu::Normalizer2::getNFCInstance(*status);
    case NormalizationForm::kNFD:
      return icu::Normalizer2::getNFDInstance(*status);
    case NormalizationForm::kNFKC:
      return icu::Normalizer2::getNFKCInstance(*status);
    case NormalizationForm::kNFKD:
      return icu::Normalizer2::getNFKDInstance(*status);
  }
  return nullptr;
}

bool is_ascii(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  unsigned char any = 0;
  // Eight bytes at a time without branches; the compiler vectorizes it.
  for (; i + 8 <= n; i += 8)
    any |= static_cast<unsigned char>(p[i] | p[i + 1] | p[i + 2] | p[i + 3] | p[i + 4] | p[i + 5] |
                                      p[i + 6] | p[i + 7]);
  for (; i < n; ++i) any |= p[i];
  return (any & 0x80u) == 0;
}

}  // namespace

const char* normalization_form_name(NormalizationForm form) {
  switch (form) {
    case NormalizationForm::kNFC:
      return "NFC";
    case NormalizationForm::kNFD:
      return "NFD";
    case NormalizationForm::kNFKC:
      return "NFKC";
    case NormalizationForm::kNFKD:
      return "NFKD";
  }
  return "?";
}

// One form, restricted to `tokenizers`' characters. ICU's Normalizer2 instances are singletons
// owned by ICU; the set is frozen, so concurrent reads from several encoders are safe.
struct UnicodeNormalizer::Step {
  NormalizationForm form;
  icu::UnicodeSet set;
  std::unique_ptr<icu::FilteredNormalizer2> normalizer;

  explicit Step(NormalizationForm f) : form(f) {
    const std::string what = std::string("loading ICU's ") + normalization_form_name(f) + " data";
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* base = icu_instance(f, &status);
    check_icu(status, what);
    TZ_CHECK(base != nullptr, what + ": ICU returned no normalizer", "");
    set.applyPattern(icu::UnicodeString(kTokenizersUnicodeSet, -1, US_INV), status);
    check_icu(status, what + " (the set " + kTokenizersUnicodeSet + ")");
    set.freeze();
    normalizer = std::make_unique<icu::FilteredNormalizer2>(*base, set);
  }
  // The filtered normalizer refers to `set`: a Step stays where it was built.
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

  std::string what(size_t offset) const {
    return std::string("ICU ") + normalization_form_name(form) + " normalization at byte " +
           std::to_string(offset) + " of a text (a piece between added tokens)";
  }

  // Where to end the segment that starts at `from`: the end of the text, or the last code point
  // within `target` bytes that has a normalization boundary before it (a character that does
  // not interact with what precedes it: normalizing the two sides apart gives the same text), or
  // failing that the first one after, within `limit` bytes (ICU's int32 lengths).
  size_t segment_end(std::string_view s, size_t from, size_t target, size_t limit) const {
    if (s.size() - from <= target) return s.size();
    const auto* p = reinterpret_cast<const uint8_t*>(s.data());
    const auto boundary_at = [&](size_t at) {
      if ((p[at] & 0xC0u) == 0x80u) return false;  // a continuation byte: inside a code point
      int32_t i = 0;
      UChar32 c = 0;
      const auto len = static_cast<int32_t>(std::min<size_t>(4, s.size() - at));
      U8_NEXT(p + at, i, len, c);
      return c >= 0 && normalizer->hasBoundaryBefore(c);
    };
    for (size_t at = from + target; at > from; --at)
      if (boundary_at(at)) return at;
    const size_t last = std::min(s.size(), from + limit);
    for (size_t at = from + target + 1; at <= last; ++at)
      if (at == s.size() || boundary_at(at)) return at;
    TZ_THROW(what(from) + ": " + std::to_string(limit) +
                 " bytes without a place where it may be cut (one run of combining marks?)",
             "split the text into smaller documents");
  }

  bool is_normalized(std::string_view s, size_t offset) const {
    UErrorCode status = U_ZERO_ERROR;
    const UBool yes = normalizer->isNormalizedUTF8(
        icu::StringPiece(s.data(), static_cast<int32_t>(s.size())), status);
    check_icu(status, what(offset));
    return yes != 0;
  }

  void append_normalized(std::string_view s, size_t offset, std::string* out) const {
    UErrorCode status = U_ZERO_ERROR;
    icu::StringByteSink<std::string> sink(out, static_cast<int32_t>(s.size()));
    normalizer->normalizeUTF8(0, icu::StringPiece(s.data(), static_cast<int32_t>(s.size())), sink,
                              nullptr, status);
    check_icu(status, what(offset));
  }

  // False when `in` is already normalized (nothing written), else true with *out the result.
  // The text goes by segments of about kSegmentBytes: one that is ASCII or already normalized is
  // copied as it is, so ICU rewrites only the segments that change (a few accents in English
  // text cost a few segments, not the whole text).
  bool apply(std::string_view in, size_t max_bytes, std::string* out) const {
    if (is_ascii(in)) return false;  // ASCII is invariant under all four forms
    const size_t target = std::min(kSegmentBytes, max_bytes);
    const auto unchanged = [&](std::string_view seg, size_t at) {
      return is_ascii(seg) || is_normalized(seg, at);
    };
    size_t from = 0;
    for (;;) {  // up to the first segment that changes, nothing is written
      if (from == in.size()) return false;
      const size_t end = segment_end(in, from, target, max_bytes);
      if (!unchanged(in.substr(from, end - from), from)) break;
      from = end;
    }
    out->clear();
    out->reserve(in.size() + in.size() / 8);
    out->append(in.substr(0, from));
    while (from < in.size()) {
      const size_t end = segment_end(in, from, target, max_bytes);
      const std::string_view seg = in.substr(from, end - from);
      if (unchanged(seg, from))
        out->append(seg);
      else
        append_normalized(seg, from, out);
      from = end;
    }
    return true;
  }
};

UnicodeNormalizer::UnicodeNormalizer(std::vector<NormalizationForm> steps, size_t max_chunk_bytes)
    : forms_(std::move(steps)), max_chunk_bytes_(max_chunk_bytes) {
  TZ_CHECK(max_chunk_bytes_ >= 4 && max_chunk_bytes_ <= size_t{INT32_MAX},
           "UnicodeNormalizer: chunk size " + std::to_string(max_chunk_bytes_) +
               " is outside [4, 2^31 - 1] bytes (ICU's limit)",
           "");
  for (const NormalizationForm f : forms_) steps_.push_back(std::make_unique<const Step>(f));
}

UnicodeNormalizer::~UnicodeNormalizer() = default;

std::string UnicodeNormalizer::describe() const {
  if (forms_.empty()) return "none";
  if (forms_.size() == 1) return normalization_form_name(forms_[0]);
  std::string s = "Sequence[";
  for (size_t i = 0; i < forms_.size(); ++i)
    s += std::string(i ? ", " : "") + normalization_form_name(forms_[i]);
  return s + "]";
}

std::string_view UnicodeNormalizer::normalize(std::string_view text, std::string* buffer) const {
  std::string_view current = text;
  std::string scratch;  // a Sequence's steps after the first alternate between the two
  for (const auto& step : steps_) {
    std::string* target = current.data() == buffer->data() ? &scratch : buffer;
    if (!step->apply(current, max_chunk_bytes_, target)) continue;
    if (target == &scratch) buffer->swap(scratch);
    current = *buffer;
  }
  return current;
}

}  // namespace tierzero::train
