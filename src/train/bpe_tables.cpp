// Building a BpeTokenizer's tables from tokenizer.json, with the checks that keep its ids those
// of Hugging Face `tokenizers`: every byte has a token, every merge's parts and result are in the
// vocabulary, and each added token has the id `tokenizers` would give it.
#include "bpe_tables.hpp"

#include <algorithm>

#include "tierzero/core/error.hpp"
#include "tokenizer_json.hpp"

namespace tierzero::train {

namespace {

// GPT-2's pattern, which ByteLevel applies when use_regex is true (`tokenizers`' byte_level.rs).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {  // the byte-level alphabet stays below U+0144
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

[[noreturn]] void fail(const std::string& path, const std::string& key, const std::string& what,
                       const std::string& hint = "") {
  TZ_THROW("tokenizer file '" + path + "': key '" + key + "': " + what, hint);
}

// A vocabulary entry's raw bytes: each code point of the byte-level text back to its byte.
// False when a code point is outside the byte-level alphabet.
bool byte_level_to_bytes(const std::string& text, const std::array<int, 512>& code_point_byte,
                         std::string* bytes) {
  bytes->clear();
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    uint32_t cp = 0;
    size_t len = 1;
    if (c < 0x80) {
      cp = c;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < text.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
      len = 2;
    } else {
      return false;
    }
    if (cp >= code_point_byte.size() || code_point_byte[cp] < 0) return false;
    bytes->push_back(static_cast<char>(code_point_byte[cp]));
    i += len;
  }
  return true;
}

void build_vocab(const TokenizerSpec& spec, BpeTokenizer::Tables* t, BytesToId* mapped) {
  std::array<int, 512> code_point_byte;
  code_point_byte.fill(-1);
  for (int b = 0; b < 256; ++b) code_point_byte[byte_to_code_point(static_cast<uint8_t>(b))] = b;
  uint32_t max_id = 0;
  for (const auto& [text, id] : spec.vocab) max_id = std::max(max_id, id);
  for (const AddedTokenSpec& a : spec.added) max_id = std::max(max_id, a.id);
  t->vocab_size = spec.vocab.empty() && spec.added.empty() ? 0 : size_t{max_id} + 1;
  t->id_text.reserve(spec.vocab.size() + spec.added.size());
  std::string bytes;
  for (const auto& [text, id] : spec.vocab) {
    if (t->id_text.count(id) != 0)
      fail(spec.path, "model.vocab." + text, "id " + std::to_string(id) + " is given twice");
    if (!byte_level_to_bytes(text, code_point_byte, &bytes))
      fail(spec.path, "model.vocab." + text, "is not byte-level text (GPT-2's byte alphabet)",
           "TierZero reads byte-level BPE; is this a SentencePiece-style vocabulary?");
    t->id_text.emplace(id, bytes);
    t->vocab.emplace(bytes, id);
    mapped->emplace(text, id);
  }
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(byte_to_code_point(static_cast<uint8_t>(b)), &ch);
    const auto it = mapped->find(ch);
    if (it == mapped->end())
      fail(spec.path, "model.vocab",
           "has no token for byte " + std::to_string(b) + " (\"" + ch + "\")",
           "a byte-level vocabulary holds all 256 byte symbols");
    t->byte_ids[static_cast<size_t>(b)] = it->second;
  }
}

void build_merges(const TokenizerSpec& spec, const BytesToId& mapped, BpeTokenizer::Tables* t) {
  t->merges.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    const std::string key = "model.merges[" + std::to_string(rank) + "]";
    const auto l = mapped.find(left), r = mapped.find(right), m = mapped.find(left + right);
    if (l == mapped.end() || r == mapped.end() || m == mapped.end())
      fail(spec.path, key,
           "merge of \"" + left + "\" and \"" + right + "\": \"" +
               (l == mapped.end()   ? left
                : r == mapped.end() ? right
                                    : left + right) +
               "\" is not in model.vocab",
           "the merges and the vocabulary come from different tokenizers?");
    t->merges.insert(l->second, r->second, static_cast<uint32_t>(rank), m->second);
  }
}

