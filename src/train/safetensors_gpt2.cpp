// GPT-2 safetensors: the HF name table, a streamed writer, a checked whole-file reader and a
// ranged reader that preads only what a range needs.
#include "tierzero/train/safetensors_gpt2.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "model_file_io.hpp"
#include "safetensors_header.hpp"
#include "tierzero/core/checked_math.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/input_file.hpp"
#include "tierzero/core/json_text.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/train/train_config.hpp"

namespace tierzero::train {

namespace {

using detail::cut;
using detail::Entry;
using detail::Header;
using detail::read_header;

struct KindName {
  nn::ParamKind kind;
  const char* name;  // after "h.<l>." for per-layer kinds
  bool transpose;
};

// llm.c's order: the file's order too.
constexpr KindName kNames[] = {
    {nn::ParamKind::wte, "wte.weight", false},
    {nn::ParamKind::wpe, "wpe.weight", false},
    {nn::ParamKind::ln1w, "ln_1.weight", false},
    {nn::ParamKind::ln1b, "ln_1.bias", false},
    {nn::ParamKind::qkvw, "attn.c_attn.weight", true},
    {nn::ParamKind::qkvb, "attn.c_attn.bias", false},
    {nn::ParamKind::attprojw, "attn.c_proj.weight", true},
    {nn::ParamKind::attprojb, "attn.c_proj.bias", false},
    {nn::ParamKind::ln2w, "ln_2.weight", false},
    {nn::ParamKind::ln2b, "ln_2.bias", false},
    {nn::ParamKind::fcw, "mlp.c_fc.weight", true},
    {nn::ParamKind::fcb, "mlp.c_fc.bias", false},
    {nn::ParamKind::fcprojw, "mlp.c_proj.weight", true},
    {nn::ParamKind::fcprojb, "mlp.c_proj.bias", false},
    {nn::ParamKind::lnfw, "ln_f.weight", false},
    {nn::ParamKind::lnfb, "ln_f.bias", false},
};

bool per_layer(nn::ParamKind k) {
  return !(k == nn::ParamKind::wte || k == nn::ParamKind::wpe || k == nn::ParamKind::lnfw ||
           k == nn::ParamKind::lnfb);
}

// Ours (rows, cols) of a kind.
std::pair<size_t, size_t> our_shape(const nn::GPTConfig& c, nn::ParamKind k) {
  const size_t C = c.channels;
  switch (k) {
    case nn::ParamKind::wte:
      return {c.padded_vocab_size, C};
    case nn::ParamKind::wpe:
      return {c.max_seq_len, C};
    case nn::ParamKind::qkvw:
      return {3 * C, C};
    case nn::ParamKind::qkvb:
      return {1, 3 * C};
    case nn::ParamKind::attprojw:
      return {C, C};
    case nn::ParamKind::fcw:
      return {4 * C, C};
    case nn::ParamKind::fcb:
      return {1, 4 * C};
    case nn::ParamKind::fcprojw:
      return {C, 4 * C};
    default:  // layernorm gains and biases, the projections' biases
      return {1, C};
  }
}

// Ours (rows x cols, the first kept_rows rows) into HF's layout.
void to_hf(const Gpt2Tensor& t, const float* ours, float* hf) {
  if (!t.transpose) {
    std::memcpy(hf, ours, t.numel() * sizeof(float));
    return;
  }
  for (size_t r = 0; r < t.rows; ++r)
    for (size_t c = 0; c < t.cols; ++c) hf[c * t.rows + r] = ours[r * t.cols + c];
}

// The entry of tensor `t`: present, F32 and HF's shape, or an Error naming both. Returns its
// data's [begin, end) in bytes from data_start (validated by check_entries).
std::pair<uint64_t, uint64_t> entry(const std::string& path, const Header& h, const Gpt2Tensor& t) {
  const auto it = h.entries.find(t.name);
  TZ_CHECK(it != h.entries.end(), "safetensors file '" + path + "' has no tensor '" + t.name + "'",
           "give a GPT-2 checkpoint with Hugging Face's names (as tierzero export writes)");
  const Entry& e = it->second;
  TZ_CHECK(e.dtype == "F32" && e.shape == t.shape,
           "tensor '" + t.name + "' of '" + path + "' is " + e.dtype + " " +
               nlohmann::json(e.shape).dump() + ", expected F32 " + nlohmann::json(t.shape).dump(),
           "give a float32 GPT-2 checkpoint of one consistent shape");
  return {e.begin, e.end};
}

// A __metadata__ value that must be a whole number in [lo, hi], or `fallback` when absent.
size_t metadata_count(const std::string& path, const nlohmann::json& meta, const char* key,
                      size_t fallback, size_t lo, size_t hi, const std::string& range) {
  if (!meta.contains(key)) return fallback;
  const std::string& text = meta.at(key).get_ref<const std::string&>();
  size_t v = 0;
  bool ok = !text.empty() && text.size() <= 19 &&
            text.find_first_not_of("0123456789") == std::string::npos;
  if (ok) v = std::stoull(text);
  if (!ok || v < lo || v > hi)
    TZ_THROW("safetensors file '" + path + "': __metadata__ key '" + key + "' = \"" + cut(text) +
                 "\" is not a whole number in " + range,
             "tierzero export writes it as a decimal string; re-export the file");
  return v;
}

// Blocks the header names: one more than the largest N of any "h.N." tensor, so that a block
// missing a tensor is an error naming it (config_of checks every tensor of every block) rather
// than the end of the model. Unknown tensors of a block (HF's attention-mask buffers) count.
size_t layer_count(const std::string& path, const Header& h) {
  size_t layers = 0;
  for (const auto& [name, entry] : h.entries) {
    if (name.rfind("h.", 0) != 0) continue;
    const size_t dot = name.find('.', 2);
    const std::string index = name.substr(2, dot == std::string::npos ? dot : dot - 2);
    const bool digits = !index.empty() && index.size() <= 6 &&
                        index.find_first_not_of("0123456789") == std::string::npos;
    TZ_CHECK(digits && std::stoul(index) < static_cast<size_t>(kMaxLayers),
             "safetensors file '" + path + "': tensor '" + cut(name) + "' names no block in [0, " +
                 std::to_string(kMaxLayers) + ")",
             "GPT-2 block tensors are named h.<block>.<tensor>, as tierzero export writes them");
    layers = std::max<size_t>(layers, std::stoul(index) + 1);
  }
  return layers;
}

// The model shape the header describes, every tensor of it present with its shape: only then
// is the shape, bounded by the file's bytes, used to build anything.
nn::GPTConfig config_of(const std::string& path, const Header& h) {
  const auto shape_of = [&](const std::string& name) {
    const auto it = h.entries.find(name);
    TZ_CHECK(it != h.entries.end(), "safetensors file '" + path + "' has no tensor '" + name + "'",
             "give a GPT-2 checkpoint with Hugging Face's names (as tierzero export writes)");
    return it->second.shape;
  };
  const std::vector<size_t> wte = shape_of("wte.weight"), wpe = shape_of("wpe.weight");
  TZ_CHECK(wte.size() == 2 && wpe.size() == 2 && wte[1] == wpe[1],
           "wte.weight and wpe.weight of '" + path + "' are not (V, C) and (T, C)", "");
  nn::GPTConfig c;
  c.vocab_size = wte[0];
  c.channels = wte[1];
  c.max_seq_len = wpe[0];
  c.num_layers = layer_count(path, h);
  static const nlohmann::json kNone = nlohmann::json::object();
  const nlohmann::json& meta = h.json.contains("__metadata__") ? h.json["__metadata__"] : kNone;
  const size_t C = c.channels, V = c.vocab_size;
  c.num_heads = metadata_count(path, meta, "n_head", C / 64, 1, std::max<size_t>(C, 1),
                               "[1, n_embd = " + std::to_string(C) + "]");
  // Padding rows are zeros the model holds beside the real ones: up to as many again (or 1024).
  const size_t most = V > SIZE_MAX / 4 ? SIZE_MAX / 2 : V + std::max<size_t>(V, 1024);
  c.padded_vocab_size =
      metadata_count(path, meta, "padded_vocab_size", (V + 127) / 128 * 128, V, most,
                     "[vocab " + std::to_string(V) + ", " + std::to_string(most) + "]");
  try {
    c.validate();
  } catch (const Error& e) {
    TZ_THROW("safetensors file '" + path + "': " + e.what_failed(), e.hint());
  }
  for (const Gpt2Tensor& t : gpt2_tensors(c)) entry(path, h, t);
  return c;
}

}  // namespace

size_t Gpt2Tensor::numel() const {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  return n;
}

std::vector<Gpt2Tensor> gpt2_tensors(const nn::GPTConfig& config) {
  TZ_CHECK(config.is_gpt2(),
           "a GPT-2 safetensors file cannot hold the Llama-family model " + config.str(),
           "export it as a Hugging Face model directory (export --hf-dir), or keep it in training "
           "checkpoints (--save-dir, --resume)");
  std::vector<Gpt2Tensor> out;
  for (const KindName& k : kNames) {
    const int layers = per_layer(k.kind) ? static_cast<int>(config.num_layers) : 1;
    for (int l = 0; l < layers; ++l) {
      Gpt2Tensor t;
      t.kind = k.kind;
      t.layer = per_layer(k.kind) ? l : -1;
      t.name = per_layer(k.kind) ? "h." + std::to_string(l) + "." + k.name : k.name;
      std::tie(t.rows, t.cols) = our_shape(config, k.kind);
      t.kept_rows = k.kind == nn::ParamKind::wte ? config.vocab_size : t.rows;
      t.transpose = k.transpose;
      if (t.rows == 1)
        t.shape = {t.cols};
      else if (t.transpose)
        t.shape = {t.cols, t.rows};
      else
        t.shape = {t.kept_rows, t.cols};
      out.push_back(std::move(t));
    }
  }
  return out;
}

void write_gpt2_safetensors(const std::string& path, const nn::GPTConfig& config,
                            const std::function<void(const Gpt2Tensor& t, float* ours)>& fill) {
  const std::vector<Gpt2Tensor> tensors = gpt2_tensors(config);
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"},
                            {"producer", "tierzero export"},
                            {"n_head", std::to_string(config.num_heads)},
                            {"padded_vocab_size", std::to_string(config.padded_vocab_size)}};
  uint64_t at = 0;
  for (const Gpt2Tensor& t : tensors) {
    const uint64_t bytes = t.numel() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data 8-byte aligned
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  TZ_CHECK(f != nullptr, "cannot create '" + tmp + "': " + std::strerror(errno),
           "check that the output directory exists and is writable");
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(text.size() >> (8 * i));
  bool ok =
      std::fwrite(len, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  std::vector<float> ours, hf;  // one tensor at a time
  try {
    for (const Gpt2Tensor& t : tensors) {
      if (!ok) break;
      ours.assign(t.rows * t.cols, 0.0f);  // (rows, cols)
      fill(t, ours.data());
      hf.resize(t.numel());  // HF's shape
      to_hf(t, ours.data(), hf.data());
      ok = std::fwrite(hf.data(), sizeof(float), hf.size(), f) == hf.size();
    }
  } catch (...) {  // a source that fails (a damaged checkpoint) leaves no half-written file
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    std::remove(tmp.c_str());
    TZ_THROW("writing '" + tmp + "' failed: " + std::strerror(err),
             "check the free space of the output's file system");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  TZ_CHECK(!ec, "cannot rename '" + tmp + "' to '" + path + "': " + ec.message(), "");
  // The rename itself durable: the directory's entry synced.
  const std::string parent = std::filesystem::absolute(path).parent_path().string();
  const int dir_fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY);
  const bool synced = dir_fd >= 0 && ::fsync(dir_fd) == 0;
  if (dir_fd >= 0) ::close(dir_fd);
  TZ_CHECK(synced, "cannot sync the directory '" + parent + "': " + std::strerror(errno),
           "check the output's file system");
}

nn::GPTConfig read_gpt2_safetensors_config(const std::string& path) {
  return config_of(path, read_header(path));
}

void load_gpt2_safetensors(const std::string& path, const nn::ParamLayout& layout,
                           float* host_params) {
  Gpt2SafetensorsRanges(path, layout).read(0, layout.total_numel(), host_params);
}

std::unique_ptr<ModelRanges> open_gpt2_safetensors_ranges(const std::string& path,
                                                          const nn::ParamLayout& layout) {
  return std::make_unique<Gpt2SafetensorsRanges>(path, layout);
}

Gpt2SafetensorsRanges::Gpt2SafetensorsRanges(const std::string& path, const nn::ParamLayout& layout,
                                             size_t block_floats, size_t skip_floats)
    : path_(path), layout_(layout), block_floats_(block_floats), skip_floats_(skip_floats) {
  TZ_CHECK(block_floats > 0, "Gpt2SafetensorsRanges of '" + path + "' given a block of 0 floats",
           "");
  const Header h = read_header(path);
  const nn::GPTConfig config = config_of(path, h);
  TZ_CHECK(
      layout.tp().size == 1 && nn::gpt_param_layout(config).total_numel() == layout.total_numel(),
      "safetensors file '" + path + "' (" + config.str() + ") does not match the model's layout",
      "build the model from the file's own shape (tensor parallel 1, every stage)");
  tensor_.resize(layout.tensors().size());
  file_offset_.assign(layout.tensors().size(), 0);
  std::vector<bool> found(layout.tensors().size(), false);
  size_t largest_transposed = 0;  // floats
  for (Gpt2Tensor& t : gpt2_tensors(config)) {
    const uint64_t begin = entry(path, h, t).first;
    const nn::ParamTensor* p = layout.find(t.kind, t.layer);
    TZ_CHECK(p != nullptr && p->numel == t.rows * t.cols,
             "tensor '" + t.name + "' of '" + path + "' does not fit the model's layout",
             "build the model from the file's own shape (tensor parallel 1, every stage)");
    const size_t i = static_cast<size_t>(p - layout.tensors().data());
    if (t.transpose) largest_transposed = std::max(largest_transposed, t.numel());
    file_offset_[i] = h.data_start + begin;
    tensor_[i] = std::move(t);
    found[i] = true;
  }
  for (size_t i = 0; i < found.size(); ++i)
    TZ_CHECK(
        found[i],
        "the model's tensor " + layout.tensors()[i].name() + " has no tensor in '" + path + "'",
        "give a GPT-2 model file");
  // Once, so that no read allocates and the buffer never grows past the bound.
  block_.reserve(std::min(block_floats_, largest_transposed));
  fd_ = open_input_file(path, "safetensors file", "check the path given to --load");
}

Gpt2SafetensorsRanges::~Gpt2SafetensorsRanges() {
  if (fd_ >= 0) ::close(fd_);
}

void Gpt2SafetensorsRanges::pread_tensor(size_t t, size_t offset, void* dst, size_t bytes) const {
  const std::string failed = detail::pread_all(fd_, dst, bytes, file_offset_[t] + offset);
  TZ_CHECK(failed.empty(),
           "cannot read tensor '" + tensor_[t].name + "' from safetensors file '" + path_ +
               "': " + failed,
           "the file is truncated or unreadable; re-copy or re-export it");
}

void Gpt2SafetensorsRanges::read(size_t begin, size_t count, float* out) const {
  TZ_CHECK(begin <= layout_.total_numel() && count <= layout_.total_numel() - begin,
           "range [" + std::to_string(begin) + ", +" + std::to_string(count) + ") of '" + path_ +
               "' is outside the model's " + std::to_string(layout_.total_numel()) + " elements",
           "");
  std::memset(out, 0, count * sizeof(float));  // padding, and wte's padded rows
  detail::for_each_tensor_part(
      layout_, begin, count,
      [&](size_t i, size_t first, size_t at, size_t n) { read_part(i, first, n, out + at); });
}

void Gpt2SafetensorsRanges::read_part(size_t i, size_t first, size_t n, float* out) const {
  const Gpt2Tensor& t = tensor_[i];
  if (t.transpose) {
    read_transposed(i, first, n, out);
    return;
  }
  // Ours and the file's in the same order; only the first kept_rows rows are in the file.
  const size_t kept = t.kept_rows * t.cols;
  if (first < kept)
    pread_tensor(i, first * sizeof(float), out, std::min(n, kept - first) * sizeof(float));
}

// Ours (R, C) is the file's (C, R): our element (r, c) is the file's (c, r). Elements [first,
// first + n) of ours are our rows [r0, r1), so file rows c in [c0, c1) (all C unless one of our
// rows), at file columns [r0, r1). Blocks of at most block_floats_ floats are read: when few of a
// file row's floats would be skipped, whole stretches of file rows in one pread (stride R), else
// each file row's needed columns alone (stride w).
void Gpt2SafetensorsRanges::read_transposed(size_t i, size_t first, size_t n, float* out) const {
  const size_t R = tensor_[i].rows, C = tensor_[i].cols;
  const size_t last = first + n - 1;
  const size_t r0 = first / C, r1 = last / C + 1;
  const bool one_row = r0 + 1 == r1;
  const size_t c0 = one_row ? first % C : 0, c1 = one_row ? last % C + 1 : C;
  for (size_t ra = r0; ra < r1;) {
    const size_t w = std::min(r1 - ra, block_floats_), rb = ra + w;
    const bool span = R - w <= std::max(w, skip_floats_);
    const size_t stride = span ? R : w;
    const size_t per_block = span ? 1 + (block_floats_ - w) / R : block_floats_ / w;  // file rows
    for (size_t ca = c0; ca < c1;) {
      const size_t cb = std::min(c1, ca + per_block);
      if (span) {
        block_.resize((cb - ca - 1) * R + w);  // (file rows cb - ca, stride R)
        pread_tensor(i, (ca * R + ra) * sizeof(float), block_.data(),
                     block_.size() * sizeof(float));
      } else {
        block_.resize((cb - ca) * w);  // (file rows cb - ca, w)
        for (size_t c = ca; c < cb; ++c)
          pread_tensor(i, (c * R + ra) * sizeof(float), block_.data() + (c - ca) * w,
                       w * sizeof(float));
      }
      for (size_t r = ra; r < rb; ++r) {
        // Our row r's columns inside [first, last] and this block.
        const size_t lo = std::max(ca, r == r0 ? first % C : 0);
        const size_t hi = std::min(cb, r + 1 == r1 ? last % C + 1 : C);
        for (size_t c = lo; c < hi; ++c)
          out[r * C + c - first] = block_[(c - ca) * stride + (r - ra)];
      }
      ca = cb;
    }
    ra = rb;
  }
}

bool is_safetensors_path(const std::string& path) {
  const std::string ext = ".safetensors";
  if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
    return true;
  // Any other name (export -o model.st): a safetensors file begins with its header's length (8
  // bytes, little-endian) and the header's '{'. An llm.c checkpoint begins with its magic and
  // version, 3 x 2^32 and more as that length. Only a regular file is opened (never a FIFO).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 10) return false;
  unsigned char head[9] = {};
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  const bool read = std::fread(head, 1, sizeof head, f) == sizeof head;
  std::fclose(f);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | head[i];
  return read && head[8] == '{' && header_bytes >= 2 &&
         header_bytes <= static_cast<uint64_t>(st.st_size) - 8;
}

}  // namespace tierzero::train
