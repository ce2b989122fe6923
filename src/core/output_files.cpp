// Output paths checked before a command works, and files published whole (output_files.hpp).
#include "tierzero/core/output_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tierzero/core/error.hpp"

namespace tierzero {

namespace fs = std::filesystem;

namespace {

std::string canonical_text(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? fs::path(path).lexically_normal().string() : p.string();
}

// A directory holding a manifest.json that a tierzero training checkpoint wrote.
bool is_checkpoint_dir(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json", std::ios::binary);
  if (!in) return false;
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  return head.find("tierzero-checkpoint") != std::string::npos;
}

// A checkpoint save directory's own entries: `latest` and its step-N directories.
bool is_save_dir_entry(const fs::path& path) {
  const std::string name = path.filename().string();
  std::error_code ec;
  if (!fs::is_regular_file(path.parent_path() / "latest", ec)) return false;
  return name == "latest" || name.rfind("step-", 0) == 0;
}

// The directory a new file at `path` goes into ("." for a bare name).
fs::path directory_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// Creates and removes a file in `dir`; the OS's reason when it cannot.
std::string probe_directory(const fs::path& dir) {
  const std::string probe = (dir / (".tierzero-probe-" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno_string();
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  return canonical_text(a) == canonical_text(b);
}

std::string enclosing_checkpoint(const std::string& path) {
  const fs::path full(canonical_text(path));
  if (is_save_dir_entry(full)) return full.string();
  for (fs::path p = full; !p.empty(); p = p.parent_path()) {
    if (is_checkpoint_dir(p)) return p.string();
    if (p == p.parent_path()) break;
  }
  return "";
}

void check_output_file(const std::string& flag, const std::string& path,
                       const std::vector<std::string>& inputs) {
  const std::string what = flag + " '" + path + "'";
  TZ_CHECK(!path.empty(), flag + " is empty", "give a file name");
  for (const std::string& in : inputs)
    TZ_CHECK(in.empty() || !same_file(path, in),
             what + " is also an input of this command ('" + in + "'): writing it would destroy it",
             "write the output under another name");
  const std::string ckpt = enclosing_checkpoint(path);
  TZ_CHECK(ckpt.empty(), what + " lies in the training checkpoint '" + ckpt + "'",
           "write outputs outside checkpoint directories; a checkpoint holds only its own files");
  std::error_code ec;
  TZ_CHECK(!fs::is_directory(path, ec), what + " is a directory", "give a file name");
  const fs::path dir = directory_of(path);
  TZ_CHECK(fs::is_directory(dir, ec),
           what + ": the directory '" + dir.string() + "' does not exist or is not a directory",
           "create the directory first, or write somewhere else");
  const std::string failed = probe_directory(dir);
  TZ_CHECK(failed.empty(), what + ": cannot create a file in '" + dir.string() + "': " + failed,
           "make the directory writable (and its file system read-write), or write elsewhere");
}

void check_output_dir(const std::string& flag, const std::string& dir) {
  const std::string what = flag + " '" + dir + "'";
  TZ_CHECK(!dir.empty(), flag + " is empty", "give a directory");
  std::error_code ec;
  TZ_CHECK(!fs::exists(dir, ec) || fs::is_directory(dir, ec), what + " is not a directory",
           "give a directory (it is created when missing)");
  TZ_CHECK(!is_checkpoint_dir(dir), what + " is a training checkpoint itself",
           "give the directory that holds the checkpoints, not one of them");
  const std::string ckpt = enclosing_checkpoint(dir);
  TZ_CHECK(ckpt.empty(), what + " lies in the training checkpoint '" + ckpt + "'",
           "write outside checkpoint directories");
  fs::create_directories(dir, ec);
  TZ_CHECK(!ec, "cannot create " + what + ": " + ec.message(),
           "check the path and its permissions");
  const std::string failed = probe_directory(dir);
  TZ_CHECK(failed.empty(), "cannot create a file in " + what + ": " + failed,
           "make the directory writable (and its file system read-write), or write elsewhere");
}

void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i)
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      const auto& [fa, a] = outputs[i];
      const auto& [fb, b] = outputs[j];
      TZ_CHECK(a.empty() || b.empty() || !same_file(a, b),
               fa + " '" + a + "' and " + fb + " '" + b + "' are the same file",
               "give each output its own name");
    }
}

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
