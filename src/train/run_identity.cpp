// The id travels as four f32 values of 16 bits each (every integer below 2^24 is exact in f32),
// because the world group reduces and broadcasts the float types only.
#include "tierzero/train/run_identity.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>

namespace tierzero::train {

std::string shared_run_id(comm::Communicator* group) {
  std::array<float, 4> parts{};  // (4) 16 bits each, most significant first
  if (!group || group->rank() == 0) {
    std::random_device rd;
    const uint64_t now =
        static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    const uint64_t id = ((uint64_t{rd()} << 32) | rd()) ^ now;
    for (size_t i = 0; i < parts.size(); ++i)
      parts[i] = static_cast<float>((id >> (48 - 16 * i)) & 0xffff);
  }
  if (group) group->broadcast(parts.data(), parts.size(), DType::f32, 0);
  uint64_t id = 0;
  for (float p : parts) id = (id << 16) | (static_cast<uint64_t>(p) & 0xffff);
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
  return text;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

}  // namespace tierzero::train
