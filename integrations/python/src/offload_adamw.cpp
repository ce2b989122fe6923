// OffloadAdamW's engine over the zero layer's partition store (offload_adamw.hpp).
#include "offload_adamw.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "tierzero/core/error.hpp"
#include "tierzero/kernels/kernels.hpp"

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

OffloadAdamW::OffloadAdamW(const std::vector<size_t>& numels, const std::vector<bool>& in_place,
                           const OffloadAdamWOptions& options)
    : numels_(numels), options_(options) {
  TZ_CHECK(!numels.empty(), "OffloadAdamW got no parameters", "pass the model's parameters");
  TZ_CHECK(in_place.size() == numels.size(),
           "OffloadAdamW: " + std::to_string(in_place.size()) + " in-place flags for " +
               std::to_string(numels.size()) + " parameters",
           "pass one flag per parameter");
  const zero::StoreConfig config = store_config(options);  // checks the state's name
  std::vector<zero::UnitSpec> units;
  std::vector<size_t> in_place_numels;
  store_index_.assign(numels.size(), kNone);
  in_place_index_.assign(numels.size(), kNone);
  for (size_t i = 0; i < numels.size(); ++i) {
    TZ_CHECK(numels[i] > 0, "OffloadAdamW: parameter " + std::to_string(i) + " is empty",
             "pass only parameters with elements");
    if (in_place[i]) {
      in_place_index_[i] = in_place_tensor_.size();
      in_place_tensor_.push_back(i);
      in_place_numels.push_back(numels[i]);
    } else {
      store_index_[i] = store_tensor_.size();
      units.push_back(unit_of(store_tensor_.size(), numels[i], options.weight_decay != 0.0));
      store_tensor_.push_back(i);
    }
  }
  comm::MpiSession& session = module_mpi_session();
  solo_ = session.world().split(session.rank(), 0, "offload_adamw");
  device_ = make_cpu_device();
  allocator_ = std::make_unique<DeviceAllocator>(*device_, 0);
  if (!units.empty()) {
    zero::AdamWConfig adamw;
    adamw.beta1 = options.beta1;
    adamw.beta2 = options.beta2;
    adamw.eps = options.eps;
    adamw.weight_decay = options.weight_decay;
    store_ = std::make_unique<zero::PartitionStore>(std::move(units), config, adamw, *solo_,
                                                    *allocator_);
  }
  if (!in_place_numels.empty()) {
    offload::HostPool* pool = store_ ? store_->host_pool() : nullptr;
    if (pool == nullptr) {
      own_pool_ = std::make_unique<offload::HostPool>(config.host_budget_bytes, device_.get());
      pool = own_pool_.get();
    }
    if (options.state == "nvme")
      in_place_nvme_ = std::make_unique<InPlaceNvmeAdamW>(
          in_place_numels, *pool, store_ ? store_->nvme_swap() : nullptr, config.nvme,
          config.placement.nvme_chunk_elems, config.optimizer_swap_buffers);
    else
      in_place_ = std::make_unique<InPlaceAdamW>(in_place_numels, *pool);
  }
  live_engines().insert(this);
}

OffloadAdamW::~OffloadAdamW() {
  live_engines().erase(this);
}

void OffloadAdamW::release() {
  released_ = true;
  in_place_nvme_.reset();
  in_place_.reset();
  store_.reset();
  own_pool_.reset();
  allocator_.reset();
  device_.reset();
  solo_.reset();
}

void OffloadAdamW::check_live() const {
  TZ_CHECK(!released_, "OffloadAdamW used after MPI ended (the interpreter is exiting)",
           "finish with the optimizer before the program exits");
}

void OffloadAdamW::load_param(size_t i, const float* values) {
  check_live();
  TZ_CHECK(i < numels_.size(), "OffloadAdamW: no parameter " + std::to_string(i), "");
  if (store_index_[i] != kNone) store_->load_unit(store_index_[i], values);
}

void OffloadAdamW::step(double lr, const std::vector<const float*>& grads,
                        const std::vector<float*>& params) {
  check_live();
  TZ_CHECK(grads.size() == numels_.size() && params.size() == numels_.size(),
           "OffloadAdamW step: " + std::to_string(grads.size()) + " gradients and " +
               std::to_string(params.size()) + " parameters for " + std::to_string(numels_.size()),
           "pass one of each per parameter");
  if (store_) {
    store_->zero_grads();
    for (size_t u = 0; u < store_tensor_.size(); ++u) {
      const size_t i = store_tensor_[u];
      float* g = store_->acquire_grads(u);  // (numels_[i]) zeroed by zero_grads
      if (grads[i] != nullptr) std::memcpy(g, grads[i], numels_[i] * sizeof(float));
      store_->grads_done(u);
    }
    store_->step(lr, /*clip, off*/ 0.0);
    for (size_t u = 0; u < store_tensor_.size(); ++u)
      store_->read_unit(u, params[store_tensor_[u]]);
  }
  if (in_place_ || in_place_nvme_) {
    kernels::AdamWParams p{};
    p.lr = static_cast<float>(lr);
    p.beta1 = static_cast<float>(options_.beta1);
    p.beta2 = static_cast<float>(options_.beta2);
    p.eps = static_cast<float>(options_.eps);
    p.weight_decay = static_cast<float>(options_.weight_decay);
    p.grad_scale = 1.0f;
    p.step = steps_ + 1;
    if (in_place_nvme_) {
      std::vector<float*> own_params;       // (in-place tensors)
      std::vector<const float*> own_grads;  // (in-place tensors)
      for (size_t i : in_place_tensor_) {
        own_params.push_back(params[i]);
        own_grads.push_back(grads[i]);
      }
      in_place_nvme_->step(own_params, own_grads, p);
    }
    for (size_t k = 0; in_place_ && k < in_place_tensor_.size(); ++k) {
      const size_t i = in_place_tensor_[k];
      in_place_->update(k, params[i], grads[i], p);
    }
  }
  ++steps_;
}

