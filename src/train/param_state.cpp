// The two parameter states (param_state.hpp): the reference path's local parameters with AdamW,
// and the partition store.
#include "param_state.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/train/adamw_optimizer.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/placement_from_config.hpp"
#include "tierzero/zero/comm_staging_pool.hpp"

namespace tierzero::train {

namespace {

// Host memory holds one chunk of the reference path's parameters at a time.
constexpr size_t kReferenceChunk = size_t{1} << 22;

zero::AdamWConfig adamw_config_from(const OptimizerConfig& o) {
  return {o.beta1, o.beta2, o.eps, o.weight_decay};
}

// A store block's kind as checkpoints name it (stable, unlike the report's display names).
std::string checkpoint_kind(zero::StateBuffer b) {
  switch (b) {
    case zero::StateBuffer::params_full:
      return "params_full";
    case zero::StateBuffer::param_shard:
      return "param_shard";
    case zero::StateBuffer::master:
      return "master";
    case zero::StateBuffer::adam_m:
      return "adam_m";
    case zero::StateBuffer::adam_v:
      return "adam_v";
    default:
      TZ_THROW(std::string("no checkpoint name for state ") + zero::state_buffer_name(b),
               "internal error: gradients are not checkpointed");
  }
}

// The one-rank fp32 reference: the parameters (which are the master) and AdamW's moments on the
// device, each a flat buffer over the layout.
class ReferenceParams final : public ParamState {
 public:
  ReferenceParams(const TrainConfig& c, const nn::ParamLayout& layout, Device& device,
                  DeviceAllocator& allocator, const InitialValues& initial)
      : layout_(layout),
        device_(device),
        blocks_per_unit_(static_cast<size_t>(c.blocks_per_unit)),
        has_steps_(c.steps > 0),
        params_(layout, allocator) {
    const size_t total = layout.total_numel();
    std::vector<float> chunk(std::min<size_t>(total, kReferenceChunk));  // (chunk) fp32
    for (size_t at = 0; at < total; at += chunk.size()) {
      const size_t n = std::min(chunk.size(), total - at);
      initial(at, n, chunk.data());
      device_.copy(params_.params() + at, chunk.data(), n * sizeof(float), CopyKind::host_to_device,
                   device_.default_stream());
      device_.default_stream().synchronize();
    }
    // AdamW's m and v (8 bytes per parameter) only when there are steps to take: `eval` of a
    // large checkpoint should not pay for them.
    if (has_steps_) optimizer_ = std::make_unique<AdamWOptimizer>(c.optimizer, layout, allocator);
  }

  nn::ParamProvider& provider() override { return params_; }
  void zero_grads() override { params_.zero_grads(); }
  StepOutcome step(double lr, double clip, double /*loss_scale: fp32 only*/) override {
    return {optimizer_->step(params_, lr, clip).grad_norm, false};
  }
  int64_t steps_taken() const override { return optimizer_ ? optimizer_->steps_taken() : 0; }
  void record_counters(StepRecord&) const override {}
  void begin_eval() override {}

  void for_each_piece(const PieceFn& fn) override {
    const size_t total = layout_.total_numel();
    std::vector<float> part(std::min<size_t>(total, kReferenceChunk));  // (chunk) fp32
    for (size_t at = 0; at < total; at += part.size()) {
      const size_t n = std::min(part.size(), total - at);
      device_.copy(part.data(), params_.params() + at, n * sizeof(float), CopyKind::device_to_host,
                   device_.default_stream());
      device_.default_stream().synchronize();
      fn(at, n, part.data());
    }
  }

  void save_blocks(const BlockSink& sink) override {
    std::vector<float> host;  // (elems) fp32, one block at a time
    for (const Block& b : blocks()) {
      host.resize(b.elems);
      device_.copy(host.data(), b.device, b.elems * sizeof(float), CopyKind::device_to_host,
                   device_.default_stream());
      device_.default_stream().synchronize();
      sink(b.unit, b.kind, sizeof(float), "device", 0, b.elems, host.data());
    }
  }

  void load_blocks(const BlockSource& source, int64_t steps_taken) override {
    TZ_CHECK(optimizer_ != nullptr || !has_steps_, "no optimizer to resume", "");
    std::vector<float> host;  // (elems) fp32
    for (const Block& b : blocks()) {
      host.resize(b.elems);
      source(b.unit, b.kind, sizeof(float), 0, b.elems, host.data());
      device_.copy(b.device, host.data(), b.elems * sizeof(float), CopyKind::host_to_device,
                   device_.default_stream());
      device_.default_stream().synchronize();
    }
    if (optimizer_) optimizer_->set_steps_taken(steps_taken);
  }

 private:
  // The state per unit, named as the store names its blocks, each a slice of a device buffer.
  struct Block {
    std::string unit;
    const char* kind;
    float* device;  // (elems)
    size_t elems;
  };
  std::vector<Block> blocks() {
    const UnitGrouping g = group_units(layout_, blocks_per_unit_);
    std::vector<Block> out;
    for (size_t u = 0; u < g.specs.size(); ++u) {
      const size_t at = g.start[u], n = g.specs[u].numel;
      out.push_back({g.specs[u].name, "params_full", params_.params() + at, n});
      if (optimizer_) {
        out.push_back({g.specs[u].name, "adam_m", optimizer_->m() + at, n});
        out.push_back({g.specs[u].name, "adam_v", optimizer_->v() + at, n});
      }
    }
    return out;
  }

