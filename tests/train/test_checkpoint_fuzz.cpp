// Fuzz test of the training checkpoint readers (manifest.json, rank-<r>.json, rank-<r>.bin):
// valid checkpoints written by the real code (a tiny model trained 2 steps in-process, its blocks
// one per layer or two layers per unit, and a 2-rank sharded checkpoint) are mutated by a seeded
// random mutator -- byte flips, truncations, insertions, removed files, JSON values replaced by
// huge, negative, fractional or wrongly typed ones, keys removed -- and read back through every
// reader (open_checkpoint, checkpoint_model, CheckpointReader reading every block,
// CheckpointRanges reading every range). The only failure allowed is a tierzero::Error naming
// the checkpoint; any other exception, a crash, a hang (CTest's timeout) or an allocation above
// 256 MiB (the readers' allocation guard, tests/robust/alloc_guard.hpp) fails the test.
//   TIERZERO_FUZZ_SEED=<n>   the seed (printed; default fixed, so CI is reproducible)
//   TIERZERO_FUZZ_CASES=<n>  cases to run (default 3000), within TIERZERO_FUZZ_SECONDS (40)
//   TIERZERO_FUZZ_CASE=<i>   run only case i (to reproduce one)
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "alloc_guard.hpp"
#include "checkpoint_fixture.hpp"
#include "mutator.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/checkpoint_contents.hpp"

using namespace tierzero;
namespace fs = std::filesystem;

