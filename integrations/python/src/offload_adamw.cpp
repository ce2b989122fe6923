// OffloadAdamW's engine over the zero layer's partition store (offload_adamw.hpp).
#include "offload_adamw.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "tierzero/core/error.hpp"

namespace tierzero::python {
namespace {

std::unique_ptr<comm::MpiSession>& session_slot() {
  static std::unique_ptr<comm::MpiSession> session;
  return session;
}

// The engines alive now, released before MPI ends (Python calls in one thread at a time: the GIL).
std::set<OffloadAdamW*>& live_engines() {
  static std::set<OffloadAdamW*> engines;
  return engines;
}

zero::StoreConfig store_config(const OffloadAdamWOptions& o) {
  zero::StoreConfig c;
  // Stage 1 on a group of one: the optimizer's states (and the fp32 masters) take the placement
  // of offload_optimizer; the working parameters and gradients stay in the compute memory.
  c.stage = 1;
  TZ_CHECK(o.state == "host" || o.state == "nvme",
           "OffloadAdamW state='" + o.state + "' is not a tier", "use state='host' or 'nvme'");
  c.placement.optimizer.tier = o.state == "nvme" ? Tier::nvme : Tier::host;
  if (o.nvme_chunk_elems > 0) c.placement.nvme_chunk_elems = o.nvme_chunk_elems;
  if (o.host_budget > 0) c.host_budget_bytes = o.host_budget;
  if (o.state == "nvme") {
    TZ_CHECK(!o.nvme_path.empty(), "OffloadAdamW state='nvme' needs nvme_path",
             "pass nvme_path='/path/on/the/nvme/drive'");
    c.nvme.directories = {o.nvme_path};
  }
  return c;
}

zero::UnitSpec unit_of(size_t index, size_t numel, bool decay) {
  zero::UnitSpec u;
  u.name = "param." + std::to_string(index);
  u.numel = numel;
  u.tensors = {zero::TensorSpec{0, numel, decay, false}};
  return u;
}

std::string kind_name(zero::StateBuffer b) {
  switch (b) {
    case zero::StateBuffer::params_full:
    case zero::StateBuffer::param_shard:
      return "param";
    case zero::StateBuffer::master:
      return "master";
    case zero::StateBuffer::adam_m:
      return "exp_avg";
    case zero::StateBuffer::adam_v:
      return "exp_avg_sq";
    default:
      return zero::state_buffer_name(b);
  }
}

}  // namespace

comm::MpiSession& module_mpi_session() {
  auto& s = session_slot();
  if (!s) s = std::make_unique<comm::MpiSession>(nullptr, nullptr);
  return *s;
}

void close_module_mpi_session() {
  for (OffloadAdamW* e : live_engines()) e->release();
  session_slot().reset();
}

OffloadAdamW::OffloadAdamW(const std::vector<size_t>& numels, const OffloadAdamWOptions& options)
    : numels_(numels), options_(options) {
  TZ_CHECK(!numels.empty(), "OffloadAdamW got no parameters", "pass the model's parameters");
  std::vector<zero::UnitSpec> units;
  for (size_t i = 0; i < numels.size(); ++i) {
    TZ_CHECK(numels[i] > 0, "OffloadAdamW: parameter " + std::to_string(i) + " is empty",
             "pass only parameters with elements");
    units.push_back(unit_of(i, numels[i], options.weight_decay != 0.0));
  }
  comm::MpiSession& session = module_mpi_session();
  solo_ = session.world().split(session.rank(), 0, "offload_adamw");
  device_ = make_cpu_device();
  allocator_ = std::make_unique<DeviceAllocator>(*device_, 0);
  zero::AdamWConfig adamw;
  adamw.beta1 = options.beta1;
  adamw.beta2 = options.beta2;
  adamw.eps = options.eps;
  adamw.weight_decay = options.weight_decay;
  store_ = std::make_unique<zero::PartitionStore>(std::move(units), store_config(options), adamw,
                                                  *solo_, *allocator_);
  scratch_.resize(*std::max_element(numels.begin(), numels.end()));
  live_engines().insert(this);
}

OffloadAdamW::~OffloadAdamW() {
  live_engines().erase(this);
}

void OffloadAdamW::release() {
  store_.reset();
  allocator_.reset();
  device_.reset();
  solo_.reset();
}

zero::PartitionStore& OffloadAdamW::store() const {
  TZ_CHECK(store_ != nullptr, "OffloadAdamW used after MPI ended (the interpreter is exiting)",
           "finish with the optimizer before the program exits");
  return *store_;
}

void OffloadAdamW::load_param(size_t i, const float* values) {
  TZ_CHECK(i < numels_.size(), "OffloadAdamW: no parameter " + std::to_string(i), "");
  store().load_unit(i, values);
}

void OffloadAdamW::step(double lr, const std::function<bool(size_t, float*)>& grad,
                        const std::function<void(size_t, const float*)>& param) {
  store().zero_grads();
  for (size_t i = 0; i < numels_.size(); ++i) {
    float* g = store().acquire_grads(i);  // (numels_[i]) zeroed by zero_grads
    grad(i, g);
    store().grads_done(i);
  }
  store().step(lr, /*clip, off*/ 0.0);
  for (size_t i = 0; i < numels_.size(); ++i) {
    store().read_unit(i, scratch_.data());
    param(i, scratch_.data());
  }
}

std::vector<OffloadAdamW::Block> OffloadAdamW::blocks() const {
  std::vector<Block> out;
  for (const auto& b : store().state_blocks())
    out.push_back(Block{b.unit, kind_name(b.kind), b.begin, b.elems, b.elem_bytes});
  return out;
}

void OffloadAdamW::save_state(const std::function<void(const Block&, const void*)>& sink) {
  store().save_state([&](const zero::PartitionStore::StateBlock& b, const void* data) {
    sink(Block{b.unit, kind_name(b.kind), b.begin, b.elems, b.elem_bytes}, data);
  });
}

void OffloadAdamW::load_state(const std::function<void(const Block&, void*)>& source,
                              int64_t steps_taken) {
  store().load_state(
      [&](const zero::PartitionStore::StateBlock& b, void* data) {
        source(Block{b.unit, kind_name(b.kind), b.begin, b.elems, b.elem_bytes}, data);
      },
      steps_taken);
}

}  // namespace tierzero::python
