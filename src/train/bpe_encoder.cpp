// Encoding text with byte-level BPE, in the order Hugging Face `tokenizers` applies its steps:
// added tokens that are not `normalized` (leftmost-longest) cut out of the raw text, the
// normalizer on each piece between them, the `normalized` added tokens, the pre-tokenizer's
// splits, ByteLevel, then BPE merges by rank on each pre-token. Pre-tokens repeat (" the", " of"),
// so merged ones are cached.
#include <algorithm>
#include <queue>

#include "bpe_tables.hpp"
#include "piece_cache.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::train {

namespace {

// Pre-tokens longer than this are merged every time (`tokenizers` caches up to 256 too).
constexpr size_t kCacheMaxBytes = 256;
// Up to this many symbols, a scan for the lowest-rank pair beats a heap.
constexpr size_t kScanMaxSymbols = 64;

size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  return 4;
}

}  // namespace

struct BpeEncoder::State {
  const BpeTokenizer::Tables& t;
  std::vector<std::unique_ptr<Pcre2Matcher>> split_matchers;
  std::unique_ptr<Pcre2Matcher> byte_level_matcher;
  PieceCache cache;
  std::vector<uint32_t> ids;     // (symbols) merge work space
  std::vector<uint32_t> ranks;   // (symbols) rank of (ids[i], ids[i + 1]); UINT32_MAX: none
  std::vector<uint32_t> merged;  // (symbols) the token (ids[i], ids[i + 1]) merges into
  std::string prefixed;          // a piece with ByteLevel's prefix space
  std::string normalized;        // a piece after the normalizer, when it changed it
  std::vector<uint32_t>* out = nullptr;

  explicit State(const BpeTokenizer::Tables& tables) : t(tables) {
    for (const auto& p : t.splits) split_matchers.push_back(std::make_unique<Pcre2Matcher>(*p));
    if (t.byte_level_regex)
      byte_level_matcher = std::make_unique<Pcre2Matcher>(*t.byte_level_regex);
  }

  // Calls f on each piece of `s` as a Split with behavior Isolated cuts it: the matches and the
  // text between them. An empty match cuts there too (as `tokenizers` does), then the search
  // goes on one code point later; empty pieces are dropped.
  template <typename F>
  void for_each_piece(Pcre2Matcher& m, std::string_view s, F&& f) {
    size_t prev = 0, at = 0, begin = 0, end = 0;
    while (at <= s.size() && m.find(s, at, &begin, &end)) {
      if (begin > prev) f(s.substr(prev, begin - prev));
      if (end > begin) {
        f(s.substr(begin, end - begin));
        at = end;
      } else {
        if (begin >= s.size()) break;
        at = begin + utf8_length(static_cast<unsigned char>(s[begin]));
      }
      prev = end;
    }
    if (prev < s.size()) f(s.substr(prev));
  }

  // Level 0 matches the added tokens that are not normalized in the raw text; each piece between
  // them is normalized (one at a time: `normalized` holds only the current piece) before level 1
  // matches the normalized ones, as `tokenizers`' AddedVocabulary::extract_and_normalize does.
  void added_pass(std::string_view text, size_t level) {
    if (level == 1 && t.normalizer) text = t.normalizer->normalize(text, &normalized);
    if (level == t.added.size()) return split_step(0, text);
    size_t from = 0, at = 0;
    const AddedTokenSet::Token* token = nullptr;
    while (t.added[level].find(text, from, &at, &token)) {
      if (at > from) added_pass(text.substr(from, at - from), level + 1);
      out->push_back(token->id);
      from = at + token->content.size();
    }
    if (from < text.size()) added_pass(text.substr(from), level + 1);
  }

  void split_step(size_t k, std::string_view piece) {
    if (piece.empty()) return;
    if (k < split_matchers.size())
      return for_each_piece(*split_matchers[k], piece,
                            [&](std::string_view p) { split_step(k + 1, p); });
    if (t.add_prefix_space && piece[0] != ' ') {
      prefixed.assign(1, ' ');
      prefixed.append(piece);
      piece = prefixed;
    }
    if (byte_level_matcher)
      for_each_piece(*byte_level_matcher, piece, [&](std::string_view p) { bpe(p); });
    else
      bpe(piece);
  }

  void bpe(std::string_view word) {
    if (word.size() == 1) {
      out->push_back(t.byte_ids[static_cast<unsigned char>(word[0])]);
      return;
    }
    // The cache holds what the word became, whether by ignore_merges or by merging.
    const bool cacheable = word.size() <= kCacheMaxBytes;
    const uint64_t h = cacheable ? hash_bytes(word) : 0;
    size_t count = 0;
    if (cacheable)
      if (const uint32_t* hit = cache.find(word, h, &count)) {
        out->insert(out->end(), hit, hit + count);
        return;
      }
    const auto in_vocab = t.ignore_merges ? t.vocab.find(word) : t.vocab.end();
    if (in_vocab != t.vocab.end()) {
      ids.assign(1, in_vocab->second);
    } else {
      ids.resize(word.size());
      for (size_t i = 0; i < word.size(); ++i)
        ids[i] = t.byte_ids[static_cast<unsigned char>(word[i])];
      if (ids.size() <= kScanMaxSymbols)
        merge_by_scan();
      else
        merge_by_heap();
    }
    out->insert(out->end(), ids.begin(), ids.end());
    if (cacheable) cache.insert(word, h, ids.data(), ids.size());
  }

