// Implementation of the TZFX fixture reader (see fixture_reader.hpp and tests/reference/README.md).
// The file is read whole and decoded byte by byte as little-endian, so the reader is independent
// of the host's byte order; every size is checked against the bytes left before anything is
// allocated, so a corrupt file gives a clear error instead of a huge allocation or a crash.
#include "fixture_reader.hpp"

#include <bit>
#include <cstddef>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace tierzero::testing {
namespace {

constexpr uint32_t kMagic = 0x58465A54u;  // "TZFX" little-endian
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxNameLength = 4096;
constexpr uint32_t kMaxNdim = 16;
constexpr uint64_t kMaxElements = uint64_t{1} << 40;  // sanity bound; the file bounds it anyway

// Sequential little-endian decoder over the file's bytes that reports errors with the file name
// and the byte offset at which the problem was found.
class Cursor {
 public:
  Cursor(const std::string& path, std::vector<unsigned char> bytes)
      : path_(path), bytes_(std::move(bytes)) {}

  size_t offset() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }

  [[noreturn]] void fail(const std::string& what, size_t at) const {
    std::ostringstream msg;
    msg << "fixture '" << path_ << "': " << what << " at byte offset " << at << " (file size "
        << bytes_.size() << ")";
    throw std::runtime_error(msg.str());
  }

  void need(size_t n, const char* what) const {
    if (n > remaining()) {
      std::ostringstream msg;
      msg << "truncated: " << what << " needs " << n << " bytes but only " << remaining()
          << " remain";
      fail(msg.str(), pos_);
    }
  }

  uint32_t u32(const char* what) {
    need(4, what);
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | bytes_[pos_ + static_cast<size_t>(i)];
    pos_ += 4;
    return v;
  }

  int64_t i64(const char* what) {
    need(8, what);
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | bytes_[pos_ + static_cast<size_t>(i)];
    pos_ += 8;
    return std::bit_cast<int64_t>(v);
  }

  std::string str(size_t n, const char* what) {
    need(n, what);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  std::string path_;
  std::vector<unsigned char> bytes_;
  size_t pos_ = 0;
};

std::vector<unsigned char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("fixture '" + path + "': cannot open file");
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("fixture '" + path + "': read error");
  return bytes;
}

}  // namespace

int64_t FixtureTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Fixture Fixture::load(const std::string& path) {
  Cursor cur(path, read_all(path));

  const size_t magic_at = cur.offset();
  const uint32_t magic = cur.u32("magic");
  if (magic != kMagic) {
    std::ostringstream msg;
    msg << "bad magic 0x" << std::hex << magic << " (expected 0x" << kMagic << ", \"TZFX\")";
    cur.fail(msg.str(), magic_at);
  }
  const size_t version_at = cur.offset();
  const uint32_t version = cur.u32("version");
  if (version != kVersion) {
    cur.fail("unsupported version " + std::to_string(version) + " (expected " +
                 std::to_string(kVersion) + ")",
             version_at);
  }
  const uint32_t count = cur.u32("entry count");

  Fixture fx;
  fx.path_ = path;
  for (uint32_t e = 0; e < count; ++e) {
    const size_t entry_at = cur.offset();
    const std::string entry = "entry " + std::to_string(e);
    const uint32_t name_len = cur.u32("entry name length");
    if (name_len == 0 || name_len > kMaxNameLength) {
      cur.fail(entry + ": invalid name length " + std::to_string(name_len), entry_at);
    }
    FixtureTensor t;
    t.name = cur.str(name_len, "entry name");
    const std::string where = entry + " '" + t.name + "'";

    const size_t dtype_at = cur.offset();
    const uint32_t dtype = cur.u32("entry dtype");
    if (dtype != static_cast<uint32_t>(FixtureDType::kF32) &&
        dtype != static_cast<uint32_t>(FixtureDType::kI32)) {
      cur.fail(where + ": unknown dtype " + std::to_string(dtype), dtype_at);
    }
    t.dtype = static_cast<FixtureDType>(dtype);

    const size_t ndim_at = cur.offset();
    const uint32_t ndim = cur.u32("entry ndim");
    if (ndim > kMaxNdim) cur.fail(where + ": ndim " + std::to_string(ndim) + " too large", ndim_at);

    // Element count, bounded before each multiplication so that a corrupt dimension cannot
    // overflow; the data size is then checked against the bytes left before any allocation.
    uint64_t numel = 1;
    t.shape.reserve(ndim);
    for (uint32_t d = 0; d < ndim; ++d) {
      const size_t dim_at = cur.offset();
      const int64_t dim = cur.i64("entry dims");
      if (dim < 0) cur.fail(where + ": negative dimension " + std::to_string(dim), dim_at);
      const auto udim = static_cast<uint64_t>(dim);
      if (udim != 0 && numel > kMaxElements / udim) {
        cur.fail(
            where + ": implausibly large shape (corrupt dimension " + std::to_string(dim) + "?)",
            dim_at);
      }
      numel *= udim;
      t.shape.push_back(dim);
    }

    const std::string data_what = where + " data";
    cur.need(static_cast<size_t>(numel) * 4, data_what.c_str());
    const std::string raw = cur.str(static_cast<size_t>(numel) * 4, "entry data");
    auto word = [&raw](size_t i) {
      uint32_t v = 0;
      for (int b = 3; b >= 0; --b) {
        v = (v << 8) | static_cast<unsigned char>(raw[4 * i + static_cast<size_t>(b)]);
      }
      return v;
    };
    if (t.dtype == FixtureDType::kF32) {
      t.f32.resize(static_cast<size_t>(numel));
      for (size_t i = 0; i < t.f32.size(); ++i) t.f32[i] = std::bit_cast<float>(word(i));
    } else {
      t.i32.resize(static_cast<size_t>(numel));
      for (size_t i = 0; i < t.i32.size(); ++i) t.i32[i] = std::bit_cast<int32_t>(word(i));
    }

    if (fx.entries_.count(t.name) != 0) cur.fail("duplicate " + where, entry_at);
    fx.order_.push_back(t.name);
    fx.entries_.emplace(t.name, std::move(t));
  }
  if (cur.remaining() != 0) {
    cur.fail(std::to_string(cur.remaining()) + " trailing bytes after the last of " +
                 std::to_string(count) + " entries",
             cur.offset());
  }
  return fx;
}

const FixtureTensor& Fixture::get(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    throw std::runtime_error("fixture '" + path_ + "': no entry named '" + name + "'");
  }
  return it->second;
}

}  // namespace tierzero::testing
