// CRC32C against the RFC 3720 / iSCSI test vectors, and the SSE4.2, folding and ISA-L versions
// against the table version on random data of every length and alignment that matters.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "offload_test_util.hpp"
#include "tierzero/offload/crc32c.hpp"

namespace tierzero::offload {
namespace {

TEST(Crc32c, KnownVectors) {
  const char* digits = "123456789";
  std::vector<uint8_t> zeros(32, 0x00), ones(32, 0xFF), up(32), down(32);  // (32) each
  for (size_t i = 0; i < 32; ++i) {
    up[i] = static_cast<uint8_t>(i);
    down[i] = static_cast<uint8_t>(31 - i);
  }
  struct Case {
    const char* name;
    const void* data;
    size_t bytes;
    uint32_t want;
  } cases[] = {
      {"\"123456789\"", digits, 9, 0xE3069283u},   {"32 x 0x00", zeros.data(), 32, 0x8A9136AAu},
      {"32 x 0xFF", ones.data(), 32, 0x62A8AB43u}, {"0..31", up.data(), 32, 0x46DD794Eu},
      {"31..0", down.data(), 32, 0x113FDB5Cu},     {"empty", digits, 0, 0x00000000u},
  };
  std::printf("crc32c hardware (SSE4.2) available: %s\n",
              crc32c_hardware_available() ? "yes" : "no");
  for (const Case& c : cases) {
    std::printf("  %-12s want 0x%08X portable 0x%08X hardware 0x%08X dispatch 0x%08X\n", c.name,
                c.want, crc32c_portable(c.data, c.bytes), crc32c_hardware(c.data, c.bytes),
                crc32c(c.data, c.bytes));
    EXPECT_EQ(crc32c_portable(c.data, c.bytes), c.want) << c.name;
    EXPECT_EQ(crc32c(c.data, c.bytes), c.want) << c.name;
    if (crc32c_hardware_available()) {
      EXPECT_EQ(crc32c_hardware(c.data, c.bytes), c.want) << c.name;
    }
  }
}

TEST(Crc32c, PortableMatchesHardwareAndContinues) {
  const std::vector<uint8_t> data = testing::random_bytes(70000, 42);  // (70000)
  size_t compared = 0, mismatches = 0;
  for (size_t start = 0; start < 9; ++start) {
    for (size_t len : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63},
                       size_t{4096}, size_t{65537}}) {
      const uint32_t a = crc32c_portable(data.data() + start, len);
      const uint32_t b = crc32c(data.data() + start, len);
      ++compared;
      if (a != b) ++mismatches;
      // crc(a ++ b) == crc(b, crc(a)), split anywhere
      const size_t cut = len / 3;
      const uint32_t joined =
          crc32c(data.data() + start + cut, len - cut, crc32c(data.data() + start, cut));
      if (joined != b) ++mismatches;
    }
  }
  std::printf("compared %zu lengths/alignments (and as many split checksums): %zu mismatches\n",
              compared, mismatches);
  EXPECT_EQ(mismatches, 0u);
}

// The folding path against the table version: every length from 0 to 1100 (below, at and past
// the 256-byte threshold and each 64-byte step of its tail) at several alignments, long buffers,
// and continuation from a non-zero CRC.
TEST(Crc32c, FoldingMatchesPortable) {
  if (!crc32c_folding_available()) GTEST_SKIP() << "no AVX-512 VPCLMULQDQ on this CPU";
  const std::vector<uint8_t> data = testing::random_bytes(300000, 7);  // (300000)
  size_t compared = 0, mismatches = 0;
  for (size_t start : {size_t{0}, size_t{1}, size_t{3}, size_t{8}, size_t{63}}) {
    for (size_t len = 0; len <= 1100; ++len) {
      ++compared;
      if (crc32c_folding(data.data() + start, len) != crc32c_portable(data.data() + start, len))
        ++mismatches;
    }
    for (size_t len : {size_t{4096}, size_t{65536}, size_t{65537}, size_t{299000}}) {
      ++compared;
      const uint32_t want = crc32c_portable(data.data() + start, len);
      if (crc32c_folding(data.data() + start, len) != want) ++mismatches;
      const size_t cut = len / 3 + 5;
      ++compared;
      if (crc32c_folding(data.data() + start + cut, len - cut,
                         crc32c_folding(data.data() + start, cut)) != want)
        ++mismatches;
    }
  }
  std::printf("folding vs portable: %zu checksums compared, %zu mismatches\n", compared,
              mismatches);
  EXPECT_EQ(mismatches, 0u);
}

// ISA-L's crc32_iscsi (what crc32c() uses where the build has it) against the table version:
// random buffers at random offsets and lengths (0 to 70,000 bytes, and a 16 MiB one), fresh and
// continued from a random CRC, and split anywhere.
TEST(Crc32c, IsalMatchesPortable) {
  if (!crc32c_isal_available()) GTEST_SKIP() << "built without ISA-L (libisal-dev)";
  const std::vector<uint8_t> data = testing::random_bytes(size_t{16} << 20, 11);  // (16 MiB)
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&state] {  // xorshift64: reproducible lengths, offsets and seeds
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  size_t compared = 0, mismatches = 0;
  for (int i = 0; i < 3000; ++i) {
    const size_t len = i < 100 ? static_cast<size_t>(i) : next() % 70001;
    const size_t off = next() % 4096;
    const auto seed = static_cast<uint32_t>(i % 2 ? next() : 0);
    const uint32_t want = crc32c_portable(data.data() + off, len, seed);
    ++compared;
    if (crc32c_isal(data.data() + off, len, seed) != want) ++mismatches;
    const size_t cut = len ? next() % len : 0;
    ++compared;
    if (crc32c_isal(data.data() + off + cut, len - cut,
                    crc32c_isal(data.data() + off, cut, seed)) != want)
      ++mismatches;
  }
  ++compared;
  if (crc32c_isal(data.data(), data.size()) != crc32c_portable(data.data(), data.size()))
    ++mismatches;
  ++compared;
  if (crc32c(data.data(), data.size()) != crc32c_builtin(data.data(), data.size())) ++mismatches;
  std::printf("ISA-L vs portable: %zu checksums compared, %zu mismatches\n", compared, mismatches);
  EXPECT_EQ(mismatches, 0u);
}

}  // namespace
}  // namespace tierzero::offload