  void rank_pair(size_t i) {
    const MergeTable::Entry* e = t.merges.find(ids[i], ids[i + 1]);
    ranks[i] = e ? e->rank : UINT32_MAX;
    merged[i] = e ? e->id : 0;
  }

  // Merges the leftmost lowest-rank pair until none merges: what `tokenizers`' priority queue
  // does, by a scan over the pairs' ranks (short words).
  void merge_by_scan() {
    size_t n = ids.size();
    ranks.resize(n);
    merged.resize(n);
    for (size_t i = 0; i + 1 < n; ++i) rank_pair(i);
    while (n > 1) {
      size_t best = 0;
      for (size_t i = 1; i + 1 < n; ++i)
        if (ranks[i] < ranks[best]) best = i;
      if (ranks[best] == UINT32_MAX) break;
      ids[best] = merged[best];
      std::copy(ids.begin() + static_cast<ptrdiff_t>(best) + 2,
                ids.begin() + static_cast<ptrdiff_t>(n),
                ids.begin() + static_cast<ptrdiff_t>(best) + 1);
      std::copy(ranks.begin() + static_cast<ptrdiff_t>(best) + 2,
                ranks.begin() + static_cast<ptrdiff_t>(n),
                ranks.begin() + static_cast<ptrdiff_t>(best) + 1);
      std::copy(merged.begin() + static_cast<ptrdiff_t>(best) + 2,
                merged.begin() + static_cast<ptrdiff_t>(n),
                merged.begin() + static_cast<ptrdiff_t>(best) + 1);
      --n;
      if (best > 0) rank_pair(best - 1);
      if (best + 1 < n)
        rank_pair(best);
      else
        ranks[best] = UINT32_MAX;
    }
    ids.resize(n);
  }

  // The same merges with `tokenizers`' algorithm (a heap of (rank, position), stale entries
  // skipped): O(n log n) for long pre-tokens such as a run of thousands of spaces.
  void merge_by_heap() {
    struct Candidate {
      uint32_t rank, pos, id;
      bool operator>(const Candidate& o) const {
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    const size_t n = ids.size();
    std::vector<int64_t> prev(n), next(n);
    std::vector<uint8_t> alive(n, 1);
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    auto push = [&](size_t i, size_t j) {
      if (const MergeTable::Entry* e = t.merges.find(ids[i], ids[j]))
        heap.push({e->rank, static_cast<uint32_t>(i), e->id});
    };
    for (size_t i = 0; i < n; ++i) {
      prev[i] = static_cast<int64_t>(i) - 1;
      next[i] = i + 1 < n ? static_cast<int64_t>(i) + 1 : -1;
      if (i + 1 < n) push(i, i + 1);
    }
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      if (!alive[c.pos] || next[c.pos] < 0) continue;
      const auto right = static_cast<size_t>(next[c.pos]);
      const MergeTable::Entry* e = t.merges.find(ids[c.pos], ids[right]);
      if (e == nullptr || e->id != c.id) continue;  // the pair changed since it was pushed
      ids[c.pos] = c.id;
      alive[right] = 0;
      next[c.pos] = next[right];
      if (next[right] >= 0) prev[static_cast<size_t>(next[right])] = c.pos;
      if (prev[c.pos] >= 0) push(static_cast<size_t>(prev[c.pos]), c.pos);
      if (next[c.pos] >= 0) push(c.pos, static_cast<size_t>(next[c.pos]));
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i)
      if (alive[i]) ids[kept++] = ids[i];
    ids.resize(kept);
  }
};

BpeEncoder::BpeEncoder(std::shared_ptr<const BpeTokenizer> tokenizer)
    : tokenizer_(std::move(tokenizer)), state_(std::make_unique<State>(tokenizer_->tables())) {}

BpeEncoder::~BpeEncoder() = default;

void BpeEncoder::encode(std::string_view text, std::vector<uint32_t>* out) {
  const size_t bad = find_invalid_utf8(text);
  TZ_CHECK(bad == std::string_view::npos,
           "text to tokenize is not valid UTF-8 at byte " + std::to_string(bad),
           "byte-level BPE tokenizers read UTF-8 text; convert the file (e.g. with iconv)");
  state_->out = out;
  state_->added_pass(text, 0);
}

}  // namespace tierzero::train