namespace {

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void spill(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// One pristine checkpoint: its files' bytes, the identity it was written with, and what its
// readers are asked for (every block of rank 0, every unit/kind range).
struct Pristine {
  std::string dir;
  std::map<std::string, std::string> files;  // name -> bytes
  nlohmann::ordered_json identity;
  std::vector<std::pair<std::string, size_t>> rank0_blocks;  // name, bytes
  struct Range {
    std::string unit, kind, dtype;
    size_t begin, elems, elem_bytes;
  };
  std::vector<Range> ranges;
};

Pristine load_pristine(const std::string& dir) {
  Pristine p;
  p.dir = dir;
  for (const auto& e : fs::directory_iterator(dir))
    p.files[e.path().filename().string()] = slurp(e.path().string());
  p.identity = nlohmann::ordered_json::parse(p.files.at("manifest.json"))["identity"];
  const train::CheckpointContents c = train::open_checkpoint(dir);
  for (const train::CheckpointBlock& b : c.ranks[0].blocks)
    p.rank0_blocks.push_back({b.name, b.bytes});
  for (const train::CheckpointRankFile& r : c.ranks)
    for (const train::CheckpointBlock& b : r.blocks)
      p.ranges.push_back(
          {b.unit, b.kind, b.dtype, b.begin, b.elems, b.elems ? b.bytes / b.elems : 4});
  return p;
}

// Every reader over the (mutated) checkpoint; throws what they throw.
void read_everything(const Pristine& p) {
  const train::CheckpointContents c = train::open_checkpoint(p.dir);
  if (c.manifest.identity.contains("model_shape")) train::checkpoint_model(c);
  std::vector<uint8_t> buf;
  {
    train::CheckpointReader reader(p.dir, 0, p.identity);
    for (const auto& [name, bytes] : p.rank0_blocks) {
      buf.resize(bytes);
      reader.read_block(name, buf.data(), bytes);
    }
    reader.finish();
  }
  train::CheckpointRanges ranges(p.dir);
  for (const Pristine::Range& r : p.ranges) {
    buf.resize(r.elems * r.elem_bytes);
    ranges.read(r.unit, {r.kind}, r.dtype, r.begin, r.elems, buf.data());
  }
}

const char* const kHostile[] = {
    "-1",
    "-5",
    "0",
    "1",
    "2",
    "7",
    "-9223372036854775808",
    "9223372036854775807",
    "4611686018427387904",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999",
    "1e400",
    "-1e400",
    "1e18",
    "0.5",
    "3.7",
    "-0.0",
    "2.0",
    "1e-300",
    "\"x\"",
    "\"\"",
    "\"12\"",
    "true",
    "false",
    "null",
    "[]",
    "{}",
    "[1,2]",
    "{\"a\":1}",
    "\"../../etc/passwd\"",
    "\"rank-00001.bin\"",
    "\"manifest.json\"",
    "\"fp16\"",
    "\"adam_v\"",
    "\"u0\"",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"};

// A JSON value of `text` replaced by a hostile one, or a number nudged, or a key removed.
std::string mutate_json(const std::string& text, std::mt19937_64& rng) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return text;  // already mutated past JSON
  }
  const nlohmann::ordered_json flat = j.flatten();
  if (flat.empty() || !flat.is_object()) return text;
  auto it = flat.begin();
  std::advance(it, static_cast<long>(rng() % flat.size()));
  const nlohmann::ordered_json::json_pointer where(it.key());
  const uint64_t op = rng() % 10;
  if (op == 0) {  // remove the key (or the array element)
    const nlohmann::ordered_json::json_pointer parent = where.parent_pointer();
    nlohmann::ordered_json& container = j[parent];
    if (container.is_object()) container.erase(where.back());
    return j.dump(1);
  }
  std::string value;
  if (op <= 3 && it.value().is_number_integer()) {  // near the real value: off by a little
    const int64_t v = it.value().get<int64_t>();
    const int64_t deltas[] = {1, -1, 2, 4, 8, 1 << 20, -v - 1, v};
    value = std::to_string(v + deltas[rng() % 8]);
  } else {
    value = kHostile[rng() % (sizeof kHostile / sizeof *kHostile)];
  }
  j[where] = "@@FUZZ@@";
  std::string out = j.dump(static_cast<int>(rng() % 2));
  out.replace(out.find("\"@@FUZZ@@\""), 10, value);
  return out;
}

// A byte-level change by the readers' shared mutator, seeded from this case's generator.
std::string mutate_bytes(const std::string& s, std::mt19937_64& rng) {
  test::Mutator mutator(rng());
  std::string what;
  return mutator.mutate_bytes(s, what);
}

// Applies 1-3 mutations to p's files on disk (from their pristine bytes).
void mutate(const Pristine& p, std::mt19937_64& rng) {
  std::map<std::string, std::string> files = p.files;
  for (uint64_t k = 1 + rng() % 3; k-- > 0;) {
    auto it = files.begin();
    std::advance(it, static_cast<long>(rng() % files.size()));
    const bool json = it->first.size() > 5 && it->first.substr(it->first.size() - 5) == ".json";
    const uint64_t op = rng() % 20;
    if (op == 0) {
      it->second = "@@REMOVE@@";
    } else if (op == 1 && files.size() > 1) {  // another file's bytes in its place
      auto other = files.begin();
      std::advance(other, static_cast<long>(rng() % files.size()));
      it->second = other->second;
    } else if (json && op < 14) {
      it->second = mutate_json(it->second, rng);
    } else {
      it->second = mutate_bytes(it->second, rng);
    }
  }
  for (const auto& [name, bytes] : files) {
    const std::string path = p.dir + "/" + name;
    if (bytes == "@@REMOVE@@")
      fs::remove(path);
    else if (bytes != slurp(path))
      spill(path, bytes);
  }
}

void restore(const Pristine& p) {
  for (const auto& [name, bytes] : p.files)
    if (!fs::exists(p.dir + "/" + name) || slurp(p.dir + "/" + name) != bytes)
      spill(p.dir + "/" + name, bytes);
}

}  // namespace

