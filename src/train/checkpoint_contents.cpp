// A checkpoint's manifest and rank files read and checked as one whole (checkpoint_contents.hpp).
#include "tierzero/train/checkpoint_contents.hpp"

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "checkpoint_fields.hpp"
#include "tierzero/core/dtype.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/train/store_provider.hpp"

namespace tierzero::train {

namespace fs = std::filesystem;
using checkpoint_fields::Fields;

namespace {

constexpr const char* kFormat = "tierzero-checkpoint";
constexpr int64_t kVersion = 1;
constexpr int64_t kMaxStep = int64_t{1} << 48;   // steps: far beyond any run, far from overflow
constexpr int64_t kMaxElems = int64_t{1} << 50;  // elements of one unit or tensor
constexpr int64_t kMaxRanks = 1 << 20;
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
constexpr const char* kIncomplete =
    "the checkpoint is incomplete (a rank's files missing or replaced); resume from a complete "
    "one";

std::string rank_file_name(int rank, const char* ext) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.%s", rank, ext);
  return name;
}

size_t kind_dtype_bytes(const Fields& b, const std::string& dtype) {
  if (dtype == "fp32") return 4;
  if (dtype == "bf16" || dtype == "fp16") return 2;
  b.fail("dtype", checkpoint_fields::show(dtype), "one of \"fp32\", \"bf16\", \"fp16\"");
}

void check_kind(const Fields& b, const std::string& kind) {
  static const std::set<std::string> kinds = {"params_full", "param_shard", "master", "adam_m",
                                              "adam_v"};
  if (kinds.count(kind) == 0)
    b.fail("kind", checkpoint_fields::show(kind),
           "one of params_full, param_shard, master, adam_m, adam_v");
}

// Block i of a rank file; blocks lie back to back from the file's start (as written).
CheckpointBlock read_block_fields(const Fields& r, size_t i, size_t offset, size_t file_bytes) {
  const Fields b = r.element("blocks", i);
  CheckpointBlock blk;
  blk.unit = b.string("unit");
  blk.kind = b.string("kind");
  check_kind(b, blk.kind);
  blk.dtype = b.string("dtype");
  const size_t elem = kind_dtype_bytes(b, blk.dtype);
  blk.name = b.string("name", 600);
  if (blk.name != blk.unit + "." + blk.kind)
    b.fail("name", checkpoint_fields::show(blk.name), "\"" + blk.unit + "." + blk.kind + "\"");
  blk.tier = b.string("tier", 64);
  blk.begin = static_cast<size_t>(b.integer("begin", 0, kMaxElems));
  blk.elems = static_cast<size_t>(b.integer("elems", 0, kMaxElems));
  const int64_t at = b.integer("offset", 0, kMaxInt64);
  if (static_cast<size_t>(at) != offset)
    b.fail("offset", std::to_string(at),
           std::to_string(offset) + " (blocks lie back to back from byte 0)");
  blk.offset = offset;
  blk.bytes = static_cast<size_t>(b.integer("bytes", 0, static_cast<int64_t>(file_bytes - offset)));
  if (blk.bytes != blk.elems * elem)
    b.fail("bytes", std::to_string(blk.bytes),
           std::to_string(blk.elems) + " elements x " + std::to_string(elem) + " bytes of " +
               blk.dtype + " = " + std::to_string(blk.elems * elem));
  blk.crc = static_cast<uint32_t>(b.integer("crc32c", 0, 0xffffffffLL));
  return blk;
}

CheckpointTensor read_tensor_fields(const Fields& r, size_t i, int64_t tp) {
  const Fields t = r.element("tensors", i);
  CheckpointTensor out;
  out.name = t.string("tensor");
  out.unit = t.string("unit");
  out.offset = static_cast<size_t>(t.integer("offset", 0, kMaxElems));
  const nlohmann::json& shape = t.array("shape");
  if (shape.empty() || shape.size() > 8)
    t.fail("shape", checkpoint_fields::show(shape), "an array of 1 to 8 extents");
  int64_t numel = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t extent =
        t.integer_value(shape[d], "shape[" + std::to_string(d) + "]", 0, kMaxElems);
    if (extent != 0 && numel > kMaxElems / extent)
      t.fail("shape", checkpoint_fields::show(shape),
             "at most " + std::to_string(kMaxElems) + " elements");
    numel *= extent;
  }
  out.numel = static_cast<size_t>(numel);
  out.tp_size = static_cast<int>(t.integer("tp_size", tp, tp));
  out.tp_rank = static_cast<int>(t.integer("tp_rank", 0, tp - 1));
  return out;
}

