// Opening user-named input files without ever blocking on a FIFO, refusing what is not a file.
#include "tierzero/core/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "tierzero/core/error.hpp"

namespace tierzero {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

[[noreturn]] void refuse(const std::string& path, const std::string& what, mode_t mode,
                         const std::string& hint) {
  TZ_THROW(what + " '" + path + "' is " + kind_of(mode) + ", not a regular file",
           hint.empty() ? "give the path of a regular file" : hint);
}

}  // namespace

void require_regular_file(const std::string& path, const std::string& what,
                          const std::string& hint) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    TZ_THROW("cannot open " + what + " '" + path + "': " + errno_string(),
             hint.empty() ? "check the path" : hint);
  if (!S_ISREG(st.st_mode)) refuse(path, what, st.st_mode, hint);
}

namespace {

// open_input_file, saying `verb` ("open", "read") when the path cannot be opened.
int open_regular(const std::string& path, const std::string& what, const std::string& hint,
                 size_t* size_out, const char* verb) {
  // O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer.
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0)
    TZ_THROW(std::string("cannot ") + verb + " " + what + " '" + path + "': " + errno_string(),
             hint.empty() ? "check the path" : hint);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string e = errno_string();
    ::close(fd);
    TZ_THROW("cannot stat " + what + " '" + path + "': " + e, hint);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    refuse(path, what, st.st_mode, hint);
  }
  // Regular files ignore O_NONBLOCK, but clear it so later reads behave as usual everywhere.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags == -1 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == -1) {
    const std::string e = errno_string();
    ::close(fd);
    TZ_THROW("cannot set up reading of " + what + " '" + path + "': " + e, hint);
  }
  if (size_out) *size_out = static_cast<size_t>(st.st_size);
  return fd;
}

}  // namespace

int open_input_file(const std::string& path, const std::string& what, const std::string& hint,
                    size_t* size_out) {
  return open_regular(path, what, hint, size_out, "open");
}

std::string read_input_file(const std::string& path, const std::string& what,
                            const std::string& hint, size_t max_bytes) {
  size_t size = 0;
  const int fd = open_regular(path, what, hint, &size, "read");
  if (size > max_bytes) {
    ::close(fd);
    TZ_THROW(what + " '" + path + "' is " + std::to_string(size) + " bytes, more than the " +
                 std::to_string(max_bytes) + " such a file may hold",
             hint.empty() ? "check the path" : hint);
  }
  std::string text(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, text.data() + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string e = n < 0 ? errno_string() : "it ended early (changed while read?)";
      ::close(fd);
      TZ_THROW("cannot read " + what + " '" + path + "': " + e, hint);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return text;
}

}  // namespace tierzero