TEST(CheckpointFuzz, ReadersThrowOnlyErrorsWithBoundedMemory) {
  const uint64_t seed = env_u64("TIERZERO_FUZZ_SEED", 20240528);
  const uint64_t cases = env_u64("TIERZERO_FUZZ_CASES", 3000);
  const double seconds = static_cast<double>(env_u64("TIERZERO_FUZZ_SECONDS", 40));
  const uint64_t only = env_u64("TIERZERO_FUZZ_CASE", UINT64_MAX);
  std::printf("checkpoint fuzz: seed %llu (TIERZERO_FUZZ_SEED), up to %llu cases in %.0f s\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(cases),
              seconds);
  std::fflush(stdout);

  const std::string root = tz_test::scratch_dir("fuzz");
  std::vector<Pristine> pristine;
  pristine.push_back(load_pristine(tz_test::train_checkpoint(root + "/ref", 0)));
  // (ZeRO's store would start MPI in-process, whose own allocations are not LeakSanitizer-clean:
  // the 2-rank checkpoint below has its sharded structure.)
  pristine.push_back(
      load_pristine(tz_test::train_checkpoint(root + "/grouped", 0, 2, 0, /*blocks_per_unit=*/2)));
  pristine.push_back(load_pristine(tz_test::write_two_rank_checkpoint(root + "/two", 2)));
  for (const Pristine& p : pristine) ASSERT_NO_THROW(read_everything(p)) << p.dir;

  const auto start = std::chrono::steady_clock::now();
  size_t ran = 0, refused = 0, accepted = 0, unnamed = 0;
  std::map<std::string, size_t> kinds;  // the first words of the errors, for the summary
  for (uint64_t i = 0; i < cases; ++i) {
    if (only != UINT64_MAX && i != only) continue;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds)
      break;
    std::mt19937_64 rng(seed * 1000003 + i);
    const Pristine& p = pristine[rng() % pristine.size()];
    mutate(p, rng);
    test::set_allocation_context("checkpoint fuzz case " + std::to_string(i) + " (seed " +
                                 std::to_string(seed) +
                                 ", TIERZERO_FUZZ_CASE=" + std::to_string(i) + ")");
    ++ran;
    try {
      read_everything(p);
      ++accepted;
    } catch (const Error& e) {
      ++refused;
      const std::string what = e.what();
      if (what.find(p.dir) == std::string::npos) {
        if (unnamed++ < 5)
          std::printf("case %llu: error names no file: %s\n", static_cast<unsigned long long>(i),
                      what.c_str());
      }
      // The summary groups errors by their text, the paths and numbers left out.
      std::string kind = what.substr(0, what.find(" [at "));
      for (size_t at; (at = kind.find(p.dir)) != std::string::npos;) kind.erase(at, p.dir.size());
      std::string short_kind;
      for (char ch : kind)
        if (!std::isdigit(static_cast<unsigned char>(ch)) || short_kind.empty() ||
            short_kind.back() != '#')
          short_kind += std::isdigit(static_cast<unsigned char>(ch)) ? '#' : ch;
      ++kinds[short_kind.substr(0, 90)];
    } catch (const std::exception& e) {
      ADD_FAILURE() << "case " << i << " (seed " << seed << ", TIERZERO_FUZZ_CASE=" << i
                    << "): not a tierzero::Error: " << e.what();
    }
    restore(p);
  }
  std::printf("%zu cases: %zu refused with an Error, %zu read (harmless mutations)\n", ran, refused,
              accepted);
  std::vector<std::pair<size_t, std::string>> common;
  for (const auto& [k, n] : kinds) common.push_back({n, k});
  std::sort(common.rbegin(), common.rend());
  std::printf("%zu kinds of error; the most common:\n", common.size());
  for (size_t k = 0; k < common.size() && k < 20; ++k)
    std::printf("  %5zu  %s\n", common[k].first, common[k].second.c_str());
  EXPECT_EQ(unnamed, 0u) << "errors that do not name the checkpoint";
  if (only == UINT64_MAX) {
    EXPECT_GE(ran, 100u) << "too few cases ran to mean anything";
    EXPECT_GT(refused, ran / 2) << "most mutations must be caught";
  }
}
