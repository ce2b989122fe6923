// _tierzero.OffloadAdamWEngine: the Python face of OffloadAdamW's engine (offload_adamw.hpp).
// Tensors arrive as DLPack capsules; the step runs with the GIL released. The torch optimizer
// around it is tierzero/torch.py.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <vector>

#include "bindings.hpp"
#include "dlpack_view.hpp"
#include "offload_adamw.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"

namespace py = pybind11;

namespace tierzero::python {
namespace {

// A 1-D shape spelled out: pybind11 2.10's array_t(count) constructor leaves the stride 0.
std::vector<py::ssize_t> vector_shape(size_t n) {
  return {static_cast<py::ssize_t>(n)};
}

std::vector<Float32HostView> views_of(const py::list& capsules, const OffloadAdamW& engine,
                                      const char* what, bool allow_none) {
  TZ_CHECK(capsules.size() == engine.size(),
           std::string("OffloadAdamW: ") + std::to_string(capsules.size()) + " " + what + " for " +
               std::to_string(engine.size()) + " parameters",
           "pass one per parameter, in the optimizer's order");
  std::vector<Float32HostView> views;
  views.reserve(capsules.size());
  for (size_t i = 0; i < capsules.size(); ++i) {
    if (allow_none && capsules[i].is_none()) {
      views.emplace_back();
      continue;
    }
    const std::string name = std::string(what) + " " + std::to_string(i);
    views.emplace_back(capsules[i].cast<py::capsule>(), name);
    TZ_CHECK(views.back().numel() == engine.numel(i),
             name + " has " + std::to_string(views.back().numel()) + " elements, the parameter " +
                 std::to_string(engine.numel(i)),
             "pass tensors shaped as the optimizer's parameters");
  }
  return views;
}

void step(OffloadAdamW& engine, double lr, const py::list& grads, const py::list& params) {
  std::vector<Float32HostView> g = views_of(grads, engine, "gradient", true);
  std::vector<Float32HostView> p = views_of(params, engine, "parameter", false);
  std::vector<const float*> grad_ptrs;  // null: no gradient this step
  std::vector<float*> param_ptrs;
  for (size_t i = 0; i < engine.size(); ++i) {
    grad_ptrs.push_back(g[i].data());
    param_ptrs.push_back(p[i].data());
  }
  py::gil_scoped_release release;
  engine.step(lr, grad_ptrs, param_ptrs);
}

py::list save_state(OffloadAdamW& engine) {
  py::list out;
  engine.save_state([&](const OffloadAdamW::Block& b, const void* data) {
    py::array_t<uint8_t> bytes(vector_shape(b.elems * b.elem_bytes));
    std::memcpy(bytes.mutable_data(), data, b.elems * b.elem_bytes);
    out.append(py::make_tuple(b.index, b.kind, b.begin, b.elem_bytes, bytes));
  });
  return out;
}

void load_state(OffloadAdamW& engine, const py::list& blocks, int64_t steps) {
  const std::vector<OffloadAdamW::Block> want = engine.blocks();
  TZ_CHECK(blocks.size() == want.size(),
           "OffloadAdamW state has " + std::to_string(blocks.size()) + " blocks, this optimizer " +
               std::to_string(want.size()),
           "load a state_dict saved by an OffloadAdamW over the same parameters");
  size_t next = 0;
  engine.load_state(
      [&](const OffloadAdamW::Block& b, void* data) {
        const auto t = blocks[next++].cast<py::tuple>();
        const auto bytes = t[4].cast<py::array_t<uint8_t, py::array::c_style>>();
        const std::string where = "parameter " + std::to_string(b.index) + " " + b.kind;
        TZ_CHECK(t[0].cast<size_t>() == b.index && t[1].cast<std::string>() == b.kind &&
                     t[2].cast<size_t>() == b.begin &&
                     static_cast<size_t>(bytes.size()) == b.elems * b.elem_bytes,
                 "OffloadAdamW state does not match at " + where,
                 "load a state_dict saved by an OffloadAdamW over the same parameters");
        std::memcpy(data, bytes.data(), b.elems * b.elem_bytes);
      },
      steps);
}

}  // namespace

py::dict memory_report() {
  const MemoryTracker& t = MemoryTracker::global();
  py::dict out;
  for (size_t ti = 0; ti < kNumTiers; ++ti) {
    const auto tier = static_cast<Tier>(ti);
    py::dict cats;
    for (size_t ci = 0; ci < kNumCategories; ++ci) {
      const auto cat = static_cast<Category>(ci);
      cats[category_name(cat)] = t.current(tier, cat);
    }
    cats["total"] = t.current(tier);
    cats["peak"] = t.peak(tier);
    out[tier_name(tier)] = cats;
  }
  return out;
}

void bind_offload_adamw(py::module_& m) {
  py::class_<OffloadAdamW>(m, "OffloadAdamWEngine")
      .def(py::init([](const std::vector<size_t>& numels, const std::vector<bool>& in_place,
                       double beta1, double beta2, double eps, double weight_decay,
                       const std::string& state, const std::string& nvme_path, size_t host_budget,
                       size_t nvme_chunk_elems) {
             OffloadAdamWOptions o;
             o.beta1 = beta1;
             o.beta2 = beta2;
             o.eps = eps;
             o.weight_decay = weight_decay;
             o.state = state;
             o.nvme_path = nvme_path;
             o.host_budget = host_budget;
             o.nvme_chunk_elems = nvme_chunk_elems;
             py::gil_scoped_release release;
             return std::make_unique<OffloadAdamW>(numels, in_place, o);
           }),
           py::arg("numels"), py::arg("in_place"), py::arg("beta1"), py::arg("beta2"),
           py::arg("eps"), py::arg("weight_decay"), py::arg("state"), py::arg("nvme_path"),
           py::arg("host_budget"), py::arg("nvme_chunk_elems"))
      .def("__len__", &OffloadAdamW::size)
      .def("in_place", &OffloadAdamW::in_place, py::arg("index"),
           "whether tensor `index` is updated where it lies (fp32 CPU, states on the host)")
      .def("load_param",
           [](OffloadAdamW& e, size_t i, const py::capsule& c) {
             const Float32HostView v(c, "parameter " + std::to_string(i));
             TZ_CHECK(i < e.size() && v.numel() == e.numel(i),
                      "parameter " + std::to_string(i) + " does not match the optimizer's", "");
             py::gil_scoped_release release;
             e.load_param(i, v.data());
           })
      .def("step", &step, py::arg("lr"), py::arg("grads"), py::arg("params"))
      .def_property_readonly("steps_taken", &OffloadAdamW::steps_taken)
      .def("save_state", &save_state)
      .def("load_state", &load_state, py::arg("blocks"), py::arg("steps_taken"));
  m.def("memory_report", &memory_report,
        "bytes TierZero holds in this process now, per tier and category (and each tier's peak)");
}

}  // namespace tierzero::python
