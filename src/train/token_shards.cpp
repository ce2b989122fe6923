// Reading and writing llm.c token shard files.
#include "tierzero/train/token_shards.hpp"

#include <fcntl.h>
#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "tierzero/core/error.hpp"
#include "tierzero/core/input_file.hpp"

namespace tierzero::train {

namespace {

constexpr size_t kHeaderBytes = kShardHeaderInts * sizeof(int32_t);

void pread_all(int fd, void* buf, size_t bytes, off_t offset, const std::string& path) {
  auto* p = static_cast<char*>(buf);
  while (bytes > 0) {
    ssize_t r = ::pread(fd, p, bytes, offset);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) TZ_THROW("cannot read '" + path + "': " + errno_string(), "check the file");
    if (r == 0)
      TZ_THROW("unexpected end of '" + path + "' at byte " + std::to_string(offset),
               "the file was truncated; regenerate it with tierzero prepare-data");
    p += r;
    bytes -= static_cast<size_t>(r);
    offset += r;
  }
}

class FileShard final : public TokenShard {
 public:
  explicit FileShard(std::string path) : path_(std::move(path)) {
    size_t file_bytes = 0;
    fd_ = open_input_file(path_, "data shard", "check the path given as train_data / --data",
                          &file_bytes);
    try {
      validate(file_bytes);
    } catch (...) {
      ::close(fd_);
      throw;
    }
  }
  ~FileShard() override { ::close(fd_); }
  FileShard(const FileShard&) = delete;
  FileShard& operator=(const FileShard&) = delete;

  const std::string& name() const override { return path_; }
  size_t size() const override { return tokens_; }
  void read(size_t pos, size_t count, uint32_t* out) const override {
    TZ_CHECK(pos <= tokens_ && count <= tokens_ - pos,
             "read past the end of shard '" + path_ + "' (tokens [" + std::to_string(pos) + ", +" +
                 std::to_string(count) + ") of " + std::to_string(tokens_) + ")",
             "");
    const auto offset = static_cast<off_t>(kHeaderBytes + pos * token_bytes_);
    if (token_bytes_ == sizeof(uint32_t)) return pread_all(fd_, out, count * 4, offset, path_);
    // 16-bit tokens: read into the second half of `out`, widen from the front (each uint32
    // written lies at or before the uint16s still to be read).
    auto* narrow = reinterpret_cast<uint16_t*>(out + count) - count;
    pread_all(fd_, narrow, count * sizeof(uint16_t), offset, path_);
    for (size_t i = 0; i < count; ++i) {
      uint16_t v;
      std::memcpy(&v, narrow + i, sizeof v);
      out[i] = v;
    }
  }

 private:
  // The header against the file's size before anything is sized from it (the token count is
  // an int32, so its byte count cannot overflow, but it must be what the file holds).
  void validate(size_t file_bytes) {
    if (file_bytes < kHeaderBytes)
      TZ_THROW("data shard '" + path_ + "' is truncated: " + std::to_string(file_bytes) +
                   " bytes, shorter than the 1024-byte header",
               "regenerate it with tierzero prepare-data");
    int32_t header[kShardHeaderInts];
    pread_all(fd_, header, kHeaderBytes, 0, path_);
    if (header[0] != kShardMagic && header[0] != kShard32Magic)
      TZ_THROW("data shard '" + path_ + "' has bad magic " + std::to_string(header[0]) +
                   " (expected " + std::to_string(kShardMagic) + " for uint16 tokens or " +
                   std::to_string(kShard32Magic) + " for uint32 tokens)",
               "this is not an llm.c token shard (a checkpoint, or raw text?)");
    const bool wide = header[0] == kShard32Magic;
    const int32_t version = wide ? kShard32Version : kShardVersion;
    if (header[1] != version)
      TZ_THROW("data shard '" + path_ + "' has version " + std::to_string(header[1]) +
                   "; with magic " + std::to_string(header[0]) + " only version " +
                   std::to_string(version) + (wide ? " (uint32" : " (uint16") +
                   " tokens) is supported",
               "regenerate it with tierzero prepare-data");
    token_bytes_ = wide ? sizeof(uint32_t) : sizeof(uint16_t);
    if (header[2] < 0)
      TZ_THROW("data shard '" + path_ + "' declares a negative token count (" +
                   std::to_string(header[2]) + ") in header field 2",
               "the header is corrupt; regenerate it with tierzero prepare-data");
    tokens_ = static_cast<size_t>(header[2]);
    const size_t expected = kHeaderBytes + tokens_ * token_bytes_;
    if (file_bytes != expected)
      TZ_THROW("data shard '" + path_ + "' is " +
                   (file_bytes < expected ? "truncated" : "too long") + ": header says " +
                   std::to_string(tokens_) + " tokens (" + std::to_string(expected) +
                   " bytes) but the file has " + std::to_string(file_bytes) + " bytes",
               "regenerate it with tierzero prepare-data");
  }

