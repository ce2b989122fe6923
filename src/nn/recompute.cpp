// Recompute's names, for configs, flags and reports.
#include "tierzero/nn/recompute.hpp"

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

const char* Recompute::name() const {
  switch (mode_) {
    case none:
      return "none";
    case selective:
      return "selective";
    case full:
      return "full";
  }
  return "none";
}

Recompute Recompute::parse(const std::string& text, const std::string& where) {
  for (Mode m : {none, selective, full})
    if (text == Recompute(m).name()) return m;
  TZ_THROW(where + ": unknown recompute mode \"" + text + "\"",
           "use none, selective (the attention's core) or full (whole blocks)");
}

}  // namespace tierzero::nn