CheckpointRankFile read_rank_file(const std::string& dir, int rank, const CheckpointManifest& m) {
  CheckpointRankFile rf;
  rf.rank = rank;
  rf.json_path = dir + "/" + rank_file_name(rank, "json");
  rf.bin_path = dir + "/" + rank_file_name(rank, "bin");
  const std::string lists = " (the manifest lists " + std::to_string(m.ranks) + " ranks)";
  for (const std::string& p : {rf.json_path, rf.bin_path})
    TZ_CHECK(fs::is_regular_file(p),
             "checkpoint '" + dir + "' lacks rank " + std::to_string(rank) + "'s files: '" + p +
                 "' is missing" + lists,
             kIncomplete);
  const nlohmann::json j = checkpoint_fields::read_json(rf.json_path);
  const Fields r(rf.json_path, j);
  r.integer("rank", rank, rank);
  const std::string file = r.string("file");
  if (file != rank_file_name(rank, "bin"))
    r.fail("file", checkpoint_fields::show(file), "\"" + rank_file_name(rank, "bin") + "\"");
  rf.file_bytes = static_cast<size_t>(r.integer("file_bytes", 0, kMaxInt64));
  std::error_code ec;
  const uintmax_t have = fs::file_size(rf.bin_path, ec);
  TZ_CHECK(!ec, "checkpoint shard '" + rf.bin_path + "' is unreadable: " + ec.message(), "");
  TZ_CHECK(have == rf.file_bytes,
           "checkpoint shard '" + rf.bin_path + "' has " + std::to_string(have) +
               " bytes, its manifest says " + std::to_string(rf.file_bytes) +
               " (truncated or replaced)",
           "the file is damaged; resume from an older checkpoint");
  const Fields data = r.object("data");
  rf.data.shard = static_cast<size_t>(data.integer("shard", 0, kMaxElems));
  rf.data.position = static_cast<size_t>(data.integer("position", 0, kMaxInt64 / 2));
  std::set<std::string> names;
  size_t offset = 0;
  for (size_t i = 0; i < r.array("blocks").size(); ++i) {
    CheckpointBlock b = read_block_fields(r, i, offset, rf.file_bytes);
    if (!names.insert(b.name).second)
      r.fail("blocks[" + std::to_string(i) + "].name", checkpoint_fields::show(b.name),
             "a name no other block of the file has");
    offset += b.bytes;
    rf.blocks.push_back(std::move(b));
  }
  if (offset != rf.file_bytes)
    r.fail("file_bytes", std::to_string(rf.file_bytes),
           std::to_string(offset) + ", where its blocks end");
  const int64_t tp = m.identity.value("tp", 1);
  for (size_t i = 0; i < r.array("tensors").size(); ++i) {
    rf.tensors.push_back(read_tensor_fields(r, i, tp));
    if (rf.tensors.back().tp_rank != rf.tensors.front().tp_rank)
      r.fail("tensors[" + std::to_string(i) + "].tp_rank",
             std::to_string(rf.tensors.back().tp_rank),
             std::to_string(rf.tensors.front().tp_rank) + " as the file's other tensors");
  }
  if (!rf.tensors.empty()) rf.tp_rank = rf.tensors.front().tp_rank;
  return rf;
}

