// Levelled logging with a rank prefix, to stderr. Ranks other than 0 stay quiet below warnings
// unless asked, so multi-rank runs print one readable stream.
#pragma once

#include <string>

namespace tierzero::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

void set_level(Level level);
Level level();
Level level_from_name(const std::string& name);  // throws Error on an unknown name
void set_rank(int rank, int world_size);

void write(Level level, const std::string& message);
inline void debug(const std::string& m) {
  write(Level::debug, m);
}
inline void info(const std::string& m) {
  write(Level::info, m);
}
inline void warn(const std::string& m) {
  write(Level::warn, m);
}
inline void error(const std::string& m) {
  write(Level::error, m);
}

}  // namespace tierzero::log
