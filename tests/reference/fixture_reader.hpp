// Reader for TierZero's golden test fixtures ("TZFX" files written by
// tests/reference/make_gpt2_fixture.py; format in tests/reference/README.md). Tests load a fixture
// once and look tensors up by name to compare TierZero's forward/backward/AdamW against PyTorch.
// Standard library only, so that the test helper adds no dependency to the build.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tierzero::testing {

enum class FixtureDType : uint32_t { kF32 = 0, kI32 = 1 };

// One named tensor from a fixture. The elements (row-major, numel() of them) are in f32 for a
// float32 entry or in i32 for an int32 entry; the other vector is empty.
struct FixtureTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> f32;
  std::vector<int32_t> i32;
  FixtureDType dtype = FixtureDType::kF32;

  // Product of shape (1 for a 0-d tensor).
  int64_t numel() const;
};

class Fixture {
 public:
  // Reads and validates the whole file. Throws std::runtime_error naming the file and the byte
  // offset for a missing/unreadable file, bad magic or version, truncation, an unknown dtype,
  // negative or oversized dimensions, a duplicate entry name or trailing bytes.
  static Fixture load(const std::string& path);

  // The entry called name; throws std::runtime_error naming the entry and the file if absent.
  const FixtureTensor& get(const std::string& name) const;
  bool has(const std::string& name) const { return entries_.count(name) != 0; }

  // Entry names in file order.
  const std::vector<std::string>& names() const { return order_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> order_;
  std::map<std::string, FixtureTensor> entries_;
};

}  // namespace tierzero::testing
