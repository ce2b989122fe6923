// Output files that never leave half a file behind: write_file_atomic and AtomicFileWriter write
// to a temporary name in the same directory, fsync it, rename it over the target and fsync the
// directory, so a failure (or a crash) leaves the old file or the new one, never a torn one.
// (Which paths a command may write at all is train's output_paths.hpp.)
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tierzero {

// `bytes` written to `path` durably and atomically (see the file comment).
void write_file_atomic(const std::string& path, std::string_view bytes);

// A file written in pieces and published whole by commit(); destroyed uncommitted, it removes its
// temporary and leaves `path` as it was.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);  // appends
  void commit();                               // fsync, rename over path, fsync the directory
  const std::string& temporary() const { return tmp_; }

 private:
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
};

// fsync of a directory (after a rename in it); throws Error on failure.
void fsync_directory(const std::string& dir);

}  // namespace tierzero
