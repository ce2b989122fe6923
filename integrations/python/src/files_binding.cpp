// Reading TierZero's files from Python: a run profile's memory as NumPy arrays per tier and
// category (read_profile), and a training checkpoint's tensors read by range as `tierzero export`
// reads them (Checkpoint), one tensor in memory at a time.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "tierzero/core/dtype.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/profile/profile_json.hpp"
#include "tierzero/train/checkpoint_contents.hpp"
#include "tierzero/train/safetensors_gpt2.hpp"
#include "tierzero/train/store_provider.hpp"
#include "tierzero/train/training_checkpoint.hpp"

namespace py = pybind11;

namespace tierzero::python {
namespace {

// A 1-D shape spelled out: pybind11 2.10's array_t(count) constructor (and array(dtype, shape)
// without strides) leaves the stride 0.
std::vector<py::ssize_t> vector_shape(size_t n) {
  return {static_cast<py::ssize_t>(n)};
}

py::list tier_names() {
  py::list l;
  for (size_t t = 0; t < kNumTiers; ++t) l.append(tier_name(static_cast<Tier>(t)));
  return l;
}

py::list category_names() {
  py::list l;
  for (size_t c = 0; c < kNumCategories; ++c) l.append(category_name(static_cast<Category>(c)));
  return l;
}

// (rows, tiers, categories) bytes, row r from get(r).
template <typename Get>
py::array_t<int64_t> bytes_array(size_t rows, Get get) {
  py::array_t<int64_t> a({rows, kNumTiers, kNumCategories});
  auto v = a.mutable_unchecked<3>();
  for (size_t r = 0; r < rows; ++r) {
    const profile::TierCategoryBytes& b = get(r);
    for (size_t t = 0; t < kNumTiers; ++t)
      for (size_t c = 0; c < kNumCategories; ++c) v(r, t, c) = static_cast<int64_t>(b[t][c]);
  }
  return a;
}

py::dict run_info(const profile::RunInfo& r) {
  py::dict d;
  d["model"] = r.model;
  d["parameters"] = r.parameters;
  d["ranks"] = r.ranks;
  d["rank"] = r.rank;
  d["run_id"] = r.run_id;
  d["host"] = r.host;
  d["stage"] = r.stage;
  d["device"] = r.device;
  d["device_budget"] = r.device_budget;
  d["extra"] = r.extra;
  return d;
}

// The timeline's bytes after every event, per (tier, category): (events + 1) rows, the first
// being the bytes held when recording began.
py::dict timeline_arrays(const profile::Profile& p, double t0) {
  const profile::Timeline& tl = p.timeline;
  const size_t n = tl.events.size() + 1;
  std::vector<profile::TierCategoryBytes> rows(n);
  std::vector<double> times(n);
  rows[0] = tl.initial;
  times[0] = tl.events.empty() ? 0.0 : tl.events.front().time_s - t0;
  for (size_t i = 1; i < n; ++i) {
    const profile::TimelineEvent& e = tl.events[i - 1];
    rows[i] = rows[i - 1];
    rows[i][static_cast<size_t>(e.tier)][static_cast<size_t>(e.category)] = e.current;
    times[i] = e.time_s - t0;
  }
  py::dict d;
  py::array_t<double> time_s(vector_shape(n));
  std::copy(times.begin(), times.end(), time_s.mutable_data());
  d["time_s"] = time_s;
  d["bytes"] =
      bytes_array(n, [&](size_t r) -> const profile::TierCategoryBytes& { return rows[r]; });
  d["events_dropped"] = tl.events_dropped;
  return d;
}

py::dict read_profile_arrays(const std::string& path) {
  const profile::Profile p = profile::read_profile(path);
  const size_t s = p.steps.size();
  const double t0 = s > 0 ? p.steps.front().start_s : 0.0;
  py::array_t<int64_t> step(vector_shape(s));
  py::array_t<double> start(vector_shape(s)), end(vector_shape(s));
  py::array_t<int64_t> tier_peak({s, kNumTiers});
  auto tp = tier_peak.mutable_unchecked<2>();
  std::vector<profile::TierCategoryBytes> peaks(s);
  for (size_t i = 0; i < s; ++i) {
    const profile::StepProfile& st = p.steps[i];
    step.mutable_at(i) = st.step;
    start.mutable_at(i) = st.start_s - t0;
    end.mutable_at(i) = st.end_s - t0;
    for (size_t t = 0; t < kNumTiers; ++t) {
      tp(i, t) = static_cast<int64_t>(st.tier_peak[t].bytes);
      for (size_t c = 0; c < kNumCategories; ++c) peaks[i][t][c] = st.peak[t][c].bytes;
    }
  }
  py::dict d;
  d["path"] = path;
  d["run"] = run_info(p.run);
  d["tiers"] = tier_names();
  d["categories"] = category_names();
  d["step"] = step;
  d["start_s"] = start;
  d["end_s"] = end;
  d["at_start"] = bytes_array(
      s, [&](size_t r) -> const profile::TierCategoryBytes& { return p.steps[r].at_start; });
  d["at_end"] = bytes_array(
      s, [&](size_t r) -> const profile::TierCategoryBytes& { return p.steps[r].at_end; });
  d["peak"] =
      bytes_array(s, [&](size_t r) -> const profile::TierCategoryBytes& { return peaks[r]; });
  d["tier_peak"] = tier_peak;
  d["timeline"] = p.has_timeline ? py::object(timeline_arrays(p, t0)) : py::object(py::none());
  return d;
}

// A checkpoint's model tensors under their Hugging Face GPT-2 names (as export writes them), each
// read by range from every rank's CRC-checked blocks.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& path)
      : dir_(train::resolve_checkpoint_dir(path)), contents_(train::open_checkpoint(dir_)) {
    const nlohmann::json& id = contents_.manifest.identity;
    TZ_CHECK(id.value("tp", 1) == 1,
             "checkpoint '" + dir_ + "' holds tensor-parallel pieces, which are not assembled yet",
             "save the model with train --save model.bin (llm.c) instead");
    config_ = train::checkpoint_model(contents_);
    layout_ = std::make_unique<nn::ParamLayout>(nn::gpt_param_layout(config_));
    grouping_ = train::group_units(*layout_, id.value("blocks_per_unit", size_t{1}));
    ranges_ = std::make_unique<train::CheckpointRanges>(contents_);
    for (const train::Gpt2Tensor& t : train::gpt2_tensors(config_)) tensors_.push_back(t);
    working_ = id.value("precision", std::string(dtype_name(DType::f32)));
  }