// Every unit's state of each kind covers [0, the unit's extent) once: ranges sorted, replicas
// (the same range on several ranks) counted once, no gap, no partial overlap. Blocks may reach
// past the extent (shard padding).
void check_coverage(const CheckpointContents& c) {
  using UnitKey = std::pair<int, std::string>;  // tp rank, unit
  std::map<UnitKey, size_t> extent;             // from the tensors the rank files list
  for (const CheckpointRankFile& r : c.ranks)
    for (const CheckpointTensor& t : r.tensors) {
      size_t& e = extent[{r.tp_rank, t.unit}];
      e = std::max(e, t.offset + t.numel);
    }
  struct Range {
    size_t begin, end;
    int rank;
  };
  using GroupKey = std::tuple<int, std::string, std::string, std::string>;  // tp, unit, kind, dtype
  std::map<GroupKey, std::vector<Range>> groups;
  for (const CheckpointRankFile& r : c.ranks)
    for (const CheckpointBlock& b : r.blocks)
      if (b.elems > 0)
        groups[{r.tp_rank, b.unit, b.kind, b.dtype}].push_back(
            {b.begin, b.begin + b.elems, r.rank});
  for (auto& [key, ranges] : groups) {
    const auto& [tp, unit, kind, dtype] = key;
    const std::string what = "checkpoint '" + c.dir + "': unit '" + unit + "' " + kind + " (" +
                             dtype + (tp > 0 ? ", tp rank " + std::to_string(tp) : "") + ")";
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
      return std::tie(a.begin, a.end, a.rank) < std::tie(b.begin, b.end, b.rank);
    });
    size_t covered = 0;
    const Range* last = nullptr;
    for (const Range& r : ranges) {
      if (last && r.begin == last->begin && r.end == last->end) continue;  // a replica
      TZ_CHECK(r.begin <= covered,
               what + ": elements [" + std::to_string(covered) + ", " + std::to_string(r.begin) +
                   ") are in no rank's file",
               kIncomplete);
      TZ_CHECK(r.begin == covered,
               what + ": rank " + std::to_string(r.rank) + "'s range [" + std::to_string(r.begin) +
                   ", " + std::to_string(r.end) + ") overlaps rank " +
                   std::to_string(last ? last->rank : 0) + "'s [" +
                   std::to_string(last ? last->begin : 0) + ", " +
                   std::to_string(last ? last->end : 0) + ")",
               "the rank files disagree; resume from another checkpoint");
      covered = r.end;
      last = &r;
    }
    const auto e = extent.find({tp, unit});
    if (e != extent.end())
      TZ_CHECK(covered >= e->second,
               what + ": elements [" + std::to_string(covered) + ", " + std::to_string(e->second) +
                   ") of the unit's " + std::to_string(e->second) + " are in no rank's file",
               kIncomplete);
  }
}

}  // namespace

std::string checkpoint_step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

int64_t checkpoint_step_of(const std::string& name) {
  if (name.size() < 13 || name.size() > 5 + 18 || name.rfind("step-", 0) != 0) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return checkpoint_step_name(step) == name ? step : -1;
}

CheckpointManifest read_checkpoint_manifest_checked(const std::string& step_dir) {
  CheckpointManifest m;
  m.path = step_dir + "/manifest.json";
  const nlohmann::json j = checkpoint_fields::read_json(m.path);
  const Fields f(m.path, j);
  const std::string format = f.string("format");
  if (format != kFormat)
    f.fail("format", checkpoint_fields::show(format),
           std::string("\"") + kFormat + "\" (a directory written by train --save-dir)");
  f.integer("version", kVersion, kVersion);
  m.step = f.integer("step", 0, kMaxStep);
  const int64_t named = checkpoint_step_of(fs::path(step_dir).filename().string());
  if (named >= 0 && named != m.step)
    f.fail("step", std::to_string(m.step),
           std::to_string(named) + ", the step its directory is named after");
  m.optimizer_steps = f.integer("optimizer_steps", 0, m.step);
  const Fields s = f.object("loss_scaler");
  m.scaler.scale = s.number("scale", DBL_MIN, DBL_MAX);
  m.scaler.skipped = s.integer("skipped", 0, m.step);
  if (m.optimizer_steps + m.scaler.skipped != m.step)
    f.fail("optimizer_steps", std::to_string(m.optimizer_steps),
           std::to_string(m.step - m.scaler.skipped) + ": step " + std::to_string(m.step) +
               " less the " + std::to_string(m.scaler.skipped) +
               " skipped ones (loss_scaler.skipped)");
  m.scaler.good_steps = s.integer("good_steps", 0, m.step);
  m.scaler.hysteresis_left = s.integer("hysteresis_left", 0, std::numeric_limits<int32_t>::max());
  if (f.has("saved_at_ns")) m.saved_at_ns = f.integer("saved_at_ns", 0, kMaxInt64);
  if (f.has("lr_schedule_steps")) m.lr_schedule_steps = f.integer("lr_schedule_steps", 0, kMaxStep);
  const Fields id = f.object("identity");
  m.identity = f.get("identity");
  m.ranks = static_cast<int>(id.integer("ranks", 1, kMaxRanks));
  int64_t product = 1;  // each factor <= ranks: no overflow before the check
  for (const char* key : {"dp", "tp", "pp", "sp"})
    if ((product *= id.integer(key, 1, m.ranks)) > m.ranks) break;
  if (product != m.ranks)
    id.fail("ranks", std::to_string(m.ranks),
            "dp x tp x pp x sp (" + std::to_string(product) + ")");
  id.integer("zero_stage", 0, 3);
  id.integer("blocks_per_unit", 1, kMaxElems);
  return m;
}

