// Reading a Hugging Face model directory (see hf_directory.hpp): config.json through the
// architecture's table, the shards found through model.safetensors.index.json (or the one
// model.safetensors), every tensor checked in its shard, then ranges read piece by piece.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "model_file_io.hpp"
#include "safetensors_header.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/input_file.hpp"
#include "tierzero/core/json_text.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/train/hf_directory.hpp"

namespace tierzero::train {

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";
constexpr size_t kMaxJsonBytes = size_t{64} << 20;  // a 10^5-tensor index is ~10 MB

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  const std::string text =
      read_input_file(path, what, "give --load a Hugging Face model directory", kMaxJsonBytes);
  nlohmann::json j = parse_json_text(text, "'" + path + "'", "the file is damaged; re-export it");
  TZ_CHECK(j.is_object(), "'" + path + "' is not a JSON object", "the file is damaged");
  return j;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The safetensors dtype names this reader converts.
bool dtype_of(const std::string& name, DType* out) {
  if (name == "F32")
    *out = DType::f32;
  else if (name == "BF16")
    *out = DType::bf16;
  else if (name == "F16")
    *out = DType::f16;
  else
    return false;
  return true;
}

// One element of the file's dtype as fp32 (little-endian, as the format is).
inline float element_f32(const uint8_t* p, DType d) {
  if (d == DType::f32) {
    float f;
    std::memcpy(&f, p, sizeof f);
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return d == DType::bf16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);
}

std::string shape_str(const std::vector<size_t>& s) {
  return nlohmann::json(s).dump();
}

// What the directory holds: its model and where each HF tensor of it lies.
struct Scan {
  nn::GPTConfig config;
  std::vector<std::string> shard_paths;
  std::vector<HfDirectoryRanges::Found> found;  // the architecture's tensors, in its order
};

// tensor name (as in the files) -> shard file name; one entry per tensor.
using WeightMap = std::map<std::string, std::string>;

WeightMap read_index(const std::string& path) {
  const nlohmann::json j = read_json_file(path, "model index");
  TZ_CHECK(j.contains("weight_map") && j.at("weight_map").is_object(),
           "'" + path + "' lacks key 'weight_map' (an object of tensor name: shard file)",
           "the index is damaged; re-export the model");
  if (j.contains("metadata")) {
    const nlohmann::json& m = j.at("metadata");
    TZ_CHECK(
        m.is_object() && (!m.contains("total_size") || m.at("total_size").is_number_unsigned()),
        "'" + path + "' key 'metadata' must be an object whose total_size is a byte count",
        "the index is damaged; re-export the model");
  }
  WeightMap map;
  for (const auto& [name, shard] : j.at("weight_map").items()) {
    const bool plain = shard.is_string() && !shard.get<std::string>().empty() &&
                       shard.get<std::string>().find('/') == std::string::npos &&
                       shard.get<std::string>() != "." && shard.get<std::string>() != "..";
    TZ_CHECK(plain,
             "'" + path + "' weight_map entry '" + detail::cut(name) +
                 "' = " + detail::cut(shard.dump()) + " is not a file name in the directory",
             "each tensor must name a shard file beside the index");
    map.emplace(name, shard.get<std::string>());
  }
  return map;
}

// The architecture a config.json names ("architectures", else its model_type), or Error.
const HfArchitecture& architecture_of(const nlohmann::json& cfg, const std::string& config_path) {
  const nlohmann::json archs = cfg.value("architectures", nlohmann::json());
  const nlohmann::json type = cfg.value("model_type", nlohmann::json());
  const HfArchitecture* by_type =
      type.is_string() ? hf_architecture_by_model_type(type.get<std::string>()) : nullptr;
  const bool named = archs.is_array() && !archs.empty() && archs[0].is_string();
  TZ_CHECK(named || by_type != nullptr,
           "'" + config_path +
               "' lacks key 'architectures' (a list naming the model class) and its model_type " +
               type.dump() + " names none this build knows",
           "add e.g. \"architectures\": [\"GPT2LMHeadModel\"]");
  return named ? hf_architecture(archs[0].get<std::string>(), config_path) : *by_type;
}

}  // namespace

