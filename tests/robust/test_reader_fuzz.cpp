// Fuzz tests of the input readers (config, llm.c token shards, llm.c model files, safetensors,
// profiles): seeded mutations of small valid files made by TierZero's own writers, each read the
// way the trainer or `tierzero report` reads it. Every case must end in success or a
// tierzero::Error: no other exception, no crash, no hang (CTest's TIMEOUT), and no single
// allocation above 256 MiB (alloc_guard aborts the test, printing the case).
// TIERZERO_FUZZ_SEED=<n> reruns with another seed, TIERZERO_FUZZ_CASES=<n> sets the cases per
// reader, TIERZERO_FUZZ_CASE=<k> runs only case k (the failure message names seed and case).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>

#include "alloc_guard.hpp"
#include "mutator.hpp"
#include "reader_seeds.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/profile/html_report.hpp"
#include "tierzero/profile/rank_comparison.hpp"
#include "tierzero/profile/rank_profiles.hpp"
#include "tierzero/profile/recommendations.hpp"
#include "tierzero/profile/trace_export.hpp"
#include "tierzero/train/checkpoint.hpp"
#include "tierzero/train/data_loader.hpp"
#include "tierzero/train/safetensors_gpt2.hpp"
#include "tierzero/train/train_config.hpp"

namespace tierzero::test {
namespace {

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

uint64_t fuzz_seed() {
  return env_u64("TIERZERO_FUZZ_SEED", 20240520);
}

// An error message with its quoted names and numbers blanked (a census of the kinds seen).
std::string error_kind(const std::string& message) {
  std::string out;
  bool quoted = false;
  for (char c : message) {
    if (c == '\'') {
      quoted = !quoted;
      if (quoted) out += "'...'";
    } else if (!quoted && (c < '0' || c > '9')) {
      out += c;
    } else if (!quoted && (out.empty() || out.back() != '#')) {
      out += '#';
    }
    if (out.size() >= 56) break;
  }
  return out;
}

// Runs `cases` mutations of a reader: mutate(m, what) returns the case's bytes, which are
// written to `path` and read by read(path).
void fuzz(const char* reader, uint64_t reader_id, size_t default_cases, const std::string& path,
          const std::function<std::string(Mutator&, std::string&)>& mutate,
          const std::function<void(const std::string&)>& read) {
  const uint64_t seed = fuzz_seed();
  const size_t cases = env_u64("TIERZERO_FUZZ_CASES", default_cases);
  const uint64_t only = env_u64("TIERZERO_FUZZ_CASE", UINT64_MAX);
  std::printf("fuzzing %s: seed %llu, %zu cases (TIERZERO_FUZZ_SEED / TIERZERO_FUZZ_CASES)\n",
              reader, static_cast<unsigned long long>(seed), cases);
  const auto start = std::chrono::steady_clock::now();
  size_t accepted = 0, refused = 0;
  std::map<std::string, size_t> census;  // the kinds of errors seen
  for (size_t k = 0; k < cases; ++k) {
    if (only != UINT64_MAX && k != only) continue;
    std::seed_seq seq{seed, reader_id, static_cast<uint64_t>(k)};
    uint64_t case_seed[1];
    seq.generate(case_seed, case_seed + 1);
    Mutator m(case_seed[0]);
    std::string what;
    const std::string bytes = mutate(m, what);
    write_bytes(path, bytes);
    const std::string context = std::string(reader) + " case " + std::to_string(k) + " (" + what +
                                "); rerun: TIERZERO_FUZZ_SEED=" + std::to_string(seed) +
                                " TIERZERO_FUZZ_CASE=" + std::to_string(k);
    set_allocation_context(context);
    try {
      read(path);
      ++accepted;
    } catch (const Error& e) {
      ++refused;
      const std::string w = e.what_failed();
      ++census[error_kind(w)];
      EXPECT_FALSE(w.empty()) << context;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "a non-tierzero exception escaped: " << e.what() << "\n  in " << context;
    } catch (...) {
      ADD_FAILURE() << "an unknown exception escaped\n  in " << context;
    }
  }
  set_allocation_context("(between fuzz cases)");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "%s: %zu accepted, %zu refused with tierzero::Error in %.2f s; largest single "
      "allocation %zu bytes\n",
      reader, accepted, refused, s, largest_allocation());
  for (const auto& [w, n] : census) std::printf("  %5zu x %s\n", n, w.c_str());
}

std::string dir_file(const std::string& name) {
  return scratch_dir() + "/" + name;
}

// The weights a model file's shape asks for, in floats: what the reader accepted must be
// justified by the file (a few times its size at most: padding and the padded vocabulary).
void expect_justified(size_t floats, size_t file_size, const std::string& what) {
  EXPECT_LE(floats * sizeof(float), 3 * file_size + (size_t{1} << 20))
      << what << " accepted a model the file cannot hold";
}

TEST(ReaderFuzz, ConfigFiles) {
  const std::string seed_path = dir_file("seed_config.json");
  const std::string seed = write_seed_config(seed_path);
  ASSERT_NO_THROW(train::TrainConfig::load(seed_path));
  const nlohmann::json doc = nlohmann::json::parse(seed, nullptr, true, true);
  fuzz(
      "config", 1, 1000, dir_file("case_config.json"),
      [&](Mutator& m, std::string& what) {
        const size_t kind = m.below(10);
        if (kind < 6) {
          nlohmann::json d = doc;
          m.mutate_json(d, what);
          if (m.chance(0.3)) m.mutate_json(d, what);
          return d.dump(2);
        }
        if (kind < 9) return m.mutate_json_text(seed, what);
        return m.mutate_bytes(seed, what);
      },
      [](const std::string& path) { train::TrainConfig::load(path); });
}

TEST(ReaderFuzz, TokenShards) {
  const std::string seed = write_seed_shard(dir_file("seed_shard.bin"));
  fuzz(
      "token shard", 2, 1000, dir_file("case_shard.bin"),
      [&](Mutator& m, std::string& what) {
        if (m.chance(0.4)) return m.set_header_field(seed, m.below(4), what);
        return m.mutate_bytes(seed, what);
      },
      [](const std::string& path) {
        train::DataLoader loader(train::open_token_shards(path), 2, 8, kSeedVocab);
        std::vector<int32_t> x(16), y(16);  // (B, T)
        const size_t batches = std::min<size_t>(loader.batches_per_epoch() + 1, 64);
        for (size_t b = 0; b < batches; ++b) loader.next_batch(x.data(), y.data());
      });
}

TEST(ReaderFuzz, LlmcModelFiles) {
  const std::string seed = write_seed_model_file(dir_file("seed_model.bin"));
  fuzz(
      "llm.c model file", 3, 1000, dir_file("case_model.bin"),
      [&](Mutator& m, std::string& what) {
        if (m.chance(0.5)) {
          std::string s = m.set_header_field(seed, m.below(8), what);
          std::string more;
          if (m.chance(0.3)) s = m.set_header_field(s, 2 + m.below(6), more), what += ", " + more;
          return s;
        }
        return m.mutate_bytes(seed, what);
      },
      [](const std::string& path) {
        const nn::GPTConfig c = train::read_checkpoint_config(path);
        const nn::ParamLayout layout = nn::gpt_param_layout(c);
        expect_justified(layout.total_numel(), file_bytes(path).size(), "read_checkpoint_config");
        std::vector<float> params(layout.total_numel());  // (layout.total_numel())
        train::load_checkpoint(path, layout, params.data());
      });
}

// A safetensors file as (header JSON, data) so mutations can rewrite the header consistently.
struct SafetensorsParts {
  std::string header, data;
};
SafetensorsParts split(const std::string& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[static_cast<size_t>(i)]);
  return {file.substr(8, n), file.substr(8 + n)};
}
std::string join(const std::string& header, const std::string& data, uint64_t length) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(length >> (8 * i));
  return out + header + data;
}

