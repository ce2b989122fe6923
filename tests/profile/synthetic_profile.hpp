// A synthetic run profile for the report and trace tests: realistic shapes (parameters and
// optimizer states held all step, activations rising through forward and falling through
// backward, gradients appearing in backward), built directly so a 1,000-step profile costs
// nothing to make.
#pragma once

#include <cstddef>

#include "tierzero/profile/profile.hpp"

namespace tierzero::profile::synthetic {

// `units` transformer-like units; with `timeline`, every memory event and one activity per
// track and unit are kept too.
Profile synthetic_profile(size_t steps, size_t units, bool timeline);

}  // namespace tierzero::profile::synthetic
