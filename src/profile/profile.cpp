// Names of phases and small helpers over the profile's plain data.
#include "tierzero/profile/profile.hpp"

#include "tierzero/core/error.hpp"

namespace tierzero::profile {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::forward:
      return "forward";
    case Phase::backward:
      return "backward";
    case Phase::optimizer:
      return "optimizer";
    case Phase::eval:
      return "eval";
    case Phase::other:
      return "other";
  }
  return "other";
}

Phase phase_from_name(const std::string& name) {
  for (size_t i = 0; i < kNumPhases; ++i)
    if (name == phase_name(static_cast<Phase>(i))) return static_cast<Phase>(i);
  TZ_THROW("unknown phase '" + name + "'",
           "phases are forward, backward, optimizer, eval and other");
}

size_t tier_total(const TierCategoryBytes& b, Tier t) {
  size_t sum = 0;
  for (size_t v : b[static_cast<size_t>(t)]) sum += v;
  return sum;
}

}  // namespace tierzero::profile
