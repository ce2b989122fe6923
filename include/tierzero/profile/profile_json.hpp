// The run profile as JSON ({"format": "tierzero-profile", "version": 1, ...}; schema in
// docs/profile.md): written at the end of a run, read back by `tierzero report`. Reading checks
// the format and version and names the file and the field when something is wrong.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tierzero/profile/profile.hpp"

namespace tierzero::profile {

constexpr const char* kProfileFormat = "tierzero-profile";
constexpr int kProfileVersion = 1;

nlohmann::json profile_to_json(const Profile& p);
// `source` names the file (or "input") in errors.
Profile profile_from_json(const nlohmann::json& j, const std::string& source = "input");

void write_profile(const Profile& p, const std::string& path);
Profile read_profile(const std::string& path);

}  // namespace tierzero::profile
