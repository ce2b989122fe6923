// Opening the files a user names as input (configs, data shards, model files, profiles).
// A path that is not a regular file (a FIFO, a directory, a device) is refused with an Error
// before anything reads it: a FIFO opened for reading blocks until a writer appears, so an input
// named by mistake would hang the run instead of failing. Files are opened with O_NONBLOCK and
// checked with fstat, so even a path swapped for a FIFO after a stat never blocks.
#pragma once

#include <cstddef>
#include <string>

namespace tierzero {

// Throws Error unless `path` names a regular file (symlinks followed). `what` says what the
// file is for ("config file", "data shard"), `hint` what to do about it.
void require_regular_file(const std::string& path, const std::string& what,
                          const std::string& hint);

// Opens a regular file for reading (O_RDONLY | O_CLOEXEC, never blocking on a FIFO) and returns
// its descriptor; *size_out (if given) receives its size in bytes. Error naming `what` and the
// path when it cannot be opened or is not a regular file.
int open_input_file(const std::string& path, const std::string& what, const std::string& hint,
                    size_t* size_out = nullptr);

// The whole content of a regular file of at most `max_bytes` (Error when larger: a text input
// of gigabytes is a mistake, not a config).
std::string read_input_file(const std::string& path, const std::string& what,
                            const std::string& hint, size_t max_bytes);

}  // namespace tierzero