CheckpointContents open_checkpoint(const std::string& step_dir) {
  CheckpointContents c;
  c.dir = step_dir;
  c.manifest = read_checkpoint_manifest_checked(step_dir);
  for (int r = 0; r < c.manifest.ranks; ++r)
    c.ranks.push_back(read_rank_file(step_dir, r, c.manifest));
  check_coverage(c);
  return c;
}

namespace {

// A Llama-family model's architecture as the checkpoint identity records it
// (Trainer::checkpoint_identity writes it through model_arch_json).
nn::GPTArch model_arch_from(const Fields& f) {
  nn::GPTArch a;
  auto choice = [&](const char* key, const char* first, const char* second) {
    const std::string v = f.string(key);
    if (v != first && v != second) f.fail(key, v, std::string(first) + " or " + second);
    return v == second;
  };
  auto flag = [&](const char* key) { return f.integer(key, 0, 1) == 1; };
  a.norm = choice("norm", "layernorm", "rmsnorm") ? nn::NormKind::rmsnorm : nn::NormKind::layernorm;
  a.norm_eps = f.number("norm_eps", 1e-12, 1.0);
  a.positions =
      choice("positions", "learned", "rope") ? nn::PositionKind::rope : nn::PositionKind::learned;
  a.rope_theta = f.number("rope_theta", 1.0, 1e12);
  a.rope_scaling.llama3 = flag("rope_llama3");
  a.rope_scaling.factor = f.number("rope_factor", 1e-6, 1e6);
  a.rope_scaling.low_freq_factor = f.number("rope_low_freq_factor", 1e-6, 1e6);
  a.rope_scaling.high_freq_factor = f.number("rope_high_freq_factor", 1e-6, 1e6);
  a.rope_scaling.original_max_position_embeddings =
      static_cast<size_t>(f.integer("rope_original_max", 1, 1 << 24));
  a.mlp = choice("mlp", "gelu", "swiglu") ? nn::MlpKind::swiglu : nn::MlpKind::gelu;
  a.intermediate_size = static_cast<size_t>(f.integer("intermediate_size", 0, 1 << 24));
  a.num_kv_heads = static_cast<size_t>(f.integer("num_kv_heads", 0, 1 << 16));
  a.head_dim = static_cast<size_t>(f.integer("head_dim", 0, 1 << 16));
  a.qkv_bias = flag("qkv_bias");
  a.linear_bias = flag("linear_bias");
  a.tie_embeddings = flag("tie_embeddings");
  return a;
}

}  // namespace

