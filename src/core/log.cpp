// Logging sink: one line per message, "[tierzero rank r/w] level: text".
#include "tierzero/core/log.hpp"

#include <cstdio>
#include <mutex>

#include "tierzero/core/error.hpp"

namespace tierzero::log {

namespace {
Level g_level = Level::info;
int g_rank = 0;
int g_world = 1;
std::mutex g_mutex;
}  // namespace

void set_level(Level l) {
  g_level = l;
}
Level level() {
  return g_level;
}

Level level_from_name(const std::string& n) {
  if (n == "debug") return Level::debug;
  if (n == "info") return Level::info;
  if (n == "warn" || n == "warning") return Level::warn;
  if (n == "error") return Level::error;
  if (n == "off") return Level::off;
  TZ_THROW("unknown log level '" + n + "'", "use debug, info, warn, error or off");
}

void set_rank(int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
  set_error_rank(world_size > 1 ? rank : -1);
}

void write(Level l, const std::string& m) {
  if (l < g_level) return;
  if (g_rank != 0 && l < Level::warn) return;
  static const char* names[] = {"debug", "info", "warn", "error"};
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_world > 1)
    std::fprintf(stderr, "[tierzero %d/%d] %s: %s\n", g_rank, g_world, names[static_cast<int>(l)],
                 m.c_str());
  else
    std::fprintf(stderr, "[tierzero] %s: %s\n", names[static_cast<int>(l)], m.c_str());
}

}  // namespace tierzero::log