nn::GPTConfig read_hf_config_file(const std::string& config_path) {
  const nlohmann::json cfg = read_json_file(config_path, "model config");
  return architecture_of(cfg, config_path).config_from_json(cfg, config_path);
}

namespace {

class Scanner {
 public:
  explicit Scanner(const std::string& dir) : dir_(dir) {}

  Scan run() {
    const std::string config_path = dir_ + "/config.json";
    // A training checkpoint (a step directory, or a save directory with its `latest`) is the
    // likeliest other directory to be given here: say what to do with one.
    const bool checkpoint = file_exists(dir_ + "/manifest.json") || file_exists(dir_ + "/latest");
    TZ_CHECK(file_exists(config_path), "'" + dir_ + "' has no config.json",
             checkpoint ? "it is a training checkpoint: give it to --resume, or write its model "
                          "with `tierzero export " +
                              dir_ + " -o model.safetensors` and --load that"
                        : "give --load a Hugging Face model directory (config.json and "
                          "model.safetensors)");
    const nlohmann::json cfg = read_json_file(config_path, "model config");
    const HfArchitecture& arch = architecture_of(cfg, config_path);
    Scan s;
    s.config = arch.config_from_json(cfg, config_path);
    sharded_ = file_exists(dir_ + "/" + kIndexName);
    if (sharded_) {
      index_ = read_index(dir_ + "/" + kIndexName);
    } else {
      TZ_CHECK(file_exists(dir_ + "/" + kSingleName),
               "'" + dir_ + "' has neither " + kSingleName + " nor " + kIndexName,
               "give --load a Hugging Face model directory with its weights");
      for (const auto& [name, e] : header(kSingleName).entries) index_.emplace(name, kSingleName);
    }
    std::set<std::string> used;
    for (const HfTensor& t : arch.tensors(s.config)) s.found.push_back(find(arch, t, &used));
    refuse_unknown(arch, used);
    s.shard_paths.resize(shard_index_.size());
    for (const auto& [file, i] : shard_index_) s.shard_paths[i] = dir_ + "/" + file;
    return s;
  }

 private:
  const detail::Header& header(const std::string& file) {
    auto it = headers_.find(file);
    if (it == headers_.end())
      it = headers_.emplace(file, detail::read_header(dir_ + "/" + file)).first;
    return it->second;
  }

  // The file name of `t` (some prefix + its name) in the index, its shard's entry checked.
  HfDirectoryRanges::Found find(const HfArchitecture& arch, const HfTensor& t,
                                std::set<std::string>* used) {
    auto it = index_.end();
    for (const std::string& prefix : arch.prefixes)
      if ((it = index_.find(prefix + t.name)) != index_.end()) break;
    const std::string listed_in = sharded_ ? kIndexName : kSingleName;
    TZ_CHECK(it != index_.end(),
             "'" + dir_ + "/" + listed_in + "' lacks tensor " + arch.prefixes[0] + t.name +
                 " (needed for " + arch.name + " as config.json shapes it)",
             "give the weights that were saved with this config.json");
    used->insert(it->first);
    const std::string& file = it->second;
    const std::string path = dir_ + "/" + file;
    const detail::Header& h = header(file);
    const auto e = h.entries.find(it->first);
    TZ_CHECK(e != h.entries.end(),
             "'" + path + "' lacks tensor " + it->first + " (listed in " + kIndexName + ")",
             "the shard does not belong to this index; re-copy the directory");
    HfDirectoryRanges::Found p;
    p.tensor = t;
    TZ_CHECK(dtype_of(e->second.dtype, &p.dtype),
             "tensor " + it->first + " of '" + path + "' is " + e->second.dtype +
                 ", expected BF16, F16 or F32",
             "convert the model to bfloat16, float16 or float32");
    TZ_CHECK(e->second.shape == t.shape,
             "tensor " + it->first + " of '" + path + "' has shape " + shape_str(e->second.shape) +
                 ", expected " + shape_str(t.shape) + " (from config.json)",
             "config.json and the weights disagree; give the config saved with them");
    p.shard = shard_index_.emplace(file, shard_index_.size()).first->second;
    p.offset = h.data_start + e->second.begin;
    return p;
  }

