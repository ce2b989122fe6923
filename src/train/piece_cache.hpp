// The encoder's cache of merged pre-tokens: open addressing over a fast 64-bit hash of the bytes,
// keys and ids in two arenas, so a hit costs one hash and one memcmp and a miss no allocation
// (std::unordered_map<std::string, ...> was the encoder's hottest function). When half full it
// starts over: memory stays bounded on any input, and real text's frequent pre-tokens return.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace tierzero::train {

inline uint64_t hash_bytes(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  std::memcpy(&w, p + i, n - i);
  h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 29);
}

class PieceCache {
 public:
  explicit PieceCache(size_t slots_log2 = 19) : slots_(size_t{1} << slots_log2) {
    mask_ = slots_.size() - 1;
  }

  // The cached ids of `key` (hash `h`): a pointer and *count, or nullptr.
  const uint32_t* find(std::string_view key, uint64_t h, size_t* count) const {
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key_len == 0) return nullptr;
      if (s.hash == h && s.key_len == key.size() &&
          std::memcmp(keys_.data() + s.key_off, key.data(), key.size()) == 0) {
        *count = s.ids_len;
        return ids_.data() + s.ids_off;
      }
    }
  }

  void insert(std::string_view key, uint64_t h, const uint32_t* ids, size_t count) {
    if (used_ * 2 >= slots_.size()) clear();
    size_t i = h & mask_;
    while (slots_[i].key_len != 0) i = (i + 1) & mask_;
    slots_[i] = {h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(key.size()),
                 static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(count)};
    keys_.append(key);
    ids_.insert(ids_.end(), ids, ids + count);
    ++used_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0, key_len = 0;  // key_len 0: empty (keys are never empty)
    uint32_t ids_off = 0, ids_len = 0;
  };
  void clear() {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    ids_.clear();
    used_ = 0;
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0, used_ = 0;
  std::string keys_;           // the cached pre-tokens' bytes
  std::vector<uint32_t> ids_;  // their ids
};

}  // namespace tierzero::train
