// tierzero::Error and the check macros every layer uses.
// An Error carries what failed, where (file:line, rank, tier) and a hint, so the CLI can print
// one clear line and exit non-zero instead of crashing.
#pragma once

#include <stdexcept>
#include <string>

namespace tierzero {

class Error : public std::runtime_error {
 public:
  Error(std::string what, std::string where, std::string hint = {});

  const std::string& what_failed() const { return what_; }
  const std::string& where() const { return where_; }
  const std::string& hint() const { return hint_; }

 private:
  static std::string compose(const std::string& what, const std::string& where,
                             const std::string& hint);
  std::string what_;
  std::string where_;
  std::string hint_;
};

// The rank and tier that new errors mention; set once by the launcher, per thread by I/O workers.
void set_error_rank(int rank);
std::string error_location(const char* file, int line, const char* tier = nullptr);

}  // namespace tierzero

#define TZ_THROW(what, hint) \
  throw ::tierzero::Error((what), ::tierzero::error_location(__FILE__, __LINE__), (hint))

#define TZ_CHECK(cond, what, hint)     \
  do {                                 \
    if (!(cond)) TZ_THROW(what, hint); \
  } while (0)

// Checks a POSIX call that returns -1 and sets errno.
#define TZ_CHECK_ERRNO(expr, what)                                                         \
  do {                                                                                     \
    if ((expr) == -1)                                                                      \
      TZ_THROW(std::string(what) + ": " + ::tierzero::errno_string(), "see the OS error"); \
  } while (0)

namespace tierzero {
std::string errno_string();
}
