// A checkpoint save directory (train --save-dir) is one run's at a time, and only its own step
// directories are ever removed:
//  - SaveDirLock: DIR/tierzero.lock holds the owner's host and pid under an flock, which the kernel
//    releases when the owner dies. A second run on the directory is refused at its start, naming
//    the lock file and the owner; a lock left by a process that is gone is taken over with a
//    warning.
//  - rotate_checkpoints: --keep-last K keeps the K most recently written checkpoints (the order
//    the manifests record), never the one just written, and removes only directories that are
//    ours: named step-<N> as we name them, with a valid manifest, complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tierzero/comm/communicator.hpp"

namespace tierzero::train {

class SaveDirLock {
 public:
  // Rank 0 creates `dir` and locks it; every rank of `group` (null on one rank) learns the
  // outcome, so all of them refuse together. An empty `dir` locks nothing. Throws Error naming the
  // lock file and the live owner's host and pid.
  SaveDirLock(const std::string& dir, int rank, comm::Communicator* group);
  ~SaveDirLock();  // clears the owner and releases the lock
  SaveDirLock(const SaveDirLock&) = delete;
  SaveDirLock& operator=(const SaveDirLock&) = delete;

 private:
  int fd_ = -1;
};

// The lock file of a save directory.
std::string save_dir_lock_path(const std::string& dir);

// Removes `dir`'s checkpoints beyond the `keep_last` most recently written (0: none removed).
// `just_written` (a step directory's name) is always kept. Returns how many it removed.
size_t rotate_checkpoints(const std::string& dir, const std::string& just_written,
                          size_t keep_last);

// At the start of a run that resumes from step `resume_step` and saves into `dir`: a warning
// naming `dir`'s checkpoints of later steps (an abandoned run's), which --keep-last rotates out
// in the order checkpoints were written and a save of the same step replaces.
void warn_abandoned_checkpoints(const std::string& dir, int64_t resume_step, size_t keep_last);

}  // namespace tierzero::train
