// llm.c checkpoint reading and writing, with the unit-major layout mapped to llm.c's order.
#include "tierzero/train/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "model_file_io.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/safetensors_gpt2.hpp"

namespace tierzero::train {

namespace {

constexpr size_t kHeaderInts = 256;
constexpr size_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

// Visits every parameter slice in llm.c file order.
template <typename Fn>
void for_each_in_file_order(const nn::ParamLayout& layout, size_t num_layers, Fn fn) {
  for (size_t k = 0; k < nn::kNumParamKinds; ++k) {
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

using detail::for_each_tensor_part;
using detail::pread_all;
using detail::pwrite_all;

struct File {
  FILE* f = nullptr;
  ~File() {
    if (f) std::fclose(f);
  }
};

}  // namespace

nn::GPTConfig read_checkpoint_config(const std::string& path) {
  File file{std::fopen(path.c_str(), "rb")};
  if (!file.f)
    TZ_THROW("cannot open checkpoint '" + path + "': " + errno_string(), "check the path");
  int32_t h[kHeaderInts];
  if (std::fread(h, sizeof(int32_t), kHeaderInts, file.f) != kHeaderInts)
    TZ_THROW("checkpoint '" + path + "' is truncated: shorter than its 1024-byte header",
             "the file is incomplete; re-copy or re-save it");
  if (h[0] != kCheckpointMagic)
    TZ_THROW("checkpoint '" + path + "' has bad magic " + std::to_string(h[0]) + " (expected " +
                 std::to_string(kCheckpointMagic) + ")",
             "this is not an llm.c model checkpoint");
  if (h[1] != kCheckpointVersionF32)
    TZ_THROW("checkpoint '" + path + "' has version " + std::to_string(h[1]) +
                 (h[1] == 5 ? " (bf16 weights)" : "") + "; only version 3 (fp32) is supported",
             "write the checkpoint in fp32 (llm.c version 3)");
  for (int i = 2; i <= 7; ++i)
    if (h[i] <= 0)
      TZ_THROW("checkpoint '" + path + "' has a non-positive shape field " + std::to_string(h[i]) +
                   " at header index " + std::to_string(i),
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
  nn::ParamLayout layout(c);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    TZ_THROW("cannot stat checkpoint '" + path + "': " + errno_string(), "");
  const size_t want = expected_file_bytes(layout);
  if (static_cast<size_t>(st.st_size) != want)
    TZ_THROW("checkpoint '" + path + "' is " +
                 (static_cast<size_t>(st.st_size) < want ? "truncated" : "too long") + ": " +
                 std::to_string(st.st_size) + " bytes, but its header (" + c.str() + ") needs " +
                 std::to_string(want),
             "the file is incomplete or corrupt; re-copy or re-save it");
  return c;
}

void load_checkpoint(const std::string& path, const nn::ParamLayout& layout, float* host_params) {
  nn::GPTConfig c = read_checkpoint_config(path);
  TZ_CHECK(nn::ParamLayout(c).total_numel() == layout.total_numel(),
           "checkpoint '" + path + "' (" + c.str() + ") does not match the model's layout",
           "build the model from the checkpoint's own shape");
  File file{std::fopen(path.c_str(), "rb")};
  if (!file.f)
    TZ_THROW("cannot open checkpoint '" + path + "': " + errno_string(), "check the path");
  if (std::fseek(file.f, static_cast<long>(kHeaderBytes), SEEK_SET) != 0)
    TZ_THROW("cannot seek in checkpoint '" + path + "': " + errno_string(), "");
  for_each_in_file_order(layout, c.num_layers, [&](const nn::ParamTensor& t) {
    if (std::fread(host_params + t.offset, sizeof(float), t.numel, file.f) != t.numel)
      TZ_THROW("checkpoint '" + path + "' ended early while reading " + t.name(),
               "the file is incomplete; re-copy or re-save it");
  });
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
  if (is_safetensors_path(path)) return open_gpt2_safetensors_ranges(path, layout);
  return std::make_unique<ModelFileRanges>(path, layout);
}

ModelFileRanges::ModelFileRanges(const std::string& path, const nn::ParamLayout& layout)
    : path_(path), layout_(layout) {
  const nn::GPTConfig c = read_checkpoint_config(path);
  TZ_CHECK(nn::ParamLayout(c).total_numel() == layout.total_numel(),
           "checkpoint '" + path + "' (" + c.str() + ") does not match the model's layout",
           "build the model from the checkpoint's own shape");
  file_offset_ = file_offsets(layout, c.num_layers);
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) TZ_THROW("cannot open checkpoint '" + path + "': " + errno_string(), "");
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