// `tokenizers` gives an added token the id of its content in the vocabulary, or else the next id
// after the vocabulary (and after the added tokens before it); it ignores the id the file
// declares, with a warning. TierZero refuses the file instead, so ids never differ silently.
void build_added(const TokenizerSpec& spec, const BytesToId& mapped, BpeTokenizer::Tables* t) {
  const auto model_size = static_cast<uint32_t>(spec.vocab.size());
  bool any = false;
  uint32_t max_added = 0;
  for (size_t i = 0; i < spec.added.size(); ++i) {
    const AddedTokenSpec& a = spec.added[i];
    uint32_t id = 0;
    if (const auto seen = t->added_ids.find(a.content); seen != t->added_ids.end())
      id = seen->second;
    else if (const auto in_vocab = mapped.find(a.content); in_vocab != mapped.end())
      id = in_vocab->second;
    else
      id = !any ? model_size : (max_added >= model_size ? max_added + 1 : model_size);
    if (id != a.id)
      fail(spec.path, "added_tokens[" + std::to_string(i) + "].id",
           "token \"" + a.content + "\" declares id " + std::to_string(a.id) +
               ", but Hugging Face tokenizers gives it id " + std::to_string(id),
           "fix the id (tokenizers' own files agree with it)");
    any = true;
    max_added = std::max(max_added, id);
    // A `normalized` token matches, and decodes as, its normalized content (as in `tokenizers`).
    std::string match = a.content;
    if (a.normalized && t->normalizer) {
      std::string buffer;
      match = std::string(t->normalizer->normalize(a.content, &buffer));
    }
    t->added_ids.emplace(a.content, id);
    t->id_text.emplace(id, match);  // no-op for a token of the vocabulary
    AddedTokenSet& set = t->added[a.normalized ? 1 : 0];
    set.empty = false;
    set.by_first_byte[static_cast<unsigned char>(match[0])].push_back({std::move(match), id});
  }
  for (AddedTokenSet& set : t->added)
    for (auto& list : set.by_first_byte)
      std::stable_sort(list.begin(), list.end(), [](const auto& x, const auto& y) {
        return x.content.size() > y.content.size();
      });
}

}  // namespace

uint32_t byte_to_code_point(uint8_t b) {
  // Printable Latin-1 bytes stand for themselves; the others (controls, space, 0x7F-0xA0, 0xAD)
  // take U+0100 onwards, in byte order.
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  if (printable) return b;
  uint32_t n = 0;
  for (uint32_t c = 0; c < b; ++c) {
    const bool p = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
    if (!p) ++n;
  }
  return 256 + n;
}

void MergeTable::reserve(size_t merges) {
  size_t cap = 16;
  while (cap < merges * 2) cap *= 2;
  entries_.assign(cap, Entry{});
  mask_ = cap - 1;
}

void MergeTable::insert(uint32_t left, uint32_t right, uint32_t rank, uint32_t id) {
  const uint64_t key = (uint64_t{left} << 32) | right;
  for (size_t i = slot(key);; i = (i + 1) & mask_) {
    Entry& e = entries_[i];
    if (e.key == key || e.key == kEmpty) {
      e = {key, rank, id};
      return;
    }
  }
}

bool AddedTokenSet::find(std::string_view text, size_t from, size_t* at,
                         const Token** token) const {
  if (empty) return false;
  for (size_t i = from; i < text.size(); ++i) {
    const auto& list = by_first_byte[static_cast<unsigned char>(text[i])];
    for (const Token& t : list)
      if (text.size() - i >= t.content.size() &&
          text.compare(i, t.content.size(), t.content) == 0) {
        *at = i;
        *token = &t;
        return true;
      }
  }
  return false;
}

std::unique_ptr<BpeTokenizer::Tables> build_bpe_tables(const std::string& path) {
  const TokenizerSpec spec = read_tokenizer_json(path);
  auto t = std::make_unique<BpeTokenizer::Tables>();
  t->path = path;
  for (const SplitStep& s : spec.splits)
    t->splits.push_back(std::make_unique<Pcre2Pattern>(
        s.pattern, "tokenizer file '" + path + "': key '" + s.key + "'", s.literal));
  if (spec.byte_level_regex)
    t->byte_level_regex = std::make_unique<Pcre2Pattern>(kGpt2Pattern, "GPT-2's pattern");
  if (!spec.normalizers.empty())
    t->normalizer = std::make_unique<UnicodeNormalizer>(spec.normalizers);
  t->add_prefix_space = spec.add_prefix_space;
  t->ignore_merges = spec.ignore_merges;
  BytesToId mapped;  // byte-level text -> id, as the merges name tokens
  build_vocab(spec, t.get(), &mapped);
  build_merges(spec, mapped, t.get());
  build_added(spec, mapped, t.get());
  return t;
}

}  // namespace tierzero::train
