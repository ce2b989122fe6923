// How an error reads to a user: the message without the source location (kept for --log-level
// debug), and the mark of an error that every rank of a job raises alike, so that the CLI says it
// once (rank 0) and every rank exits non-zero without aborting the job.
#pragma once

#include <exception>
#include <string>

#include "tierzero/core/error.hpp"

namespace tierzero {

// Raised on every rank alike: a check of the configuration against the parallel layout, made on
// the same values everywhere before any collective.
class SameOnEveryRankError : public Error {
 public:
  explicit SameOnEveryRankError(const Error& e) : Error(e) {}
};

// What failed, the rank and tier when known, and the hint; the source location (file:line) only
// when `with_location`.
std::string error_message(const Error& e, bool with_location);

// What the CLI prints for an exception: error_message, with the location only while the log
// level is debug; what() for any other exception.
std::string user_message(const std::exception& e);

int error_rank();  // the rank set_error_rank gave; -1 until then

}  // namespace tierzero
