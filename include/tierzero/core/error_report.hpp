// How an error reads to a user: the message without the source location (kept for --log-level
// debug), and the mark of an error that every rank of a job raises alike, so that the CLI says it
// once (rank 0) and every rank exits non-zero without aborting the job.
#pragma once

#include <exception>
#include <string>

#include "tierzero/core/error.hpp"

namespace tierzero {

// This process's rank: the one MPI gave it, else the launcher's (before MPI started), else 0.
int process_rank();

// Raised on every rank of a job together: the same check on the same values (the configuration
// against the parallel layout), or a failure the ranks agreed on collectively (their settings
// differ, an output cannot be written). No rank is left inside a collective, so each unwinds and
// exits normally instead of aborting the job, and only the rank that reports() prints it, so the
// job shows it once.
class SameOnEveryRankError : public Error {
 public:
  // Reported by the launcher's rank 0 (process_rank()).
  explicit SameOnEveryRankError(const Error& e) : SameOnEveryRankError(e, process_rank() == 0) {}
  SameOnEveryRankError(const Error& e, bool reports) : Error(e), reports_(reports) {}
  bool reports() const { return reports_; }

 private:
  bool reports_;
};

// What failed, the rank and tier when known, and the hint; the source location (file:line) only
// when `with_location`.
std::string error_message(const Error& e, bool with_location);

// What the CLI prints for an exception: error_message, with the location only while the log
// level is debug; what() for any other exception.
std::string user_message(const std::exception& e);

int error_rank();  // the rank set_error_rank gave; -1 until then

}  // namespace tierzero