  const nn::ParamLayout& layout_;
  Device& device_;
  size_t blocks_per_unit_;
  bool has_steps_;
  nn::LocalParams params_;
  std::unique_ptr<AdamWOptimizer> optimizer_;
};

// The ZeRO path: parameters, gradients and AdamW states in the partition store, at any stage and
// placement; the GPT runs on it through StoreParamProvider.
class StoreParams final : public ParamState {
 public:
  StoreParams(const TrainConfig& c, const RunSession& run, const ProcessGroups& groups,
              const nn::ParamLayout& layout, DeviceAllocator& allocator,
              const InitialValues& initial, DType compute) {
    zero::StoreConfig store_config = store_config_from(c);
    store_config.compute = compute;
    // The host budget is the node's: its ranks share it equally.
    const auto local_ranks = static_cast<size_t>(comm::node_local_size(run.session->world()));
    const size_t node_budget = store_config.host_budget_bytes;
    store_config.host_budget_bytes = host_budget_per_rank(node_budget, local_ranks);
    if (run.rank == 0 && local_ranks > 1)
      log::info("host memory budget " + format_bytes(store_config.host_budget_bytes) +
                " per rank: the node's " +
                format_bytes(store_config.host_budget_bytes * local_ranks) + " shared by its " +
                std::to_string(local_ranks) + " ranks");
    UnitGrouping grouping = group_units(layout, static_cast<size_t>(c.blocks_per_unit));
    if (groups.tie)
      for (size_t u = 0; u < layout.units().size(); ++u)
        if (layout.units()[u].tied) grouping.specs[grouping.store_unit[u]].tied = true;
    store_ = std::make_unique<zero::PartitionStore>(
        grouping.specs, store_config, adamw_config_from(c.optimizer), *groups.partition, allocator,
        groups.store_groups());
    // With a pinned pool (state off the device), the comm layer's staging comes from it too, so
    // the host budget covers it.
    if (offload::HostPool* pool = store_->host_pool())
      comm_staging_ = std::make_unique<zero::CommStagingPool>(*pool);
    for (size_t g = 0; g < grouping.specs.size(); ++g)
      store_->load_unit_from(g, [&, start = grouping.start[g]](size_t b, size_t n, float* out) {
        initial(start + b, n, out);
      });
    provider_ = std::make_unique<StoreParamProvider>(*store_, std::move(grouping));
  }

  nn::ParamProvider& provider() override { return *provider_; }
  offload::HostPool* host_pool() override { return store_->host_pool(); }
  void zero_grads() override { store_->zero_grads(); }
  StepOutcome step(double lr, double clip, double loss_scale) override {
    const zero::StoreStepStats st = store_->step(lr, clip, loss_scale);
    return {st.grad_norm, st.skipped};
  }
  int64_t steps_taken() const override { return store_->steps_taken(); }
  void record_counters(StepRecord& r) const override {
    record_fetch_counters(r, store_->fetch_counters(), store_->stage() == 3);
  }
  void begin_eval() override { store_->begin_pass(zero::PassKind::eval); }
  void plan_step(double lr, double clip, double loss_scale, size_t micro_batches) override {
    store_->plan_step(lr, clip, loss_scale, micro_batches);
  }

  void for_each_piece(const PieceFn& fn) override {
    std::vector<float> part;  // (unit numel) fp32
    const std::vector<size_t>& starts = provider_->grouping().start;
    for (size_t g = 0; g < starts.size(); ++g) {
      part.resize(store_->plan().units()[g].numel);
      store_->read_unit(g, part.data());
      fn(starts[g], part.size(), part.data());
    }
  }

  void save_blocks(const BlockSink& sink) override {
    const zero::PartitionPlan& plan = store_->plan();
    store_->save_state([&](const zero::PartitionStore::StateBlock& b, const void* data) {
      sink(plan.units()[b.unit].name, checkpoint_kind(b.kind), b.elem_bytes, tier_name(b.tier),
           b.begin, b.elems, data);
    });
  }

  void load_blocks(const BlockSource& source, int64_t steps_taken) override {
    const zero::PartitionPlan& plan = store_->plan();
    store_->load_state(
        [&](const zero::PartitionStore::StateBlock& b, void* data) {
          source(plan.units()[b.unit].name, checkpoint_kind(b.kind), b.elem_bytes, b.begin, b.elems,
                 data);
        },
        steps_taken);
  }

  const zero::PartitionStore* store() const override { return store_.get(); }
  void set_device_timeline(DeviceTimeline* timeline) override {
    store_->set_device_timeline(timeline);
  }
  const UnitGrouping* grouping() const override { return &provider_->grouping(); }

 private:
  std::unique_ptr<zero::PartitionStore> store_;
  // The comm layer's staging from the store's pool; after the store, so it goes first.
  std::unique_ptr<zero::CommStagingPool> comm_staging_;
  std::unique_ptr<StoreParamProvider> provider_;
};

}  // namespace

std::unique_ptr<ParamState> make_param_state(const TrainConfig& c, const RunSession& run,
                                             const ProcessGroups& groups,
                                             const nn::ParamLayout& layout, Device& device,
                                             DeviceAllocator& allocator,
                                             const InitialValues& initial, DType compute) {
  if (run.session)
    return std::make_unique<StoreParams>(c, run, groups, layout, allocator, initial, compute);
  TZ_CHECK(compute == DType::f32,
           std::string("the one-rank reference path computes in fp32, not ") + dtype_name(compute),
           "16-bit compute needs 16-bit working parameters (bf16 or fp16 enabled), which the "
           "partition store holds");
  return std::make_unique<ReferenceParams>(c, layout, device, allocator, initial);
}

}  // namespace tierzero::train