  py::dict info() const {
    py::dict d;
    d["path"] = dir_;
    d["step"] = contents_.manifest.step;
    d["ranks"] = contents_.manifest.ranks;
    d["model"] = config_.str();
    d["precision"] = working_;
    d["identity"] = py::module_::import("json").attr("loads")(contents_.manifest.identity.dump());
    return d;
  }

  py::list names() const {
    py::list l;
    for (const auto& t : tensors_) l.append(t.name);
    return l;
  }

  // Tensor `name` as the model holds it, (rows, cols) fp32 (kind: "param" the fp32 master values,
  // "exp_avg" / "exp_avg_sq" Adam's moments), or the 16-bit working copy as raw uint16 ("working";
  // the Python side views it as bfloat16 or float16). Returns (array, rows, cols, transpose,
  // kept_rows, hf_shape).
  py::tuple read(const std::string& name, const std::string& kind) {
    const train::Gpt2Tensor& t = find(name);
    const nn::ParamTensor& p = layout_->get(t.kind, t.layer);
    const size_t unit = grouping_.store_unit[p.unit];
    const size_t at = grouping_.offset[p.unit] + layout_->offset_in_unit(p);
    const std::string& unit_name = grouping_.specs[unit].name;
    std::vector<std::string> kinds;
    std::string dtype = dtype_name(DType::f32);
    if (kind == "param") {
      kinds = {"master", "params_full", "param_shard"};
    } else if (kind == "exp_avg") {
      kinds = {"adam_m"};
    } else if (kind == "exp_avg_sq") {
      kinds = {"adam_v"};
    } else if (kind == "working") {
      kinds = {"params_full", "param_shard"};
      dtype = working_;
    } else {
      TZ_THROW("unknown checkpoint state '" + kind + "'",
               "use param, exp_avg, exp_avg_sq or working");
    }
    const size_t elem = dtype == dtype_name(DType::f32) ? 4 : 2;
    const std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(p.numel)};
    const std::vector<py::ssize_t> strides = {static_cast<py::ssize_t>(elem)};
    py::array a = elem == 4 ? py::array(py::dtype::of<float>(), shape, strides)
                            : py::array(py::dtype::of<uint16_t>(), shape, strides);
    bool found = false;
    {
      void* dst = a.mutable_data();
      py::gil_scoped_release release;
      found = ranges_->read(unit_name, kinds, dtype, at, p.numel, dst);
    }
    TZ_CHECK(
        found,
        "checkpoint '" + dir_ + "' holds no " + dtype + " " + kind + " values of unit " + unit_name,
        kind == "working" ? "this run kept fp32 parameters only: read kind='param'"
                          : "read a checkpoint written by train --save-dir");
    return py::make_tuple(a, t.rows, t.cols, t.transpose, t.kept_rows, t.shape, dtype);
  }

 private:
  const train::Gpt2Tensor& find(const std::string& name) const {
    for (const auto& t : tensors_)
      if (t.name == name) return t;
    TZ_THROW("checkpoint '" + dir_ + "' has no tensor '" + name + "'",
             "see Checkpoint.names() (Hugging Face GPT-2 names, e.g. h.0.attn.c_attn.weight)");
  }

  std::string dir_;
  train::CheckpointContents contents_;
  nn::GPTConfig config_;
  std::unique_ptr<nn::ParamLayout> layout_;
  train::UnitGrouping grouping_;
  std::unique_ptr<train::CheckpointRanges> ranges_;
  std::vector<train::Gpt2Tensor> tensors_;
  std::string working_;
};

}  // namespace

void bind_files(py::module_& m) {
  m.def("read_profile", &read_profile_arrays, py::arg("path"),
        "a run profile's memory per step (and per event, with a timeline) as NumPy arrays");
  py::class_<Checkpoint>(m, "CheckpointFile")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def("info", &Checkpoint::info)
      .def("names", &Checkpoint::names)
      .def("read", &Checkpoint::read, py::arg("name"), py::arg("kind"));
}

}  // namespace tierzero::python
