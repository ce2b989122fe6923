// TZ_MPI_CHECK: every MPI call in TierZero goes through it, so a failure becomes a
// tierzero::Error naming the operation and group, the call, file:line and MPI's own error
// string. Communicators use MPI_ERRORS_RETURN so that errors reach this check at all.
#pragma once

#include <mpi.h>

#include <string>

#include "tierzero/core/error.hpp"

namespace tierzero::comm::mpi_detail {

inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];  // (MPI_MAX_ERROR_STRING) chars
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length)) + " (MPI error code " +
         std::to_string(code) + ")";
}

}  // namespace tierzero::comm::mpi_detail

// `context` says what was being done, e.g. "all_gather of 1024 x f32 on group dp (ranks 0-3)".
#define TZ_MPI_CHECK(expr, context)                                                       \
  do {                                                                                    \
    const int tz_mpi_status_ = (expr);                                                    \
    if (tz_mpi_status_ != MPI_SUCCESS) {                                                  \
      TZ_THROW(std::string(context) + ": MPI call `" #expr "` failed: " +                 \
                   ::tierzero::comm::mpi_detail::mpi_error_string(tz_mpi_status_),        \
               "a peer rank may have died, or MPI ran out of resources; check the other " \
               "ranks' output and the launcher's message");                               \
    }                                                                                     \
  } while (0)
