// BpeTokenizer: loading (tables in bpe_tables.cpp), decoding, normalizing as encoding does, and
// the UTF-8 check every encode starts with (the normalizer and the regexes run in UTF-8 mode
// without re-checking each piece).
#include "tierzero/train/bpe_tokenizer.hpp"

#include "bpe_tables.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::train {

BpeTokenizer::BpeTokenizer(std::unique_ptr<Tables> tables) : tables_(std::move(tables)) {}
BpeTokenizer::~BpeTokenizer() = default;

std::shared_ptr<const BpeTokenizer> BpeTokenizer::load(const std::string& path) {
  return std::shared_ptr<const BpeTokenizer>(new BpeTokenizer(build_bpe_tables(path)));
}

const std::string& BpeTokenizer::path() const {
  return tables_->path;
}
size_t BpeTokenizer::vocab_size() const {
  return tables_->vocab_size;
}

std::optional<uint32_t> BpeTokenizer::added_token(std::string_view content) const {
  const auto it = tables_->added_ids.find(content);
  if (it == tables_->added_ids.end()) return std::nullopt;
  return it->second;
}

std::string BpeTokenizer::normalizer() const {
  return tables_->normalizer ? tables_->normalizer->describe() : "none";
}

std::string BpeTokenizer::normalize(std::string_view text) const {
  if (!tables_->normalizer) return std::string(text);
  std::string out, buffer;
  const auto append_normalized = [&](std::string_view piece) {
    if (!piece.empty()) out += tables_->normalizer->normalize(piece, &buffer);
  };
  size_t from = 0, at = 0;
  const AddedTokenSet::Token* token = nullptr;
  while (tables_->added[0].find(text, from, &at, &token)) {
    append_normalized(text.substr(from, at - from));
    out += token->content;
    from = at + token->content.size();
  }
  append_normalized(text.substr(from));
  return out;
}

std::string BpeTokenizer::decode(const uint32_t* ids, size_t count) const {
  std::string text;
  for (size_t i = 0; i < count; ++i) {
    const auto it = tables_->id_text.find(ids[i]);
    TZ_CHECK(it != tables_->id_text.end(),
             "token id " + std::to_string(ids[i]) + " (at " + std::to_string(i) +
                 ") is not in the tokenizer '" + tables_->path + "'",
             "the ids come from another tokenizer");
    text += it->second;
  }
  return text;
}

size_t find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if ((s[i] & 0xE0) == 0xC0) {
      len = 2, cp = s[i] & 0x1Fu, min = 0x80;
    } else if ((s[i] & 0xF0) == 0xE0) {
      len = 3, cp = s[i] & 0x0Fu, min = 0x800;
    } else if ((s[i] & 0xF8) == 0xF0) {
      len = 4, cp = s[i] & 0x07u, min = 0x10000;
    } else {
      return i;
    }
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

}  // namespace tierzero::train
