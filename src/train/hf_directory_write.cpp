// Writing a Hugging Face model directory (see hf_directory.hpp): the architecture's tensors cut
// into shards as transformers cuts them (in order, a new shard when the next tensor would pass
// the size), each shard a safetensors file written one tensor at a time, then the index and
// config.json; all in a sibling temporary directory renamed into place at the end.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "tierzero/core/error.hpp"
#include "tierzero/core/output_files.hpp"
#include "tierzero/train/hf_directory.hpp"

namespace tierzero::train {

namespace {

const char* safetensors_dtype(DType d) {
  return d == DType::f32 ? "F32" : d == DType::bf16 ? "BF16" : "F16";
}

const char* torch_dtype(DType d) {
  return d == DType::f32 ? "float32" : d == DType::bf16 ? "bfloat16" : "float16";
}

std::string shard_name(size_t i, size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return n == 1 ? "model.safetensors" : name;
}

// Tensor indices [first, last) of each shard.
std::vector<std::pair<size_t, size_t>> plan_shards(const std::vector<HfTensor>& tensors,
                                                   size_t elem_bytes, uint64_t max_bytes) {
  std::vector<std::pair<size_t, size_t>> shards;
  uint64_t in_shard = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t bytes = tensors[i].numel() * elem_bytes;
    if (shards.empty() || (in_shard > 0 && in_shard + bytes > max_bytes)) {
      shards.push_back({i, i});
      in_shard = 0;
    }
    shards.back().second = i + 1;
    in_shard += bytes;
  }
  return shards;
}

// Ours (rows x cols) into HF's layout (transposed for Conv1D) and dtype.
void to_hf(const HfTensor& t, const float* ours, DType dtype, std::vector<float>& scratch,
           std::vector<uint8_t>& out) {
  const float* src = ours;
  if (t.transpose) {
    scratch.resize(t.numel());  // (cols, rows)
    for (size_t r = 0; r < t.rows; ++r)
      for (size_t c = 0; c < t.cols; ++c) scratch[c * t.rows + r] = ours[r * t.cols + c];
    src = scratch.data();
  }
  out.resize(t.numel() * dtype_size(dtype));
  convert_from_f32(out.data(), dtype, src, t.numel());
}

void write_shard(const std::string& path, const std::vector<HfTensor>& tensors, size_t first,
                 size_t last, const std::string& prefix, DType dtype, const HfFill& fill) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}, {"producer", "tierzero export"}};
  uint64_t at = 0;
  for (size_t i = first; i < last; ++i) {
    const uint64_t bytes = tensors[i].numel() * dtype_size(dtype);
    header[prefix + tensors[i].name] = {{"dtype", safetensors_dtype(dtype)},
                                        {"shape", tensors[i].shape},
                                        {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data 8-byte aligned
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(text.size() >> (8 * i));
  AtomicFileWriter w(path);
  w.write(len, 8);
  w.write(text.data(), text.size());
  std::vector<float> ours, scratch;  // one tensor at a time
  std::vector<uint8_t> bytes;
  for (size_t i = first; i < last; ++i) {
    const HfTensor& t = tensors[i];
    ours.assign(t.numel(), 0.0f);  // (rows, cols), our orientation
    for (const HfRowSpan& s : t.spans) fill(t, s.row, s.rows, ours.data() + s.hf_row * t.cols);
    to_hf(tensors[i], ours.data(), dtype, scratch, bytes);
    w.write(bytes.data(), bytes.size());
  }
  w.commit();
}

// `dir` without trailing slashes, so that its temporary sibling and parent are what they seem.
std::string without_trailing_slash(const std::string& dir) {
  std::string base = std::filesystem::path(dir).lexically_normal().string();
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return base;
}

// `dir` may be written: missing, or an empty directory; its temporary sibling is free.
std::string prepare_temporary(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    TZ_CHECK(fs::is_directory(dir, ec), "export directory '" + dir + "' is a file",
             "name a new or empty directory");
    TZ_CHECK(fs::is_empty(dir, ec), "export directory '" + dir + "' is not empty",
             "name a new or empty directory: export never replaces files");
  }
  const std::string tmp = without_trailing_slash(dir) + ".tmp-export";
  fs::remove_all(tmp, ec);  // a previous export's leftovers
  fs::create_directories(tmp, ec);
  TZ_CHECK(!ec, "cannot create '" + tmp + "': " + ec.message(),
           "check that the output's parent directory exists and is writable");
  return tmp;
}

}  // namespace

HfExportSummary write_hf_directory(const std::string& dir, const nn::GPTConfig& config,
                                   const HfExportOptions& options, const HfFill& fill) {
  TZ_CHECK(options.max_shard_bytes > 0, "--max-shard-size must be positive", "");
  const HfArchitecture& arch = hf_architecture_of(config);
  const std::vector<HfTensor> tensors = arch.tensors(config);
  const size_t es = dtype_size(options.dtype);
  const auto shards = plan_shards(tensors, es, options.max_shard_bytes);
  const std::string tmp = prepare_temporary(dir);
  HfExportSummary sum;
  sum.tensors = tensors.size();
  sum.shards = shards.size();
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  try {
    for (size_t s = 0; s < shards.size(); ++s) {
      const std::string name = shard_name(s, shards.size());
      write_shard(tmp + "/" + name, tensors, shards[s].first, shards[s].second, arch.prefixes[0],
                  options.dtype, fill);
      for (size_t i = shards[s].first; i < shards[s].second; ++i) {
        weight_map[arch.prefixes[0] + tensors[i].name] = name;
        sum.bytes += tensors[i].numel() * es;
      }
    }
    if (shards.size() > 1) {
      const nlohmann::ordered_json index = {{"metadata", {{"total_size", sum.bytes}}},
                                            {"weight_map", weight_map}};
      write_file_atomic(tmp + "/model.safetensors.index.json", index.dump(2) + "\n");
    }
    nlohmann::ordered_json cfg = arch.config_to_json(config);
    cfg["torch_dtype"] = torch_dtype(options.dtype);
    write_file_atomic(tmp + "/config.json", cfg.dump(2) + "\n");
  } catch (...) {  // a source that fails (a damaged checkpoint) leaves no half-written directory
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
    throw;
  }
  // rename(2) replaces an empty directory: `dir` appears whole or not at all.
  const std::string target = without_trailing_slash(dir);
  std::error_code ec;
  std::filesystem::rename(tmp, target, ec);
  TZ_CHECK(!ec, "cannot rename '" + tmp + "' to '" + target + "': " + ec.message(),
           "check the output's file system");
  fsync_directory(std::filesystem::absolute(target).parent_path().string());
  return sum;
}

}  // namespace tierzero::train
