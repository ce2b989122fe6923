// The estimate as JSON: what `tierzero estimate --json` prints and what the Python package's
// tierzero.estimate() returns (one builder, so the two never differ).
#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "estimate_model.hpp"
#include "tierzero/profile/estimator.hpp"

namespace tierzero::cli {

// The settings' model, world and run, the estimate's bytes per tier and category (model state and
// buffers), the totals per tier, and the overview table over every stage and offload option.
nlohmann::json estimate_report(const EstimateSettings& s, const profile::Estimate& e,
                               const std::vector<profile::TableRow>& table);

}  // namespace tierzero::cli
