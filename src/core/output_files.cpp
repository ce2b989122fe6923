// Output paths checked before a command works, and files published whole (output_files.hpp).
#include "tierzero/core/output_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tierzero/core/error.hpp"

namespace tierzero {

namespace fs = std::filesystem;

namespace {

fs::path directory_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

}  // namespace

void fsync_directory(const std::string& dir) {
  const std::string d = dir.empty() ? "." : dir;
  const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TZ_CHECK(fd >= 0, "cannot open directory '" + d + "' to sync it: " + errno_string(),
           "check the directory's permissions");
  const int rc = ::fsync(fd);
  const std::string err = rc == 0 ? "" : errno_string();
  ::close(fd);
  TZ_CHECK(rc == 0, "fsync of directory '" + d + "' failed: " + err,
           "check the health of its file system");
}

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp-" + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TZ_CHECK(fd_ >= 0, "cannot create '" + tmp_ + "' (to become '" + path_ + "'): " + errno_string(),
           "check that the directory exists and is writable");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  TZ_CHECK(fd_ >= 0, "'" + path_ + "' is already committed", "internal error");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t w = ::write(fd_, p, bytes);
    if (w < 0 && errno == EINTR) continue;
    TZ_CHECK(w > 0, "writing '" + tmp_ + "' failed: " + errno_string(),
             "is the disk full? '" + path_ + "' is left as it was");
    p += w;
    bytes -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::commit() {
  TZ_CHECK(fd_ >= 0, "'" + path_ + "' is already committed", "internal error");
  const bool synced = ::fsync(fd_) == 0;
  std::string err = synced ? "" : errno_string();
  const bool closed = ::close(fd_) == 0;
  if (closed == false && err.empty()) err = errno_string();
  fd_ = -1;
  if (!synced || !closed) {
    ::unlink(tmp_.c_str());
    TZ_THROW("writing '" + tmp_ + "' failed: " + err,
             "is the disk full? '" + path_ + "' is left as it was");
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    err = errno_string();
    ::unlink(tmp_.c_str());
    TZ_THROW("cannot rename '" + tmp_ + "' to '" + path_ + "': " + err, "");
  }
  fsync_directory(directory_of(path_).string());
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFileWriter w(path);
  w.write(bytes.data(), bytes.size());
  w.commit();
}

}  // namespace tierzero
