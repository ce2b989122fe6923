// The safetensors header reader (see safetensors_header.hpp).
#include "safetensors_header.hpp"

#include <unistd.h>

#include <algorithm>

#include "model_file_io.hpp"
#include "tierzero/core/checked_math.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/input_file.hpp"
#include "tierzero/core/json_text.hpp"

namespace tierzero::train::detail {

std::string cut(const std::string& s) {
  return s.size() <= 60 ? s : s.substr(0, 60) + "...";
}

size_t dtype_bytes(const std::string& dtype) {
  static const std::pair<const char*, size_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  for (const auto& [name, bytes] : kSizes)
    if (dtype == name) return bytes;
  return 0;
}

namespace {

// The reference implementation's limit: a header this large is damage, not a model.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void bad_field(const std::string& path, const std::string& tensor,
                            const std::string& field, const std::string& problem) {
  TZ_THROW("safetensors file '" + path + "': tensor '" + cut(tensor) + "' field '" + field + "' " +
               problem,
           "the file is damaged or not a safetensors file; re-export it");
}

// Every field of one tensor entry (see Entry).
Entry check_entry(const std::string& path, const Header& h, const std::string& name,
                  const nlohmann::json& v) {
  if (!v.is_object())
    TZ_THROW("safetensors file '" + path + "': the entry of tensor '" + cut(name) +
                 "' must be an object with dtype, shape and data_offsets, got " + cut(v.dump()),
             "the file is damaged; re-export it");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) bad_field(path, name, key, "is missing");
  Entry e;
  const nlohmann::json& dtype = v.at("dtype");
  if (!dtype.is_string() || dtype_bytes(dtype.get<std::string>()) == 0)
    bad_field(
        path, name, "dtype",
        "must be a safetensors dtype (F32, F16, BF16, F64, I64, ...), got " + cut(dtype.dump()));
  e.dtype = dtype.get<std::string>();
  const nlohmann::json& shape = v.at("shape");
  if (!shape.is_array())
    bad_field(path, name, "shape", "must be an array, got " + cut(shape.dump()));
  size_t numel = 1;
  for (const nlohmann::json& d : shape) {
    if (!d.is_number_unsigned())
      bad_field(path, name, "shape", "must hold non-negative integers, got " + cut(shape.dump()));
    e.shape.push_back(d.get<size_t>());
    if (!mul_fits(numel, e.shape.back(), &numel))
      bad_field(path, name, "shape", cut(shape.dump()) + " has more elements than 2^64");
  }
  const nlohmann::json& offsets = v.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    bad_field(path, name, "data_offsets",
              "must be two non-negative integers [begin, end], got " + cut(offsets.dump()));
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end) bad_field(path, name, "data_offsets", "has begin > end: " + offsets.dump());
  size_t bytes = 0;
  const bool fits = mul_fits(numel, dtype_bytes(e.dtype), &bytes);
  if (!fits || e.end - e.begin != bytes)
    bad_field(path, name, "data_offsets",
              offsets.dump() + " spans " + std::to_string(e.end - e.begin) + " bytes, but " +
                  e.dtype + " " + shape.dump() + " needs " +
                  (fits ? std::to_string(bytes) : std::string("more than 2^64")));
  if (e.end > h.file_size - h.data_start)
    TZ_THROW("safetensors file '" + path + "' ends inside tensor '" + cut(name) +
                 "' (its data ends at byte " + std::to_string(h.data_start + e.end) +
                 " of a file of " + std::to_string(h.file_size) + " bytes)",
             "the file is truncated");
  return e;
}

// __metadata__: an object of strings (the format's rule), if present.
void check_metadata(const std::string& path, const nlohmann::json& meta) {
  if (!meta.is_object())
    TZ_THROW("safetensors file '" + path + "': __metadata__ must be an object of strings, got " +
                 cut(meta.dump()),
             "the file is damaged; re-export it");
  for (const auto& [key, value] : meta.items())
    if (!value.is_string())
      TZ_THROW("safetensors file '" + path + "': __metadata__ key '" + cut(key) +
                   "' must be a string, got " + cut(value.dump()),
               "the format stores metadata as strings; re-export it");
}

// Every entry validated, and no two tensors' data overlapping.
void check_entries(const std::string& path, Header& h) {
  for (const auto& [name, value] : h.json.items()) {
    if (name == "__metadata__")
      check_metadata(path, value);
    else
      h.entries.emplace(name, check_entry(path, h, name, value));
  }
  std::vector<std::pair<const std::string*, const Entry*>> by_begin;
  for (const auto& [name, e] : h.entries)
    if (e.end > e.begin) by_begin.emplace_back(&name, &e);
  std::sort(by_begin.begin(), by_begin.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < by_begin.size(); ++i) {
    const Entry &a = *by_begin[i - 1].second, &b = *by_begin[i].second;
    if (b.begin < a.end)
      TZ_THROW("safetensors file '" + path + "': tensors '" + cut(*by_begin[i - 1].first) +
                   "' (data_offsets [" + std::to_string(a.begin) + ", " + std::to_string(a.end) +
                   "]) and '" + cut(*by_begin[i].first) + "' ([" + std::to_string(b.begin) + ", " +
                   std::to_string(b.end) + "]) overlap",
               "each tensor must have its own bytes; the file is damaged or forged");
  }
}

}  // namespace

Header read_header(const std::string& path) {
  size_t size = 0;
  const int fd = open_input_file(path, "safetensors file", "check the path given to --load", &size);
  uint8_t len_bytes[8] = {};
  std::string failed = size < 8 ? "" : pread_all(fd, len_bytes, 8, 0);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];  // little-endian
  const bool fits = failed.empty() && size >= 8 && n > 0 && n <= size - 8 && n <= kMaxHeaderBytes;
  std::string text;
  if (fits) {
    text.resize(n);
    failed = pread_all(fd, text.data(), n, 8);
  }
  ::close(fd);
  TZ_CHECK(failed.empty(), "cannot read the header of safetensors file '" + path + "': " + failed,
           "the file is unreadable; re-copy it");
  TZ_CHECK(fits,
           "'" + path + "' is not a safetensors file (header length " + std::to_string(n) +
               " in a file of " + std::to_string(size) + " bytes" +
               (n > kMaxHeaderBytes && n <= size - 8 ? ", more than the format's 100 MB" : "") +
               ")",
           "give --load an llm.c checkpoint or a safetensors file");
  Header h;
  h.json = parse_json_text(text, "the header of safetensors file '" + path + "'",
                           "the file is damaged; re-export it");
  TZ_CHECK(h.json.is_object(), "the header of safetensors file '" + path + "' is not a JSON object",
           "the file is damaged");
  h.data_start = 8 + n;
  h.file_size = size;
  check_entries(path, h);
  return h;
}

}  // namespace tierzero::train::detail
