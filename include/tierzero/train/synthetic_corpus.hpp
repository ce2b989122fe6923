// The built-in corpus: English-like text from a small random grammar, byte-tokenized.
// It has structure a small GPT can learn in a few hundred steps (spelling, word order, counting
// sequences), so a default run shows the loss falling far below the unigram entropy with no data
// download.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tierzero::train {

// `tokens` byte tokens of generated documents separated by EOT; the same for the same seed.
std::vector<uint16_t> synthetic_corpus(size_t tokens, uint64_t seed = 20240520);
std::string synthetic_text(size_t bytes, uint64_t seed = 20240520);

// Entropy of the token frequency distribution, in nats: the loss of the best model that
// ignores context.
double unigram_entropy(const std::vector<uint16_t>& tokens, size_t vocab);

}  // namespace tierzero::train
