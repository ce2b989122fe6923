// The user's reading of an Error: its parts recomposed without the source location.
#include "tierzero/core/error_report.hpp"

#include <cstdlib>

#include "tierzero/core/log.hpp"

namespace tierzero {

std::string error_message(const Error& e, bool with_location) {
  if (with_location) return e.what();
  // where() is "file:line[, rank R][, tier T]": a user keeps the rank and tier, not the line.
  const std::string& where = e.where();
  const size_t comma = where.find(", ");
  std::string s = e.what_failed();
  if (comma != std::string::npos) s += " [" + where.substr(comma + 2) + "]";
  if (!e.hint().empty()) s += " (hint: " + e.hint() + ")";
  return s;
}

std::string user_message(const std::exception& e) {
  if (const auto* err = dynamic_cast<const Error*>(&e))
    return error_message(*err, log::level() == log::Level::debug);
  return e.what();
}

int process_rank() {
  if (error_rank() >= 0) return error_rank();
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* r = std::getenv(v)) return std::atoi(r);
  return 0;
}

}  // namespace tierzero
