// The readers' fuzz mutator (see mutator.hpp).
#include "mutator.hpp"

#include <cstring>
#include <limits>
#include <vector>

namespace tierzero::test {

namespace {

const int32_t kHostileInts[] = {0,        -1,       1,      2,          3,         5,         256,
                                1023,     65535,    65536,  1000000000, INT32_MAX, INT32_MIN, -1000,
                                20240326, 20240520, 0x7fff, 0x10000001, 536870912, 1 << 30};

const char* const kHostileLiterals[] = {"1e400",
                                        "-1e400",
                                        "1e-400",
                                        "18446744073709551616",
                                        "18446744073709551615",
                                        "-1",
                                        "-0",
                                        "0.5",
                                        "1.5",
                                        "1e18",
                                        "9223372036854775808",
                                        "\"abc\"",
                                        "null",
                                        "true",
                                        "[]",
                                        "{}",
                                        "1e308",
                                        "-9223372036854775809",
                                        "4294967296"};

void collect_pointers(const nlohmann::json& j, const nlohmann::json::json_pointer& at,
                      std::vector<nlohmann::json::json_pointer>& out) {
  out.push_back(at);
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) collect_pointers(value, at / key, out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) collect_pointers(j[i], at / i, out);
  }
}

}  // namespace

int32_t Mutator::hostile_int32() {
  if (chance(0.2)) return static_cast<int32_t>(rng_());
  return kHostileInts[below(std::size(kHostileInts))];
}

nlohmann::json Mutator::hostile_json() {
  switch (below(16)) {
    case 0:
      return -1;
    case 1:
      return 1.5;
    case 2:
      return -0.25;
    case 3:
      return 1e300;
    case 4:
      return std::numeric_limits<uint64_t>::max();
    case 5:
      return std::numeric_limits<int64_t>::min();
    case 6:
      return "abc";
    case 7:
      return "";
    case 8:
      return nullptr;
    case 9:
      return true;
    case 10:
      return nlohmann::json::array();
    case 11:
      return nlohmann::json::object();
    case 12:
      return {1, 2, 3};
    case 13:
      return 4294967296ULL;
    case 14:
      return "-1";
    default:
      return static_cast<int64_t>(rng_() >> below(64));
  }
}

std::string Mutator::mutate_bytes(const std::string& in, std::string& what) {
  std::string s = in;
  switch (below(6)) {
    case 0: {  // flips
      const size_t n = 1 + below(8);
      for (size_t i = 0; i < n && !s.empty(); ++i)
        s[below(s.size())] ^= static_cast<char>(1u << below(8));
      what = "flipped " + std::to_string(n) + " bits";
      break;
    }
    case 1: {  // truncation
      const size_t at = below(s.size() + 1);
      s.resize(at);
      what = "truncated to " + std::to_string(at) + " bytes";
      break;
    }
    case 2: {  // insertion
      const size_t at = below(s.size() + 1), n = 1 + below(64);
      std::string junk(n, '\0');
      for (char& c : junk) c = static_cast<char>(rng_());
      s.insert(at, junk);
      what = "inserted " + std::to_string(n) + " bytes at " + std::to_string(at);
      break;
    }
    case 3: {  // a chunk erased
      const size_t at = below(s.size() + 1), n = below(s.size() - at + 1);
      s.erase(at, n);
      what = "erased " + std::to_string(n) + " bytes at " + std::to_string(at);
      break;
    }
    case 4: {  // a random aligned int32 in the first KiB overwritten
      if (s.size() >= 4) {
        const size_t at = below(std::min<size_t>(s.size(), 1024) / 4) * 4;
        const int32_t v = hostile_int32();
        std::memcpy(s.data() + at, &v, 4);
        what = "int32 at byte " + std::to_string(at) + " = " + std::to_string(v);
      }
      break;
    }
    default: {  // a chunk duplicated
      const size_t at = below(s.size() + 1), n = below(std::min<size_t>(s.size() - at, 4096) + 1);
      s.insert(at, s.substr(at, n));
      what = "duplicated " + std::to_string(n) + " bytes at " + std::to_string(at);
      break;
    }
  }
  return s;
}

std::string Mutator::set_header_field(const std::string& in, size_t field, std::string& what) {
  std::string s = in;
  const int32_t v = hostile_int32();
  if (s.size() >= (field + 1) * 4) std::memcpy(s.data() + field * 4, &v, 4);
  what = "header field " + std::to_string(field) + " = " + std::to_string(v);
  return s;
}

void Mutator::mutate_json(nlohmann::json& doc, std::string& what) {
  std::vector<nlohmann::json::json_pointer> ptrs;
  collect_pointers(doc, nlohmann::json::json_pointer(), ptrs);
  const nlohmann::json::json_pointer at = ptrs[below(ptrs.size())];
  const std::string where = at.to_string().empty() ? "<root>" : at.to_string();
  if (!at.empty() && chance(0.15)) {
    nlohmann::json& parent = doc[at.parent_pointer()];
    if (parent.is_object()) {
      const std::string key = at.back();
      nlohmann::json v = parent[key];
      parent.erase(key);
      if (chance(0.5)) {
        parent[key + "x"] = v;
        what = "renamed " + where;
      } else {
        what = "removed " + where;
      }
      return;
    }
  }
  doc[at] = hostile_json();
  what = where + " = " + doc[at].dump();
}

std::string Mutator::mutate_json_text(const std::string& text, std::string& what) {
  std::vector<std::pair<size_t, size_t>> numbers;  // [begin, end) of each number token
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    const bool starts = (c == '-' || (c >= '0' && c <= '9')) &&
                        (i == 0 || std::strchr(":,[ \n\t", text[i - 1]) != nullptr);
    if (!starts) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < text.size() && std::strchr("0123456789.eE+-", text[j]) != nullptr) ++j;
    numbers.emplace_back(i, j);
    i = j;
  }
  std::string s = text;
  if (!numbers.empty() && chance(0.8)) {
    const auto [b, e] = numbers[below(numbers.size())];
    const std::string lit = kHostileLiterals[below(std::size(kHostileLiterals))];
    what = "number '" + s.substr(b, e - b) + "' at byte " + std::to_string(b) + " -> " + lit;
    s.replace(b, e - b, lit);
    return s;
  }
  const char* const kDamage[] = {"{", "}", "[", "]", ",", ":", "\"", "\\u12", "\x01", "/*"};
  const size_t at = below(s.size() + 1);
  const std::string d = kDamage[below(std::size(kDamage))];
  s.insert(at, d);
  what = "inserted '" + d + "' at byte " + std::to_string(at);
  return s;
}

}  // namespace tierzero::test
