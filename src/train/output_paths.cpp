// Output paths checked before a command does any work (output_paths.hpp). Here, not in core,
// because it knows what a training checkpoint looks like.
#include "tierzero/train/output_paths.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tierzero/core/error.hpp"

namespace tierzero::train {

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

}  // namespace tierzero::train