  // Every tensor the files list is one of the architecture's or one it may ignore: anything else
  // would be dropped silently.
  void refuse_unknown(const HfArchitecture& arch, const std::set<std::string>& used) const {
    for (const auto& [name, file] : index_) {
      if (used.count(name)) continue;
      bool ignorable = false;
      for (const std::string& prefix : arch.prefixes)
        if (name.compare(0, prefix.size(), prefix) == 0 &&
            arch.ignorable(name.substr(prefix.size())))
          ignorable = true;
      TZ_CHECK(ignorable,
               "'" + dir_ + "/" + file + "' holds tensor " + detail::cut(name) + ", which " +
                   arch.name + " as config.json shapes it does not have",
               "config.json and the weights disagree, or the model has parts this build "
               "does not load");
    }
  }

  std::string dir_;
  bool sharded_ = false;
  WeightMap index_;
  std::map<std::string, detail::Header> headers_;  // by shard file name
  std::map<std::string, size_t> shard_index_;      // shard file name -> index (used ones)
};

}  // namespace

bool is_hf_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

nn::GPTConfig read_hf_directory_config(const std::string& dir) {
  return Scanner(dir).run().config;
}

std::unique_ptr<ModelRanges> open_hf_directory_ranges(const std::string& dir,
                                                      const nn::ParamLayout& layout) {
  return std::make_unique<HfDirectoryRanges>(dir, layout);
}

HfDirectoryRanges::HfDirectoryRanges(const std::string& dir, const nn::ParamLayout& layout,
                                     size_t block_floats)
    : dir_(dir), layout_(layout), block_floats_(block_floats) {
  TZ_CHECK(block_floats > 0, "HfDirectoryRanges of '" + dir + "' given a block of 0 floats", "");
  Scan s = Scanner(dir).run();
  TZ_CHECK(
      layout.tp().size == 1 && nn::gpt_param_layout(s.config).total_numel() == layout.total_numel(),
      "model directory '" + dir + "' (" + s.config.str() + ") does not match the model's layout",
      "build the model from the directory's own shape (tensor parallel 1, every stage)");
  found_ = std::move(s.found);
  pieces_.resize(layout.tensors().size());
  size_t largest = 0;  // elements of a tensor read through the block
  for (const Found& f : found_) {
    const HfTensor& h = f.tensor;
    const nn::ParamTensor* t = layout.find(h.kind, h.layer);
    TZ_CHECK(t != nullptr && t->numel % h.cols == 0,
             "tensor " + h.name + " of '" + dir + "' does not fit the model's layout",
             "build the model from the directory's own shape");
    for (const HfRowSpan& span : h.spans) {
      TZ_CHECK(span.hf_row + span.rows <= h.rows && (span.row + span.rows) * h.cols <= t->numel,
               "tensor " + h.name + " of '" + dir + "' does not fit the model's layout",
               "build the model from the directory's own shape");
      pieces_[static_cast<size_t>(t - layout.tensors().data())].push_back(Piece{&f, span});
    }
    if (h.transpose || f.dtype != DType::f32) largest = std::max(largest, h.numel());
  }
  for (size_t i = 0; i < pieces_.size(); ++i)
    TZ_CHECK(!pieces_[i].empty(),
             "the model's tensor " + layout.tensors()[i].name() + " has no tensor in '" + dir + "'",
             "give a model directory of the same architecture");
  block_.reserve(std::min(block_floats_, largest) * sizeof(float));  // never grows past it
  shard_path_ = std::move(s.shard_paths);
  for (const std::string& path : shard_path_)
    fd_.push_back(open_input_file(path, "model shard", "check the directory given to --load"));
}

HfDirectoryRanges::~HfDirectoryRanges() {
  for (int fd : fd_) ::close(fd);
}

void HfDirectoryRanges::pread_piece(const Piece& p, size_t at, size_t count, void* dst) const {
  const Found& f = *p.found;
  const size_t es = dtype_size(f.dtype);
  const std::string failed = detail::pread_all(fd_[f.shard], dst, count * es, f.offset + at * es);
  TZ_CHECK(
      failed.empty(),
      "cannot read tensor " + f.tensor.name + " from '" + shard_path_[f.shard] + "': " + failed,
      "the file is truncated or unreadable; re-copy or re-export it");
}

