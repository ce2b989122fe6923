// Each run encodes the whole corpus with a fresh encoder (an empty pre-token cache), so the
// figure is what prepare-data sees on a corpus of that size, not a warm re-run. With a
// normalizer, each run also times the normalizer alone on the corpus: its share of the encoding.
#include "tierzero/bench/tokenize.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "child_runs.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/input_file.hpp"
#include "tierzero/train/bpe_tokenizer.hpp"

namespace tierzero::bench {

namespace {

constexpr double kGoalMBps = 20.0;  // per core

// CPU seconds of this thread: on a shared machine the wall clock also counts other processes'
// turns, and "per core" means per CPU second.
double thread_cpu_seconds() {
  timespec ts{};
  TZ_CHECK(::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0,
           "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed: " + errno_string(), "");
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double rate(double amount, double seconds) {
  return seconds > 0.0 ? amount / seconds : 0.0;
}

void print_table(const BenchTokenizeOptions& o, const BenchTokenizeResult& r) {
  const double mb = static_cast<double>(r.bytes) / 1e6;
  std::fprintf(stderr, "bench tokenize: %s over %s (%.1f MB), one thread, %lld runs\n",
               o.tokenizer.c_str(), o.input.c_str(), mb, static_cast<long long>(o.repeats));
  std::fprintf(stderr, "  %-30s %12.3f s\n", "load tokenizer.json", r.load_s);
  std::fprintf(stderr, "  %-30s %12s\n", "normalizer", r.normalizer.c_str());
  if (r.normalize_mbps > 0.0)
    std::fprintf(stderr, "  %-30s %12.1f MB/s\n", "normalize alone, CPU (best)", r.normalize_mbps);
  std::fprintf(stderr, "  %-30s %12.1f MB/s\n", "encode, CPU time (best run)", r.mbps);
  std::fprintf(stderr, "  %-30s %12.1f MB/s\n", "encode, CPU time (median)", r.median_mbps);
  std::fprintf(stderr, "  %-30s %12.1f MB/s\n", "encode, wall clock (best run)", r.wall_mbps);
  std::fprintf(stderr, "  %-30s %12.0f tok/s\n", "tokens (best run)", r.tokens_per_s);
  std::fprintf(stderr, "  %-30s %12zu (%.2f bytes each)\n", "tokens", r.tokens,
               r.tokens ? static_cast<double>(r.bytes) / static_cast<double>(r.tokens) : 0.0);
  std::fprintf(stderr, "  %-30s %12.3f\n", "ratio to the 20 MB/s goal", r.mbps / kGoalMBps);
}

}  // namespace

BenchTokenizeResult bench_tokenize(const BenchTokenizeOptions& o) {
  const std::string text =
      read_input_file(o.input, "corpus", "give a UTF-8 text file with --input", size_t{4} << 30);
  BenchTokenizeResult r;
  const auto load_start = std::chrono::steady_clock::now();
  const auto tok = train::BpeTokenizer::load(o.tokenizer);
  r.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  std::vector<uint32_t> ids;
  std::vector<double> cpu, wall, normalize_cpu;  // seconds of each run
  r.normalizer = tok->normalizer();
  const bool normalizes = r.normalizer != "none";
  std::string normalized;  // what the ids must decode to
  for (int64_t k = 0; k < o.repeats; ++k) {
    if (normalizes) {
      const double n0 = thread_cpu_seconds();
      normalized = tok->normalize(text);
      normalize_cpu.push_back(thread_cpu_seconds() - n0);
    }
    ids.clear();
    ids.reserve(text.size() / 2);
    train::BpeEncoder encoder(tok);
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_seconds();
    encoder.encode(text, &ids);
    cpu.push_back(thread_cpu_seconds() - c0);
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  TZ_CHECK(tok->decode(ids.data(), ids.size()) == (normalizes ? normalized : text),
           std::string("decoding the ids does not give the corpus back") +
               (normalizes ? " (normalized by " + r.normalizer + ")" : ""),
           "the tokenizer is wrong: run test_tokenizer");
  const double bytes = static_cast<double>(text.size());
  const double best = *std::min_element(cpu.begin(), cpu.end());
  r.bytes = text.size();
  r.tokens = ids.size();
  r.vocab_size = tok->vocab_size();
  r.mbps = rate(bytes, best) / 1e6;
  r.median_mbps = rate(bytes, median(cpu)) / 1e6;
  r.wall_mbps = rate(bytes, *std::min_element(wall.begin(), wall.end())) / 1e6;
  r.tokens_per_s = rate(static_cast<double>(ids.size()), best);
  if (normalizes)
    r.normalize_mbps =
        rate(bytes, *std::min_element(normalize_cpu.begin(), normalize_cpu.end())) / 1e6;
  print_table(o, r);
  nlohmann::ordered_json j = bench_result("tokenize.bpe", round_to(r.mbps, 2), "MB/s", "goal",
                                          kGoalMBps, r.mbps / kGoalMBps);
  j["tokens_per_s"] = round_to(r.tokens_per_s, 0);
  j["tokens"] = r.tokens;
  j["bytes"] = r.bytes;
  j["vocab_size"] = r.vocab_size;
  j["load_s"] = round_to(r.load_s, 3);
  j["normalizer"] = r.normalizer;
  if (normalizes) j["normalize_MBps"] = round_to(r.normalize_mbps, 2);
  j["threads"] = 1;
  j["median_MBps"] = round_to(r.median_mbps, 2);
  j["wall_MBps"] = round_to(r.wall_mbps, 2);
  r.report.emit(j);
  return r;
}

}  // namespace tierzero::bench
