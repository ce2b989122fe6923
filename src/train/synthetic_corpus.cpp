// Generator of the built-in corpus: short documents of sentences drawn from a fixed grammar
// (subject, verb, object, place) plus counting runs ("count: 4 5 6 7 8."). Spelling and word
// order are learnable from context; the word choices are random, so the loss floor stays above 0.
#include "tierzero/train/synthetic_corpus.hpp"

#include <cmath>

#include "tierzero/core/random.hpp"
#include "tierzero/train/byte_tokenizer.hpp"

namespace tierzero::train {

namespace {

const char* const kSubjects[] = {"the cat",   "a dog",        "my friend",   "the old man",
                                 "alice",     "bob",          "the teacher", "a small bird",
                                 "the robot", "our neighbour"};
const char* const kVerbs[] = {"sees",    "likes", "finds", "paints",
                              "carries", "wants", "keeps", "builds"};
const char* const kAdjectives[] = {"red", "big", "quiet", "green", "tiny", "bright", "heavy"};
const char* const kObjects[] = {"ball", "box", "apple", "book", "chair", "lamp", "kite", "stone"};
const char* const kPlaces[] = {"in the garden", "near the river", "at home",
                               "on the hill",   "under the tree", "in the kitchen"};
const char* const kNumbers[] = {"zero", "one", "two",   "three", "four",
                                "five", "six", "seven", "eight", "nine"};

template <size_t N>
const char* pick(Rng& rng, const char* const (&words)[N]) {
  return words[rng.below(N)];
}

void sentence(Rng& rng, std::string& out) {
  std::string s = pick(rng, kSubjects);
  s += ' ';
  s += pick(rng, kVerbs);
  s += rng.uniform() < 0.5 ? " the " : " a ";
  if (rng.uniform() < 0.6) {
    s += pick(rng, kAdjectives);
    s += ' ';
  }
  s += pick(rng, kObjects);
  if (rng.uniform() < 0.5) {
    s += ' ';
    s += pick(rng, kPlaces);
  }
  s += ". ";
  out += s;
}

void counting(Rng& rng, std::string& out) {
  uint64_t start = rng.below(6);
  uint64_t len = 3 + rng.below(4);
  out += "count:";
  for (uint64_t i = 0; i < len && start + i < 10; ++i) {
    out += ' ';
    out += kNumbers[start + i];
  }
  out += ". ";
}

}  // namespace

std::string synthetic_text(size_t bytes, uint64_t seed) {
  Rng rng(seed);
  std::string out;
  out.reserve(bytes + 128);
  while (out.size() < bytes) {
    if (rng.uniform() < 0.25)
      counting(rng, out);
    else
      sentence(rng, out);
    if (rng.uniform() < 0.1) out += '\n';
  }
  out.resize(bytes);
  return out;
}

std::vector<uint16_t> synthetic_corpus(size_t tokens, uint64_t seed) {
  Rng rng(seed ^ 0x5eedull);
  std::vector<uint16_t> out;
  out.reserve(tokens);
  uint64_t doc_seed = seed;
  while (out.size() < tokens) {
    size_t doc_bytes = 200 + rng.below(800);
    std::vector<uint16_t> doc = byte_tokenize(synthetic_text(doc_bytes, doc_seed++));
    out.push_back(kEotToken);
    out.insert(out.end(), doc.begin(), doc.end());
  }
  out.resize(tokens);
  return out;
}

double unigram_entropy(const std::vector<uint16_t>& tokens, size_t vocab) {
  std::vector<double> counts(vocab, 0.0);
  for (uint16_t t : tokens)
    if (t < vocab) counts[t] += 1.0;
  const double n = static_cast<double>(tokens.size());
  double h = 0.0;
  for (double c : counts)
    if (c > 0) h -= (c / n) * std::log(c / n);
  return h;
}

}  // namespace tierzero::train
