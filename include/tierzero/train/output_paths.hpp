// Output paths that never destroy what a command reads: check_output_file / check_output_dir run
// before a command does any work and refuse an output that is one of the command's inputs (the
// same file by device and inode, or by path when it does not exist yet), that lies inside a
// training checkpoint, or whose directory cannot take a new file; the error names the flag and
// the path. (Writing the file atomically is core's output_files.hpp.)
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tierzero::train {

// True when both paths name the same existing file (st_dev and st_ino), or, when either does not
// exist, the same weakly canonical path.
bool same_file(const std::string& a, const std::string& b);

// The training checkpoint directory (one holding a tierzero manifest.json) that `path` is, or
// lies inside, or that `path` would replace in a checkpoint save directory (its `latest` file or
// a step-N directory); empty when none.
std::string enclosing_checkpoint(const std::string& path);

// Throws Error naming `flag` and `path` when `path` cannot be written as a new file: it is one of
// `inputs` (paths the command reads), an existing directory, inside a checkpoint, or its
// directory is missing or refuses a new file (tested by creating and removing a probe file,
// which also catches read-only file systems and full inode tables).
void check_output_file(const std::string& flag, const std::string& path,
                       const std::vector<std::string>& inputs);

// The same for an output directory (created when missing, as the command would): it must not be
// a file, nor a checkpoint or inside one, and must take a new file.
void check_output_dir(const std::string& flag, const std::string& dir);

// Throws Error when two outputs (flag, path) name the same file.
void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs);

}  // namespace tierzero::train
