// llm.c checkpoint reading and writing, with the unit-major layout mapped to llm.c's order.
#include "tierzero/train/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "model_file_io.hpp"
#include "tierzero/core/checked_math.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/input_file.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/train/hf_directory.hpp"
#include "tierzero/train/safetensors_gpt2.hpp"

namespace tierzero::train {

namespace {

constexpr size_t kHeaderInts = 256;
constexpr size_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

// Visits every parameter slice in llm.c file order.
template <typename Fn>
void for_each_in_file_order(const nn::ParamLayout& layout, size_t num_layers, Fn fn) {
  TZ_CHECK(
      layout.find(nn::ParamKind::wpe) != nullptr && layout.find(nn::ParamKind::lnfb) != nullptr,
      "an llm.c model file holds a GPT-2 only, not this Llama-family model",
      "use training checkpoints (--save-dir, --resume) for Llama-family models");
  for (size_t k = 0; k < nn::kNumGpt2ParamKinds; ++k) {
    auto kind = static_cast<nn::ParamKind>(k);
    bool layered = !(kind == nn::ParamKind::wte || kind == nn::ParamKind::wpe ||
                     kind == nn::ParamKind::lnfw || kind == nn::ParamKind::lnfb);
    if (!layered) {
      fn(layout.get(kind, -1));
    } else {
      for (size_t l = 0; l < num_layers; ++l) fn(layout.get(kind, static_cast<int>(l)));
    }
  }
}

size_t expected_file_bytes(const nn::ParamLayout& layout) {
  return kHeaderBytes + layout.parameter_count() * sizeof(float);
}

// Byte offset in an llm.c file of each of the layout's tensors (indexed as layout.tensors()).
std::vector<size_t> file_offsets(const nn::ParamLayout& layout, size_t num_layers) {
  std::vector<size_t> offsets(layout.tensors().size(), 0);
  size_t at = kHeaderBytes;
  for_each_in_file_order(layout, num_layers, [&](const nn::ParamTensor& t) {
    offsets[static_cast<size_t>(&t - layout.tensors().data())] = at;
    at += t.numel * sizeof(float);
  });
  return offsets;
}

// The parameters an llm.c GPT-2 of this shape holds (wte (Vp, C), wpe (maxT, C), per layer
// 12 C^2 + 13 C, the final layernorm 2 C), every step checked: the shape comes from a header
// that may be forged, and it must be weighed against the file before anything is built from it.
size_t llmc_parameter_count(const nn::GPTConfig& c, const std::string& what) {
  const size_t C = c.channels;
  const size_t per_layer =
      checked_add(checked_mul(checked_mul(C, C, what), 12, what), checked_mul(C, 13, what), what);
  size_t n = checked_mul(c.padded_vocab_size, C, what);
  n = checked_add(n, checked_mul(c.max_seq_len, C, what), what);
  n = checked_add(n, checked_mul(c.num_layers, per_layer, what), what);
  return checked_add(n, checked_mul(C, 2, what), what);
}

using detail::for_each_tensor_part;
using detail::pread_all;
using detail::pwrite_all;

// The model a header describes, checked field by field and against the file's size before any
// layout is built from it: a forged n_layer of 1e9 must be an error, not an allocation.
nn::GPTConfig config_from_header(const int32_t* h, const std::string& path, size_t file_bytes) {
  if (h[0] != kCheckpointMagic)
    TZ_THROW("checkpoint '" + path + "' has bad magic " + std::to_string(h[0]) + " (expected " +
                 std::to_string(kCheckpointMagic) + ")",
             "this is not an llm.c model checkpoint");
  if (h[1] != kCheckpointVersionF32)
    TZ_THROW("checkpoint '" + path + "' has version " + std::to_string(h[1]) +
                 (h[1] == 5 ? " (bf16 weights)" : "") + "; only version 3 (fp32) is supported",
             "write the checkpoint in fp32 (llm.c version 3)");
  static const char* const kFields[] = {
      "",           "",          "max_seq_len", "vocab_size",
      "num_layers", "num_heads", "channels",    "padded_vocab_size"};
  for (int i = 2; i <= 7; ++i)
    if (h[i] <= 0)
      TZ_THROW("checkpoint '" + path + "' has a non-positive " + kFields[i] + " (" +
                   std::to_string(h[i]) + ") at header index " + std::to_string(i),
               "the header is corrupt");
  nn::GPTConfig c;
  c.max_seq_len = static_cast<size_t>(h[2]);
  c.vocab_size = static_cast<size_t>(h[3]);
  c.num_layers = static_cast<size_t>(h[4]);
  c.num_heads = static_cast<size_t>(h[5]);
  c.channels = static_cast<size_t>(h[6]);
  c.padded_vocab_size = static_cast<size_t>(h[7]);
  if (c.channels % c.num_heads != 0 || c.padded_vocab_size < c.vocab_size)
    TZ_THROW("checkpoint '" + path + "' has an inconsistent shape: " + c.str(),
             "the header is corrupt");
  const size_t params =
      llmc_parameter_count(c, "the size of checkpoint '" + path + "' (" + c.str() + ")");
  const size_t want = kHeaderBytes + std::min(params, SIZE_MAX / 8) * sizeof(float);
  if (params > SIZE_MAX / 8 || file_bytes != want)
    TZ_THROW("checkpoint '" + path + "' is " + (file_bytes < want ? "truncated" : "too long") +
                 ": " + std::to_string(file_bytes) + " bytes, but its header (" + c.str() +
                 ") needs " + std::to_string(params) + " parameters, " +
                 (params > SIZE_MAX / 8 ? "more than any file holds" : std::to_string(want)) +
                 " bytes",
             "the file is incomplete or its header is corrupt; re-copy or re-save it");
  return c;
}

}  // namespace

nn::GPTConfig read_checkpoint_config(const std::string& path) {
  size_t file_bytes = 0;
  const int fd = open_input_file(path, "checkpoint", "check the path given to --load", &file_bytes);
  int32_t h[kHeaderInts];
  const std::string failed = file_bytes < kHeaderBytes ? "" : pread_all(fd, h, kHeaderBytes, 0);
  ::close(fd);
  if (file_bytes < kHeaderBytes)
    TZ_THROW("checkpoint '" + path + "' is truncated: " + std::to_string(file_bytes) +
                 " bytes, shorter than its 1024-byte header",
             "the file is incomplete; re-copy or re-save it");
  if (!failed.empty())
    TZ_THROW("cannot read the header of checkpoint '" + path + "': " + failed,
             "the file is incomplete or unreadable; re-copy or re-save it");
  return config_from_header(h, path, file_bytes);
}

void load_checkpoint(const std::string& path, const nn::ParamLayout& layout, float* host_params) {
  ModelFileRanges(path, layout).read(0, layout.total_numel(), host_params);
}

void save_checkpoint(const std::string& path, const nn::GPTConfig& c, const nn::ParamLayout& layout,
                     const float* host_params) {
  ModelFileWriter writer(path, c, layout);
  writer.write(0, layout.total_numel(), host_params);
  writer.commit();
}

void ModelRanges::read_runs(const std::vector<Run>& runs, float* out, std::vector<float>& scratch,
                            size_t block_elems) const {
  if (runs.empty()) return;
  if (runs.size() == 1) {
    read(runs[0].full, runs[0].n, out + runs[0].at);
    return;
  }
  const size_t lo = runs.front().full, hi = runs.back().full + runs.back().n;
  const size_t block = std::max<size_t>(1, std::min(block_elems, hi - lo));
  scratch.resize(block);
  size_t first = 0;  // the first run not yet wholly copied
  for (size_t b = lo; b < hi && first < runs.size(); b += block) {
    const size_t e = std::min(hi, b + block);
    if (runs[first].full >= e) continue;  // a gap between runs: nothing needed here
    read(b, e - b, scratch.data());
    for (size_t i = first; i < runs.size() && runs[i].full < e; ++i) {
      const Run& r = runs[i];
      const size_t from = std::max(b, r.full), to = std::min(e, r.full + r.n);
      if (from < to)
        std::copy_n(scratch.data() + (from - b), to - from, out + r.at + (from - r.full));
    }
    while (first < runs.size() && runs[first].full + runs[first].n <= e) ++first;
  }
}

std::unique_ptr<ModelRanges> open_model_ranges(const std::string& path,
                                               const nn::ParamLayout& layout) {
  if (is_hf_directory(path)) return open_hf_directory_ranges(path, layout);
  if (is_safetensors_path(path)) return open_gpt2_safetensors_ranges(path, layout);
  return std::make_unique<ModelFileRanges>(path, layout);
}

ModelFileRanges::ModelFileRanges(const std::string& path, const nn::ParamLayout& layout)
    : path_(path), layout_(layout) {
  const nn::GPTConfig c = read_checkpoint_config(path);
  TZ_CHECK(nn::gpt_param_layout(c).total_numel() == layout.total_numel(),
           "checkpoint '" + path + "' (" + c.str() + ") does not match the model's layout",
           "build the model from the checkpoint's own shape");
  TZ_CHECK(expected_file_bytes(layout) ==
               kHeaderBytes + llmc_parameter_count(c, "checkpoint '" + path + "'") * sizeof(float),
           "checkpoint '" + path + "' (" + c.str() + ") does not match the model's layout",
           "build the model from the checkpoint's own shape");
  file_offset_ = file_offsets(layout, c.num_layers);
  fd_ = open_input_file(path, "checkpoint", "check the path given to --load");
}

ModelFileRanges::~ModelFileRanges() {
  if (fd_ >= 0) ::close(fd_);
}

void ModelFileRanges::read(size_t begin, size_t count, float* out) const {
  std::memset(out, 0, count * sizeof(float));
  for_each_tensor_part(layout_, begin, count, [&](size_t i, size_t first, size_t at, size_t n) {
    const std::string failed =
        pread_all(fd_, out + at, n * sizeof(float), file_offset_[i] + first * sizeof(float));
    if (!failed.empty())
      TZ_THROW("cannot read " + layout_.tensors()[i].name() + " from checkpoint '" + path_ +
                   "': " + failed,
               "the file is incomplete or unreadable; re-copy or re-save it");
  });
}

ModelFileWriter::ModelFileWriter(const std::string& path, const nn::GPTConfig& c,
                                 const nn::ParamLayout& layout)
    : path_(path), tmp_(path + ".tmp"), layout_(layout) {
  file_offset_ = file_offsets(layout, c.num_layers);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    TZ_THROW("cannot create checkpoint '" + tmp_ + "': " + errno_string(),
             "check that the directory exists and is writable");
  int32_t h[kHeaderInts] = {};
  h[0] = kCheckpointMagic;
  h[1] = kCheckpointVersionF32;
  h[2] = static_cast<int32_t>(c.max_seq_len);
  h[3] = static_cast<int32_t>(c.vocab_size);
  h[4] = static_cast<int32_t>(c.num_layers);
  h[5] = static_cast<int32_t>(c.num_heads);
  h[6] = static_cast<int32_t>(c.channels);
  h[7] = static_cast<int32_t>(c.padded_vocab_size);
  const std::string failed = pwrite_all(fd_, h, kHeaderBytes, 0);
  if (!failed.empty()) {
    ::close(fd_);
    fd_ = -1;
    std::remove(tmp_.c_str());
    TZ_THROW("cannot write checkpoint '" + tmp_ + "': " + failed,
             "is the disk full? the previous checkpoint at '" + path + "' is untouched");
  }
}

ModelFileWriter::~ModelFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    std::remove(tmp_.c_str());
  }
}