TEST(ReaderFuzz, SafetensorsFiles) {
  const std::string seed = write_seed_safetensors(dir_file("seed_model.safetensors"));
  const SafetensorsParts parts = split(seed);
  const nlohmann::json doc = nlohmann::json::parse(parts.header);
  fuzz(
      "safetensors", 4, 1200, dir_file("case_model.safetensors"),
      [&](Mutator& m, std::string& what) {
        const size_t kind = m.below(10);
        if (kind < 5) {
          nlohmann::json d = doc;
          m.mutate_json(d, what);
          const std::string h = d.dump();
          return join(h, parts.data, h.size());
        }
        if (kind < 7) {
          const std::string h = m.mutate_json_text(parts.header, what);
          return join(h, parts.data, h.size());
        }
        if (kind < 8) {  // the length field
          const uint64_t lengths[] = {0,
                                      1,
                                      7,
                                      parts.header.size() - 1,
                                      parts.header.size() + 1,
                                      seed.size(),
                                      seed.size() - 8,
                                      UINT64_MAX,
                                      1ULL << 63,
                                      200'000'000};
          const uint64_t n = lengths[m.below(std::size(lengths))];
          what = "header length " + std::to_string(n);
          return join(parts.header, parts.data, n);
        }
        return m.mutate_bytes(seed, what);
      },
      [](const std::string& path) {
        const nn::GPTConfig c = train::read_gpt2_safetensors_config(path);
        const nn::ParamLayout layout = nn::gpt_param_layout(c);
        expect_justified(layout.total_numel(), file_bytes(path).size(),
                         "read_gpt2_safetensors_config");
        std::vector<float> params(layout.total_numel());  // (layout.total_numel())
        train::load_gpt2_safetensors(path, layout, params.data());
      });
}

TEST(ReaderFuzz, ProfilesForReport) {
  const std::string seed = write_seed_profile(dir_file("seed_profile.json"));
  const nlohmann::json doc = nlohmann::json::parse(seed);
  const std::string html = dir_file("case_report.html");
  // Named as rank 1's file of a run, so the report also looks for the run's other ranks.
  fuzz(
      "profile", 5, 600, dir_file("case_profile.json.rank1"),
      [&](Mutator& m, std::string& what) {
        const size_t kind = m.below(10);
        if (kind < 7) {
          nlohmann::json d = doc;
          m.mutate_json(d, what);
          return d.dump();
        }
        if (kind < 9) return m.mutate_json_text(seed, what);
        return m.mutate_bytes(seed, what);
      },
      [&](const std::string& path) {
        const profile::RankProfiles rp = profile::read_rank_profiles({path});
        const profile::RankComparison c = profile::compare_ranks(rp);
        bool timelines = true;
        for (const profile::Profile& p : rp.profiles) timelines = timelines && p.has_timeline;
        if (timelines) profile::trace_text(rp.profiles, rp.sources);
        profile::write_html_report(rp, html);
        profile::recommend(rp.profiles[c.slowest]);
      });
}

}  // namespace
}  // namespace tierzero::test