  std::string path_;
  int fd_ = -1;
  size_t tokens_ = 0;
  size_t token_bytes_ = sizeof(uint16_t);
};

class MemoryShard final : public TokenShard {
 public:
  MemoryShard(std::string name, std::vector<uint16_t> tokens)
      : name_(std::move(name)), tokens_(std::move(tokens)) {}
  const std::string& name() const override { return name_; }
  size_t size() const override { return tokens_.size(); }
  void read(size_t pos, size_t count, uint32_t* out) const override {
    TZ_CHECK(pos <= tokens_.size() && count <= tokens_.size() - pos,
             "read past the end of " + name_, "");
    std::copy(tokens_.begin() + static_cast<ptrdiff_t>(pos),
              tokens_.begin() + static_cast<ptrdiff_t>(pos + count), out);
  }

 private:
  std::string name_;
  std::vector<uint16_t> tokens_;
};

}  // namespace

std::unique_ptr<TokenShard> open_token_shard(const std::string& path) {
  return std::make_unique<FileShard>(path);
}

std::vector<std::string> token_shard_paths(const std::string& pattern) {
  glob_t g{};
  int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::vector<std::unique_ptr<TokenShard>> open_token_shards(const std::string& pattern) {
  const std::vector<std::string> paths = token_shard_paths(pattern);
  if (paths.empty())
    TZ_THROW("no data file matches '" + pattern + "'",
             "check the path; make shards with: tierzero prepare-data input.txt -o DIR");
  std::vector<std::unique_ptr<TokenShard>> shards;
  for (const auto& p : paths) shards.push_back(open_token_shard(p));
  return shards;
}

std::unique_ptr<TokenShard> make_memory_shard(std::string name, std::vector<uint16_t> tokens) {
  return std::make_unique<MemoryShard>(std::move(name), std::move(tokens));
}

namespace {

void write_shard_file(const std::string& path, const void* tokens, size_t count,
                      size_t token_bytes) {
  TZ_CHECK(count <= static_cast<size_t>(INT32_MAX),
           "shard '" + path + "' would hold " + std::to_string(count) + " tokens",
           "the llm.c header stores the count as int32; use smaller shards");
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) TZ_THROW("cannot create '" + tmp + "': " + errno_string(), "check the directory");
  int32_t header[kShardHeaderInts] = {};
  const bool wide = token_bytes == sizeof(uint32_t);
  header[0] = wide ? kShard32Magic : kShardMagic;
  header[1] = wide ? kShard32Version : kShardVersion;
  header[2] = static_cast<int32_t>(count);
  auto write_all = [&](const void* buf, size_t bytes) {
    auto* p = static_cast<const char*>(buf);
    while (bytes > 0) {
      ssize_t w = ::write(fd, p, bytes);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        std::string err = errno_string();
        ::close(fd);
        ::unlink(tmp.c_str());
        TZ_THROW("cannot write '" + tmp + "': " + err, "is the disk full?");
      }
      p += w;
      bytes -= static_cast<size_t>(w);
    }
  };
  write_all(header, sizeof header);
  write_all(tokens, count * token_bytes);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    std::string err = errno_string();
    ::unlink(tmp.c_str());
    TZ_THROW("cannot finish '" + tmp + "': " + err, "is the disk full?");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = errno_string();
    ::unlink(tmp.c_str());
    TZ_THROW("cannot rename '" + tmp + "' to '" + path + "': " + err, "");
  }
}

}  // namespace

void write_token_shard(const std::string& path, const uint16_t* tokens, size_t count) {
  write_shard_file(path, tokens, count, sizeof(uint16_t));
}

void write_token_shard(const std::string& path, const uint32_t* tokens, size_t count) {
  write_shard_file(path, tokens, count, sizeof(uint32_t));
}

}  // namespace tierzero::train