void ModelFileWriter::write(size_t begin, size_t count, const float* values) {
  TZ_CHECK(fd_ >= 0, "checkpoint '" + path_ + "' is already committed", "");
  for_each_tensor_part(layout_, begin, count, [&](size_t i, size_t first, size_t at, size_t n) {
    const std::string failed =
        pwrite_all(fd_, values + at, n * sizeof(float), file_offset_[i] + first * sizeof(float));
    if (!failed.empty())
      TZ_THROW("cannot write " + layout_.tensors()[i].name() + " to checkpoint '" + tmp_ +
                   "': " + failed,
               "is the disk full? the previous checkpoint at '" + path_ + "' is untouched");
  });
}

void ModelFileWriter::commit() {
  TZ_CHECK(fd_ >= 0, "checkpoint '" + path_ + "' is already committed", "");
  const bool synced = ::fsync(fd_) == 0;
  const std::string e = synced ? "" : errno_string();
  const bool closed = ::close(fd_) == 0;
  fd_ = -1;
  if (!synced || !closed) {
    std::remove(tmp_.c_str());
    TZ_THROW("cannot write checkpoint '" + tmp_ + "': " + (e.empty() ? errno_string() : e),
             "is the disk full? the previous checkpoint at '" + path_ + "' is untouched");
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string re = errno_string();
    std::remove(tmp_.c_str());
    TZ_THROW("cannot rename '" + tmp_ + "' to '" + path_ + "': " + re, "");
  }
}

}  // namespace tierzero::train
