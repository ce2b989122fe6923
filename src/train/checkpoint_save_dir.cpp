// A save directory's lock and the rotation of its step directories (checkpoint_save_dir.hpp).
#include "tierzero/train/checkpoint_save_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/train/checkpoint_contents.hpp"

namespace tierzero::train {

namespace fs = std::filesystem;

namespace {

struct Owner {
  std::string host;
  long pid = 0;
  bool known() const { return !host.empty() && pid > 0; }
  std::string str() const { return "pid " + std::to_string(pid) + " on host " + host; }
};

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

bool alive(long pid) {
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

// The "host=...\npid=...\n" a lock file holds (unknown when it holds anything else).
Owner read_owner(int fd) {
  char buf[512] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  Owner o;
  if (n <= 0) return o;
  const std::string text(buf, static_cast<size_t>(n));
  const size_t h = text.find("host="), p = text.find("\npid=");
  if (h != 0 || p == std::string::npos) return o;
  o.host = text.substr(5, p - 5);
  char* end = nullptr;
  o.pid = std::strtol(text.c_str() + p + 5, &end, 10);
  if (end == nullptr || *end != '\n') o.pid = 0;
  return o;
}

// Rank 0's side: the locked file's descriptor. Throws Error when another run holds it.
int acquire(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TZ_CHECK(!ec, "cannot create the checkpoint directory '" + dir + "': " + ec.message(),
           "give --save-dir a writable path");
  const std::string path = save_dir_lock_path(dir);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TZ_CHECK(fd >= 0, "cannot open the lock file '" + path + "': " + std::strerror(errno),
           "check that the checkpoint directory is writable");
  const int rc = ::flock(fd, LOCK_EX | LOCK_NB);
  const int err = errno;
  const Owner prev = read_owner(fd);
  const std::string host = this_host();
  const std::string in_use =
      "save directory '" + dir + "' is in use by another run: its lock file '" + path +
      "' is held by " + (prev.known() ? prev.str() : std::string("an unknown process"));
  if (rc != 0 && err == EWOULDBLOCK) {
    ::close(fd);
    TZ_THROW(in_use, "wait for that run to end, or give this one another --save-dir");
  }
  if (rc != 0) {  // the file system has no locks: trust the owner it names while it may live
    const bool live = prev.known() && (prev.host != host || alive(prev.pid));
    if (live) {
      ::close(fd);
      TZ_THROW(in_use + " (this file system cannot lock files: " + std::strerror(err) + ")",
               "if that run is gone, remove the lock file; else give another --save-dir");
    }
    log::warn("cannot lock '" + path + "' (" + std::strerror(err) +
              "): two runs saving here at once would not be stopped");
  } else if (prev.known()) {
    log::warn("taking over the stale lock file '" + path + "' of " + prev.str() +
              (prev.host == host && !alive(prev.pid) ? " (no longer running)"
                                                     : " (it no longer holds the lock)"));
  }
  const std::string me = "host=" + host + "\npid=" + std::to_string(::getpid()) + "\n";
  const bool wrote = ::ftruncate(fd, 0) == 0 &&
                     ::pwrite(fd, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size());
  if (!wrote) log::warn("cannot write the owner into '" + path + "': " + std::strerror(errno));
  return fd;
}

// Rank 0's outcome (empty: locked) to every rank, as bytes carried in fp32 words.
void share(std::string& message, comm::Communicator& group) {
  std::vector<float> words(1024, 0.0f);  // (4096 bytes): length, then the text
  uint32_t n = static_cast<uint32_t>(std::min<size_t>(message.size(), 4000));
  std::memcpy(words.data(), &n, sizeof n);
  std::memcpy(words.data() + 1, message.data(), n);
  group.broadcast(words.data(), words.size(), DType::f32, 0);
  std::memcpy(&n, words.data(), sizeof n);
  message.assign(reinterpret_cast<const char*>(words.data() + 1), std::min<uint32_t>(n, 4000));
}

struct Saved {
  std::string name;
  int64_t step = 0;
  int64_t written_ns = 0;  // the manifest's saved_at_ns, else its file's modification time
};

// `dir`'s checkpoints that are ours and complete, oldest written first; `others` gets the step
// directories that are not (left alone), each with why.
std::vector<Saved> our_checkpoints(const std::string& dir, std::vector<std::string>* others) {
  std::vector<Saved> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const int64_t step = checkpoint_step_of(name);
    if (step < 0 || !fs::is_directory(e.symlink_status())) continue;
    try {
      const CheckpointContents c = open_checkpoint(e.path().string());
      int64_t ns = c.manifest.saved_at_ns;
      if (ns < 0)
        ns = fs::last_write_time(c.manifest.path).time_since_epoch().count();  // old manifests
      out.push_back({name, step, ns});
    } catch (const Error& err) {
      if (others) others->push_back("'" + e.path().string() + "' alone: " + err.what_failed());
    }
  }
  std::sort(out.begin(), out.end(), [](const Saved& a, const Saved& b) {
    return a.written_ns != b.written_ns ? a.written_ns < b.written_ns : a.step < b.step;
  });
  return out;
}

}  // namespace

std::string save_dir_lock_path(const std::string& dir) {
  return dir + "/tierzero.lock";
}

SaveDirLock::SaveDirLock(const std::string& dir, int rank, comm::Communicator* group) {
  if (dir.empty()) return;
  std::string refused;
  if (rank == 0) {
    try {
      fd_ = acquire(dir);
    } catch (const Error& e) {
      if (!group || group->size() == 1) throw;
      refused = e.what_failed() + "\n" + e.hint();
    }
  }
  if (group && group->size() > 1) share(refused, *group);
  if (refused.empty()) return;
  const size_t nl = refused.find('\n');
  TZ_THROW(refused.substr(0, nl), nl == std::string::npos ? "" : refused.substr(nl + 1));
}

SaveDirLock::~SaveDirLock() {
  if (fd_ < 0) return;
  // The next run finds no owner; the lock itself goes with the descriptor.
  if (::ftruncate(fd_, 0) != 0)
    log::warn("cannot clear the lock file's owner: " + std::string(std::strerror(errno)));
  ::close(fd_);
}

size_t rotate_checkpoints(const std::string& dir, const std::string& just_written,
                          size_t keep_last) {
  if (keep_last == 0) return 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {  // a removal a crash interrupted
    const std::string name = e.path().filename().string();
    const size_t dot = name.rfind(".removing");
    if (dot != std::string::npos && dot + 9 == name.size() &&
        checkpoint_step_of(name.substr(0, dot)) >= 0)
      fs::remove_all(e.path(), ec);
  }
  std::vector<std::string> others;
  std::vector<Saved> saved = our_checkpoints(dir, &others);
  static std::set<std::string> warned;  // each foreign directory once
  for (const std::string& o : others)
    if (warned.insert(o).second) log::warn("checkpoint rotation leaves " + o);
  saved.erase(std::remove_if(saved.begin(), saved.end(),
                             [&](const Saved& s) { return s.name == just_written; }),
              saved.end());
  size_t removed = 0;
  for (size_t i = 0; i + (keep_last - 1) < saved.size(); ++i) {
    const fs::path from = fs::path(dir) / saved[i].name;
    const fs::path gone = fs::path(dir) / (saved[i].name + ".removing");
    fs::rename(from, gone, ec);
    if (!ec) fs::remove_all(gone, ec);
    if (ec) {
      log::warn("cannot remove the old checkpoint '" + from.string() + "': " + ec.message());
      continue;
    }
    ++removed;
  }
  return removed;
}

void warn_abandoned_checkpoints(const std::string& dir, int64_t resume_step, size_t keep_last) {
  std::string later;
  for (const Saved& s : our_checkpoints(dir, nullptr))
    if (s.step > resume_step) later += (later.empty() ? "" : ", ") + s.name;
  if (later.empty()) return;
  log::warn("'" + dir + "' holds checkpoints of steps after " + std::to_string(resume_step) +
            ", where this run starts: " + later + " (an earlier run's). " +
            (keep_last > 0 ? "--keep-last " + std::to_string(keep_last) +
                                 " rotates checkpoints out in the order they were written, "
                                 "so these go first"
                           : std::string("They stay (no --keep-last)")) +
            "; a save of the same step replaces one");
}

}  // namespace tierzero::train
