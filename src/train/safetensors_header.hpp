// A safetensors file's header read and validated whole: every entry's dtype, shape and
// data_offsets (inside the file, exactly numel x dtype bytes, no two overlapping) and the
// __metadata__ strings. Shared by the GPT-2 single-file reader and the Hugging Face directory
// reader (each shard is one such file). Private to src/train.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tierzero::train::detail {

// One tensor entry of a header, validated: a known dtype, a shape whose element count fits,
// data_offsets [begin, end) relative to the data start, of exactly numel x dtype bytes, inside
// the file.
struct Entry {
  std::string dtype;
  std::vector<size_t> shape;
  uint64_t begin = 0, end = 0;
};

struct Header {
  nlohmann::json json;
  std::map<std::string, Entry> entries;  // every tensor of the file, validated
  uint64_t data_start = 0;               // bytes from the file's start
  uint64_t file_size = 0;                // bytes
};

// The header of the safetensors file `path`, every entry validated; Error naming the file and
// the tensor and field at fault.
Header read_header(const std::string& path);

// Bytes of one element of a safetensors dtype ("F32", "BF16", ...); 0 for an unknown name.
size_t dtype_bytes(const std::string& dtype);

// A name or value as it appears in a message (long ones cut).
std::string cut(const std::string& s);

}  // namespace tierzero::train::detail
