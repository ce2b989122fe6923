// Swap directories left behind by a run that died without cleaning up (SIGKILL, OOM killer, a
// node reset). Each live engine holds an exclusive flock on its swap file for its whole life; the
// kernel drops it when the process dies. So a swap file whose lock can be taken belongs to nobody,
// and a new engine removes it (and its directory) before creating its own, instead of letting
// dead runs fill the drive. Files of live runs (other ranks on this node, other jobs) stay locked
// and are left alone, as is anything not owned by this user.
#pragma once

#include <string>

namespace tierzero::offload::detail {

// Takes the engine's lock on its swap file (fd open on `path`). Where the file system has no
// flock (ENOLCK, EOPNOTSUPP, ENOSYS ...) it logs a warning and returns false: the engine works,
// only its swap is not marked live (and cleanup skips unlockable files, so it is never removed by
// another run). An Error only if another process already holds the lock.
bool lock_swap_file(int fd, const std::string& path);

// True where a flock taken anywhere that can reach `dir` is visible here: local file systems
// (ext2/3/4, XFS, Btrfs, tmpfs, F2FS, ZFS, bcachefs, overlayfs). Network and cluster file systems
// (NFS mounted nolock or local_lock=flock, Lustre with localflock, SMB, GPFS, FUSE ...) may show a
// live run on another node as unlocked, so cleanup never runs there. `fs` gets the type's
// name or hex magic for the log.
bool locks_are_node_wide(const std::string& dir, std::string* fs);

// Removes `<dir>/tierzero-swap-*/swap.bin` files nobody holds locked, and their directories,
// when the file is at least `min_age_s` old (so a swap file another engine has just created and
// not yet locked is never taken for stale). Does nothing unless locks_are_node_wide(dir). Logs a
// warning per directory removed; returns how many were removed. Never throws: cleanup problems
// are only logged.
size_t remove_stale_swap_dirs(const std::string& dir, double min_age_s);

}  // namespace tierzero::offload::detail