void HfDirectoryRanges::read(size_t begin, size_t count, float* out) const {
  TZ_CHECK(begin <= layout_.total_numel() && count <= layout_.total_numel() - begin,
           "range [" + std::to_string(begin) + ", +" + std::to_string(count) + ") of '" + dir_ +
               "' is outside the model's " + std::to_string(layout_.total_numel()) + " elements",
           "");
  std::memset(out, 0, count * sizeof(float));  // padding, and rows no HF tensor fills
  detail::for_each_tensor_part(
      layout_, begin, count, [&](size_t i, size_t first, size_t at, size_t n) {
        for (const Piece& p : pieces_[i]) {
          // The span fills our elements [lo, hi) of the tensor from its HF tensor's elements
          // starting at `hf`.
          const size_t cols = p.found->tensor.cols;
          const size_t lo = p.span.row * cols, hi = lo + p.span.rows * cols;
          const size_t hf = p.span.hf_row * cols;
          const size_t from = std::max(first, lo), to = std::min(first + n, hi);
          if (from < to) read_piece(p, hf + (from - lo), to - from, out + at + (from - first));
        }
      });
}

void HfDirectoryRanges::read_piece(const Piece& p, size_t first, size_t n, float* out) const {
  const DType dtype = p.found->dtype;
  if (p.found->tensor.transpose) {
    read_transposed(p, first, n, out);
    return;
  }
  if (dtype == DType::f32) {  // ours and the file's in the same order and type
    pread_piece(p, first, n, out);
    return;
  }
  for (size_t done = 0; done < n;) {
    const size_t m = std::min(n - done, block_floats_);
    block_.resize(m * dtype_size(dtype));
    pread_piece(p, first + done, m, block_.data());
    convert_to_f32(out + done, block_.data(), dtype, m);
    done += m;
  }
}

// Ours (R, C) is the file's (C, R): our element (r, c) is the file's (c, r). As
// Gpt2SafetensorsRanges::read_transposed, with elements of the file's dtype: blocks of at most
// block_floats_ elements, whole stretches of file rows in one pread when few of a row's elements
// would be skipped, else each file row's needed columns alone.
void HfDirectoryRanges::read_transposed(const Piece& p, size_t first, size_t n, float* out) const {
  constexpr size_t kSkip = 1024;  // elements a pread costs about as much as
  const DType dtype = p.found->dtype;
  const size_t R = p.found->tensor.rows, C = p.found->tensor.cols, es = dtype_size(dtype);
  const size_t last = first + n - 1;
  const size_t r0 = first / C, r1 = last / C + 1;
  const bool one_row = r0 + 1 == r1;
  const size_t c0 = one_row ? first % C : 0, c1 = one_row ? last % C + 1 : C;
  for (size_t ra = r0; ra < r1;) {
    const size_t w = std::min(r1 - ra, block_floats_), rb = ra + w;
    const bool span = R - w <= std::max(w, kSkip);
    const size_t stride = span ? R : w;
    const size_t per_block = span ? 1 + (block_floats_ - w) / R : block_floats_ / w;
    for (size_t ca = c0; ca < c1;) {
      const size_t cb = std::min(c1, ca + per_block);
      if (span) {
        block_.resize(((cb - ca - 1) * R + w) * es);  // (file rows cb - ca, stride R)
        pread_piece(p, ca * R + ra, (cb - ca - 1) * R + w, block_.data());
      } else {
        block_.resize((cb - ca) * w * es);  // (file rows cb - ca, w)
        for (size_t c = ca; c < cb; ++c)
          pread_piece(p, c * R + ra, w, block_.data() + (c - ca) * w * es);
      }
      for (size_t r = ra; r < rb; ++r) {
        const size_t lo = std::max(ca, r == r0 ? first % C : 0);
        const size_t hi = std::min(cb, r + 1 == r1 ? last % C + 1 : C);
        for (size_t c = lo; c < hi; ++c)
          out[r * C + c - first] =
              element_f32(block_.data() + ((c - ca) * stride + (r - ra)) * es, dtype);
      }
      ca = cb;
    }
    ra = rb;
  }
}

}  // namespace tierzero::train
