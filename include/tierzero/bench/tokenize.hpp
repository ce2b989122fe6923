// `tierzero bench tokenize`: byte-level BPE encoding throughput (MB/s and tokens/s, one thread)
// of a tokenizer.json over a text corpus, against the 20 MB/s per core that prepare-data aims
// for; the result is checked by decoding it back to the corpus (normalized, where the tokenizer
// has a normalizer such as Qwen 2's NFC, whose own rate is reported beside).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tierzero/bench/results.hpp"

namespace tierzero::bench {

struct BenchTokenizeOptions {
  std::string tokenizer;  // Hugging Face tokenizer.json
  std::string input;      // UTF-8 text corpus
  int64_t repeats = 3;    // runs, each with a fresh encoder; the best is the figure
};

struct BenchTokenizeResult {
  size_t bytes = 0;             // of the corpus
  size_t tokens = 0;            // its ids
  size_t vocab_size = 0;        // the tokenizer's
  double mbps = 0.0;            // per CPU second of the encoding thread, best run
  double median_mbps = 0.0;     // the same, median run
  double wall_mbps = 0.0;       // per wall-clock second, best run
  double tokens_per_s = 0.0;    // per CPU second, best run
  double load_s = 0.0;          // reading tokenizer.json
  std::string normalizer;       // the tokenizer's: "none", "NFC", ...
  double normalize_mbps = 0.0;  // the normalizer alone, per CPU second, best run (0: none)
  BenchReport report;           // the tokenize.bpe line
};

// Runs the benchmark: a table on stderr, one JSON object (tokenize.bpe) on stdout. Throws Error
// for an unreadable corpus or tokenizer, or when decoding does not give the corpus back.
BenchTokenizeResult bench_tokenize(const BenchTokenizeOptions& options);

}  // namespace tierzero::bench