// The blocks: the store's (its units renamed to tensor indices), then each in-place tensor's
// moments; the same order in blocks(), save_state and load_state.
std::vector<OffloadAdamW::Block> OffloadAdamW::blocks() const {
  check_live();
  std::vector<Block> out;
  if (store_)
    for (const auto& b : store_->state_blocks())
      out.push_back(
          Block{store_tensor_[b.unit], kind_name(b.kind), b.begin, b.elems, b.elem_bytes});
  for (size_t k = 0; in_place_ && k < in_place_tensor_.size(); ++k) {
    const size_t i = in_place_tensor_[k];
    out.push_back(Block{i, "exp_avg", 0, numels_[i], sizeof(float)});
    out.push_back(Block{i, "exp_avg_sq", 0, numels_[i], sizeof(float)});
  }
  if (in_place_nvme_)  // one pair per piece of a chunk
    for (const InPlaceNvmeAdamW::Piece& piece : in_place_nvme_->pieces()) {
      const size_t i = in_place_tensor_[piece.tensor];
      out.push_back(Block{i, "exp_avg", piece.begin, piece.count, sizeof(float)});
      out.push_back(Block{i, "exp_avg_sq", piece.begin, piece.count, sizeof(float)});
    }
  return out;
}

void OffloadAdamW::save_state(const std::function<void(const Block&, const void*)>& sink) {
  check_live();
  if (store_)
    store_->save_state([&](const zero::PartitionStore::StateBlock& b, const void* data) {
      sink(Block{store_tensor_[b.unit], kind_name(b.kind), b.begin, b.elems, b.elem_bytes}, data);
    });
  for (size_t k = 0; in_place_ && k < in_place_tensor_.size(); ++k) {
    const size_t i = in_place_tensor_[k];
    sink(Block{i, "exp_avg", 0, numels_[i], sizeof(float)}, in_place_->exp_avg(k));
    sink(Block{i, "exp_avg_sq", 0, numels_[i], sizeof(float)}, in_place_->exp_avg_sq(k));
  }
  if (in_place_nvme_)
    in_place_nvme_->save([&](const InPlaceNvmeAdamW::Piece& piece, const float* m, const float* v) {
      const size_t i = in_place_tensor_[piece.tensor];
      sink(Block{i, "exp_avg", piece.begin, piece.count, sizeof(float)}, m);
      sink(Block{i, "exp_avg_sq", piece.begin, piece.count, sizeof(float)}, v);
    });
}

void OffloadAdamW::load_state(const std::function<void(const Block&, void*)>& source,
                              int64_t steps_taken) {
  check_live();
  TZ_CHECK(steps_taken >= 0, "OffloadAdamW state has " + std::to_string(steps_taken) + " steps",
           "load a state_dict saved by an OffloadAdamW");
  if (store_)
    store_->load_state(
        [&](const zero::PartitionStore::StateBlock& b, void* data) {
          source(Block{store_tensor_[b.unit], kind_name(b.kind), b.begin, b.elems, b.elem_bytes},
                 data);
        },
        steps_taken);
  for (size_t k = 0; in_place_ && k < in_place_tensor_.size(); ++k) {
    const size_t i = in_place_tensor_[k];
    source(Block{i, "exp_avg", 0, numels_[i], sizeof(float)}, in_place_->exp_avg(k));
    source(Block{i, "exp_avg_sq", 0, numels_[i], sizeof(float)}, in_place_->exp_avg_sq(k));
  }
  if (in_place_nvme_)
    in_place_nvme_->load([&](const InPlaceNvmeAdamW::Piece& piece, float* m, float* v) {
      const size_t i = in_place_tensor_[piece.tensor];
      source(Block{i, "exp_avg", piece.begin, piece.count, sizeof(float)}, m);
      source(Block{i, "exp_avg_sq", piece.begin, piece.count, sizeof(float)}, v);
    });
  steps_ = steps_taken;
}

}  // namespace tierzero::python