nn::GPTConfig checkpoint_model(const CheckpointContents& c) {
  const Fields id(c.manifest.path, c.manifest.identity, "identity");
  const Fields s = id.object("model_shape");
  nn::GPTConfig g;
  g.max_seq_len = static_cast<size_t>(s.integer("max_seq_len", 1, 1 << 24));
  g.vocab_size = static_cast<size_t>(s.integer("vocab_size", 1, 1 << 26));
  g.padded_vocab_size =
      static_cast<size_t>(s.integer("padded_vocab_size", static_cast<int64_t>(g.vocab_size),
                                    static_cast<int64_t>(g.vocab_size) + (1 << 20)));
  g.num_layers = static_cast<size_t>(s.integer("num_layers", 1, 1 << 16));
  g.num_heads = static_cast<size_t>(s.integer("num_heads", 1, 1 << 16));
  g.channels = static_cast<size_t>(s.integer("channels", 1, 1 << 20));
  if (id.has("model_arch")) g.arch = model_arch_from(id.object("model_arch"));
  if (g.is_gpt2() && g.channels % g.num_heads != 0)
    s.fail("channels", std::to_string(g.channels),
           "a multiple of num_heads (" + std::to_string(g.num_heads) + ")");
  // The parameter count (so the layout is never built for a shape its files cannot hold), then
  // every tensor where the rank files say it is.
  const size_t C = g.channels, L = g.num_layers;
  const size_t params =  // at least (the padded rows aside): bounded by the limits above
      g.is_gpt2() ? g.vocab_size * C + g.max_seq_len * C + L * (12 * C * C + 13 * C) + 2 * C
                  : g.vocab_size * C;
  const int64_t want = id.integer("parameters", 1, kMaxElems);
  size_t data = 0;
  for (const CheckpointRankFile& r : c.ranks) data += r.file_bytes;
  if (params > data / sizeof(float))
    s.fail("channels", std::to_string(C),
           "a model whose fp32 values fit in the checkpoint's " + std::to_string(data) + " bytes");
  // Every tensor-parallel rank's layout: its pieces' shapes, and where the rank files must list
  // them (a tp rank's tensors may be spread over several rank files: one per pipeline stage).
  const auto tp = static_cast<size_t>(id.integer("tp", 1, c.manifest.ranks));
  std::vector<nn::ParamLayout> layouts;
  size_t whole = 0;
  try {
    whole = nn::gpt_param_layout(g).parameter_count();
    for (size_t r = 0; r < tp; ++r) layouts.push_back(nn::gpt_param_layout(g, {tp, r}));
  } catch (const Error& e) {
    TZ_THROW("checkpoint file '" + c.manifest.path + "': identity.model_shape " + g.str() +
                 (tp > 1 ? " at tp " + std::to_string(tp) : "") +
                 " cannot be built: " + e.what_failed(),
             "the file is damaged or was edited; export another checkpoint");
  }
  if (static_cast<int64_t>(whole) != want)
    id.fail("parameters", std::to_string(want),
            std::to_string(whole) + ", the parameters of model_shape");
  std::map<std::pair<int, std::string>, const CheckpointTensor*> listed;  // (tp rank, name)
  for (const CheckpointRankFile& r : c.ranks)
    for (const CheckpointTensor& t : r.tensors)
      listed.emplace(std::make_pair(t.tp_rank, t.name), &t);
  // Written without its tensors' places: the tp 1 layout is the only one it can be read as.
  if (listed.empty()) {
    TZ_CHECK(tp == 1,
             "checkpoint '" + c.dir + "' holds tensor-parallel pieces (tp " + std::to_string(tp) +
                 ") but its rank files list no tensors, so which piece each holds is unknown",
             "it was written before checkpoints recorded their tensors; save the model with "
             "train --save model.bin from a run resumed from it");
    return g;
  }
  const auto bpu = static_cast<size_t>(id.integer("blocks_per_unit", 1, kMaxElems));
  for (size_t r = 0; r < tp; ++r) {
    const nn::ParamLayout& layout = layouts[r];
    const std::string piece = tp > 1 ? " (tp rank " + std::to_string(r) + ")" : "";
    const UnitGrouping units = group_units(layout, bpu);
    for (const nn::ParamTensor& t : layout.tensors()) {
      const auto it = listed.find({static_cast<int>(r), t.name()});
      const std::string unit = units.specs[units.store_unit[t.unit]].name;
      const size_t offset = units.offset[t.unit] + layout.offset_in_unit(t);
      TZ_CHECK(
          it != listed.end() && it->second->unit == unit && it->second->offset == offset &&
              it->second->numel == t.numel,
          "checkpoint '" + c.dir + "': tensor " + t.name() + piece +
              (it == listed.end() ? " is in no rank file's tensors"
                                  : " lies in unit '" + it->second->unit + "' at " +
                                        std::to_string(it->second->offset) + ", " +
                                        std::to_string(it->second->numel) +
                                        " elements; the model_shape puts it in '" + unit + "' at " +
                                        std::to_string(offset) + ", " + std::to_string(t.numel)),
          "the manifest and the rank files disagree; the checkpoint is damaged or edited");
    }
  }
  return g;
}

}  // namespace tierzero::train
