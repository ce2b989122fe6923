// Error composition and the location string shared by all check macros.
#include "tierzero/core/error.hpp"

#include "tierzero/core/error_report.hpp"

#include <cerrno>
#include <cstring>

namespace tierzero {

namespace {
int g_error_rank = -1;
}

Error::Error(std::string what, std::string where, std::string hint)
    : std::runtime_error(compose(what, where, hint)),
      what_(std::move(what)),
      where_(std::move(where)),
      hint_(std::move(hint)) {}

std::string Error::compose(const std::string& what, const std::string& where,
                           const std::string& hint) {
  std::string s = what;
  if (!where.empty()) s += " [at " + where + "]";
  if (!hint.empty()) s += " (hint: " + hint + ")";
  return s;
}

void set_error_rank(int rank) {
  g_error_rank = rank;
}

int error_rank() {
  return g_error_rank;
}

std::string error_location(const char* file, int line, const char* tier) {
  const char* base = std::strrchr(file, '/');
  std::string s = std::string(base ? base + 1 : file) + ":" + std::to_string(line);
  if (g_error_rank >= 0) s += ", rank " + std::to_string(g_error_rank);
  if (tier) s += ", tier " + std::string(tier);
  return s;
}

std::string errno_string() {
  int e = errno;
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

}  // namespace tierzero
