// PartitionStore: the facade that wires the store's parts together (see partition_store.hpp) and
// sequences the optimizer step: finish the reductions, end the pass's trace, sum tied gradients,
// take the global norm, run each unit's optimizer engine, make the new parameters visible.
#include "tierzero/zero/partition_store.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "adamw_in_memory.hpp"
#include "background_update.hpp"
#include "backward_update.hpp"
#include "fetcher.hpp"
#include "gradient_norm.hpp"
#include "gradient_reducer.hpp"
#include "nvme_adamw.hpp"
#include "shard_storage.hpp"
#include "speculative_backup.hpp"
#include "tierzero/comm/timed_collective.hpp"
#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/offload/host_pool.hpp"

namespace tierzero::zero {

namespace {

int checked_stage(const StoreConfig& c) {
  TZ_CHECK(c.stage >= 0 && c.stage <= 3,
           "PartitionStore: ZeRO stage " + std::to_string(c.stage) + " does not exist",
           "zero_optimization.stage is 0, 1, 2 or 3");
  return c.stage;
}

// Stage 0 replicates optimizer states too: plan as a group of one so every rank owns all.
int plan_ranks(const StoreConfig& c, const comm::Communicator& g) {
  return checked_stage(c) == 0 ? 1 : g.size();
}
int plan_rank(const StoreConfig& c, const comm::Communicator& g) {
  return checked_stage(c) == 0 ? 0 : g.rank();
}

// Host memory for one block on its way into or out of the store: pinned pool memory where the
// store has a pool (so it counts against the host budget), else a plain allocation reported to
// the tracker as host I/O.
class HostStaging {
 public:
  HostStaging() = default;
  explicit HostStaging(offload::PinnedBuffer b) : pinned_(std::move(b)) {}
  HostStaging(size_t bytes, MemoryTracker& tracker, const char* label)
      : plain_(bytes), tracker_(&tracker), label_(label) {
    tracker_->on_alloc(Tier::host, Category::io, bytes, label_);
  }
  HostStaging(HostStaging&& o) noexcept { *this = std::move(o); }
  HostStaging& operator=(HostStaging&& o) noexcept {
    release();
    pinned_ = std::move(o.pinned_);
    plain_ = std::move(o.plain_);
    tracker_ = std::exchange(o.tracker_, nullptr);
    label_ = o.label_;
    return *this;
  }
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  ~HostStaging() { release(); }
  void* data() { return pinned_ ? pinned_.data() : static_cast<void*>(plain_.data()); }
  float* floats() { return static_cast<float*>(data()); }

 private:
  void release() {
    if (tracker_ != nullptr) tracker_->on_free(Tier::host, Category::io, plain_.size(), label_);
    tracker_ = nullptr;
    plain_ = {};
    pinned_.reset();
  }
  offload::PinnedBuffer pinned_;
  std::vector<std::byte> plain_;  // (bytes) when the store has no pinned pool
  MemoryTracker* tracker_ = nullptr;
  const char* label_ = "";
};

HostStaging host_staging(ShardStorage& storage, size_t bytes, const char* label) {
  if (offload::HostPool* pool = storage.host_pool())
    return HostStaging(pool->allocate(bytes, Category::io, label));
  return HostStaging(bytes, storage.allocator().tracker(), label);
}

}  // namespace

PartitionStore::PartitionStore(std::vector<UnitSpec> units, const StoreConfig& config,
                               const AdamWConfig& optimizer, comm::Communicator& group,
                               DeviceAllocator& allocator, const StoreGroups& groups)
    : config_(config),
      optimizer_(optimizer),
      group_(group),
      plan_(std::move(units), plan_ranks(config, group), plan_rank(config, group),
            config.shard_align_elems) {
  TZ_CHECK(config.compute == DType::f32 || (config.compute == config.placement.working &&
                                            config.placement.working != DType::f32),
           std::string("PartitionStore: parameters handed out in ") + dtype_name(config.compute) +
               " from " + dtype_name(config.placement.working) + " working parameters",
           "set StoreConfig::compute to fp32 or to the 16-bit working type");
  storage_ = std::make_unique<ShardStorage>(
      plan_, config_.stage, place_units(plan_, config.stage, config.placement), config_, allocator);
  background_ = std::make_unique<BackgroundUpdate>(plan_.num_units(), config_.nvme_read_buffers);
  fetcher_ = std::make_unique<Fetcher>(config_, *storage_, *background_, group_, counters_);
  auto flush = [this] { fetcher_->flush(); };
  reducer_ = std::make_unique<GradientReducer>(config_, *storage_, *background_, group_, counters_,
                                               flush, [this](size_t u) { on_reduced(u); });
  norm_ = std::make_unique<GradientNorm>(config_.stage, *storage_, group_, groups, flush);
  in_memory_ = std::make_unique<InMemoryAdamW>(*storage_, optimizer_);
  nvme_ = std::make_unique<NvmeAdamW>(*storage_, *background_, config_, optimizer_);
  backups_ = std::make_unique<SpeculativeBackup>(*storage_);
  backward_ = std::make_unique<BackwardUpdate>([this](size_t u) { update_during_backward(u); });
  // Tied units are summed over the tie group, and replicated tensors synchronised over the
  // replica group, only at the step: their shards are not final before it.
  tie_or_replica_ = (groups.tie != nullptr && groups.tie->size() > 1) ||
                    (groups.replica != nullptr && groups.replica->size() > 1);
}

PartitionStore::~PartitionStore() {
  // The optimizer workers use the NVMe pipeline's slots and the arenas: they end first.
  backward_.reset();  // logs its error, if any
  try {
    background_->join();
  } catch (const std::exception& e) {
    log::error(std::string("the background optimizer step failed: ") + e.what());
  } catch (...) {
    log::error("the background optimizer step failed");
  }
}

void PartitionStore::check_unit(const char* op, size_t unit) const {
  TZ_CHECK(unit < plan_.num_units(),
           std::string("PartitionStore::") + op + ": unit " + std::to_string(unit) +
               " does not exist (the store has " + std::to_string(plan_.num_units()) + " units)",
           "units are numbered as in the unit list the store was built from");
}

bool PartitionStore::persistent(size_t unit) const {
  check_unit("persistent", unit);
  return fetcher_->persistent(unit);
}

const std::vector<UnitPlacement>& PartitionStore::placement() const {
  return storage_->placement();
}

const std::vector<size_t>& PartitionStore::trace() const {
  return fetcher_->trace();
}

size_t PartitionStore::live_elems() const {
  return fetcher_->live_elems();
}

void PartitionStore::begin_pass(PassKind kind) {
  fetcher_->begin_pass(kind);
}

void PartitionStore::flush_collectives() {
  fetcher_->flush();
}

const float* PartitionStore::acquire_params(size_t unit) {
  check_unit("acquire_params", unit);
  check_not_updating("acquire_params", unit);
  TZ_CHECK(config_.compute == DType::f32,
           std::string("PartitionStore::acquire_params: this store hands its parameters out in ") +
               dtype_name(config_.compute) + " (StoreConfig::compute)",
           "call acquire_params16, or build the store with compute fp32");
  return static_cast<const float*>(fetcher_->acquire(unit));
}

const void* PartitionStore::acquire_params16(size_t unit) {
  check_unit("acquire_params16", unit);
  check_not_updating("acquire_params16", unit);
  TZ_CHECK(config_.compute != DType::f32,
           "PartitionStore::acquire_params16: this store hands its parameters out in fp32 "
           "(StoreConfig::compute)",
           "call acquire_params, or build the store with compute set to its 16-bit working type");
  return fetcher_->acquire(unit);
}

void PartitionStore::release_params(size_t unit) {
  check_unit("release_params", unit);
  fetcher_->release(unit);
}

float* PartitionStore::acquire_grads(size_t unit) {
  check_unit("acquire_grads", unit);
  check_not_updating("acquire_grads", unit);
  return reducer_->acquire(unit);
}

void PartitionStore::grads_done(size_t unit) {
  check_unit("grads_done", unit);
  TZ_CHECK(
      reducer_->open(unit),
      "PartitionStore::grads_done: unit " + plan_.units()[unit].name + " has no open gradients",
      "call acquire_grads before grads_done, once per backward of the unit");
  try {
    fetcher_->check_reduction(unit);
  } catch (...) {
    reducer_->discard(unit);  // closed, so a later call reports this error, not open gradients
    throw;
  }
  reducer_->done(unit);
}

void PartitionStore::set_gradient_sync(bool sync) {
  reducer_->set_sync(sync);
}

bool PartitionStore::gradient_sync() const {
  return reducer_->sync();
}

void PartitionStore::set_device_timeline(DeviceTimeline* timeline) {
  timeline_ = timeline;
  fetcher_->set_device_timeline(timeline);
  reducer_->set_device_timeline(timeline);
}

void PartitionStore::zero_grads() {
  for (size_t u = 0; u < plan_.num_units(); ++u)
    TZ_CHECK(
        !reducer_->open(u),
        "PartitionStore::zero_grads: unit " + plan_.units()[u].name + " still has open gradients",
        "call grads_done for every unit before zero_grads");
  if (planned_.active) {
    finish_backward_updates();
    TZ_CHECK(std::none_of(planned_.updated.begin(), planned_.updated.end(),
                          [](char c) { return c != 0; }),
             "PartitionStore::zero_grads: units were updated during the backward of a step that "
             "was never taken",
             "call step() after every plan_step()");
    planned_ = PlannedStep{};
    backups_->release_all();
  }
  reducer_->zero();
  begin_pass(PassKind::train);
}

StoreStepStats PartitionStore::step(double lr, double clip, double loss_scale) {
  const double entered = monotonic_seconds();
  const bool planned = planned_.active;
  TZ_CHECK(
      !planned || (lr == planned_.lr && clip == planned_.clip && loss_scale == planned_.loss_scale),
      "PartitionStore::step: lr " + std::to_string(lr) + ", clip " + std::to_string(clip) +
          ", loss scale " + std::to_string(loss_scale) + " differ from plan_step's (" +
          std::to_string(planned_.lr) + ", " + std::to_string(planned_.clip) + ", " +
          std::to_string(planned_.loss_scale) + ")",
      "pass step() the values given to plan_step()");
  background_->join();
  for (size_t u = 0; u < plan_.num_units(); ++u)
    TZ_CHECK(fetcher_->references(u) == 0 && !reducer_->open(u),
             "PartitionStore::step: unit " + plan_.units()[u].name +
                 " is still acquired (params or gradients)",
             "release every unit and call grads_done before the optimizer step");
  reducer_->finish_all();  // the last units' updates are queued as their reductions land
  fetcher_->end_training_pass();
  std::vector<char> updated = planned_.updated;      // (units) updated during the backward
  const std::vector<char> handed = planned_.handed;  // (units) queued on the worker
  reducer_->copy_slices_to_host(handed);             // the handed units' slices are copied already
  norm_->sum_tied_gradients();
  norm_->sync_replicated_gradients();

  TZ_CHECK(loss_scale > 0.0 && std::isfinite(loss_scale),
           "PartitionStore::step: loss scale " + std::to_string(loss_scale) + " is not positive",
           "pass 1 without loss scaling");
  StoreStepStats stats;
  double exposed = 0.0;
  std::vector<std::optional<double>> known;  // (units) norm shares the worker took
  const bool speculative = planned && planned_.speculative;
  const kernels::AdamWParams speculated = planned_.base;
  if (planned) {
    exposed += finish_backward_updates();
    const BackwardUpdate::Busy busy = backward_->take_busy_seconds(entered);
    counters_.optimizer_worker_s = busy.total_s;
    counters_.optimizer_overlapped_s = busy.before_s;
    backward_->take_units();  // units handed over, updated or only measured
    counters_.optimizer_overlapped_units =
        static_cast<size_t>(std::count(updated.begin(), updated.end(), char{1}));
    known = std::move(planned_.sum_squares);
    planned_ = PlannedStep{};
  }
  // The units the worker measured add their shares in place, in unit order: the same sum.
  stats.grad_norm = std::sqrt(norm_->global_sum_squares(known)) / loss_scale;
  const bool finite = std::isfinite(stats.grad_norm);
  if (clip > 0.0 && finite) {
    const double coef = clip / (stats.grad_norm + 1e-6);
    if (coef < 1.0) stats.clip_scale = coef;
  }
  if (speculative) {
    const double s0 = monotonic_seconds();
    counters_.optimizer_redone_units =
        settle_speculation(updated, handed, speculated, lr, stats.clip_scale / loss_scale, finite);
    exposed += monotonic_seconds() - s0;  // the restores, when clipping bound
  }
  const bool any_updated =
      std::any_of(updated.begin(), updated.end(), [](char c) { return c != 0; });
  if (!finite && loss_scale != 1.0) {
    stats.skipped = true;  // every rank sees the same norm, so every rank skips
    counters_.optimizer_exposed_s = exposed;
    return stats;
  }
  if (!std::isfinite(stats.grad_norm))
    TZ_THROW("gradient norm is not finite at optimizer step " + std::to_string(t_ + 1) +
                 " (ZeRO stage " + std::to_string(config_.stage) + ", " + group_.describe() + ")",
             any_updated ? "lower the learning rate; the units updated during the backward "
                           "(tierzero.optimizer_overlap) took the step, the others did not"
                         : "lower the learning rate; the parameters were not updated");
  ++t_;
  const kernels::AdamWParams base = step_params(lr, stats.clip_scale / loss_scale, t_);
  Device& device = storage_->device();
  Stream& st = device.default_stream();
  const double t0 = monotonic_seconds();
  // Issued on the default stream, not waited for: what reads the updated shards next (the
  // gathers below, the next step's fetches and compute) orders itself after it on the device.
  const size_t span = timeline_ ? timeline_->open(st) : DeviceTimeline::kUntimed;
  for (size_t u = 0; u < plan_.num_units(); ++u)
    if (storage_->placement(u).optimizer != Tier::nvme && !(any_updated && updated[u]))
      in_memory_->update(u, base);
  if (timeline_)
    timeline_->close(span, st, Track::optimizer, "adamw");
  else
    ActivityLog::global().record(Track::optimizer, "adamw", t0, monotonic_seconds());
  // Stage 3 on the CPU backend: the NVMe pipeline runs behind the next forward (below stage 3 the
  // updated parameters are all-gathered right after the step; on CUDA its copies would share the
  // training thread's stream).
  const bool behind_forward = config_.stage == 3 && device.kind() == DeviceKind::cpu;
  nvme_->step(base, behind_forward, updated);
  exposed += monotonic_seconds() - t0;
  counters_.optimizer_exposed_s = exposed;

  // Make the update visible. Stage 0: every rank made the same update. Stages 1-2: each rank
  // updated its slice of the full parameters; gather every unit in place. Stage 3: the shard is
  // the parameter; it is gathered on next use.
  if (config_.stage == 1 || config_.stage == 2) {
    // The gathers start once the update has landed, on the device: the host does not wait.
    std::unique_ptr<Event> updated_on_device = device.create_event();
    updated_on_device->record(st);
    const double g0 = monotonic_seconds();
    size_t bytes = 0;
    std::vector<comm::CommRequest> gathers;
    bool timed = false;    // on the device timeline, each gather where it ran
    size_t in_flight = 0;  // padded elements of `gathers`
    const size_t bucket = std::max<size_t>(1, config_.allgather_bucket_elems);
    const DType working = config_.placement.working;
    for (size_t u = 0; u < plan_.num_units(); ++u) {
      const UnitPartition& p = plan_.partition(u);
      if (p.padded_numel == 0) continue;
      if (!gathers.empty() && in_flight + p.padded_numel > bucket) {
        comm::wait_all(gathers);  // the bucket is full: it lands before the next one goes
        gathers.clear();
        in_flight = 0;
      }
      comm::IssuedCollective gather = comm::issue_collective(
          timeline_, group_, updated_on_device.get(), "all_gather params", static_cast<int64_t>(u),
          p.padded_numel * dtype_size(working), [&] {
            return group_.all_gather_async(storage_->param_shard_raw(u),
                                           storage_->full_params_raw(u), p.shard_numel, working,
                                           updated_on_device.get());
          });
      gathers.push_back(std::move(gather.request));
      timed = gather.timed;
      in_flight += p.padded_numel;
      bytes += p.padded_numel * dtype_size(working);
    }
    comm::wait_all(gathers);
    if (!timed)
      ActivityLog::global().record(Track::collective, "all_gather params", g0, monotonic_seconds(),
                                   bytes);
  }
  return stats;
}

kernels::AdamWParams PartitionStore::step_params(double lr, double grad_scale, int64_t t) const {
  return kernels::AdamWParams{static_cast<float>(lr),
                              static_cast<float>(optimizer_.beta1),
                              static_cast<float>(optimizer_.beta2),
                              static_cast<float>(optimizer_.eps),
                              0.0f,
                              static_cast<float>(grad_scale),
                              t};
}

void PartitionStore::plan_step(double lr, double clip, double loss_scale, size_t micro_batches) {
  TZ_CHECK(micro_batches > 0, "PartitionStore::plan_step: no micro-batches",
           "pass the step's number of micro-batches (gradient_accumulation_steps)");
  TZ_CHECK(!planned_.active, "PartitionStore::plan_step: a step is planned already",
           "call step() before planning the next one");
  // Only where the shards are final once reduced (tied and replicated gradients are summed or
  // synchronised at the step).
  if (config_.optimizer_overlap == OptimizerOverlap::off || tie_or_replica_) return;
  // An update that needs a coefficient from the global norm (clipping, loss scaling) waits for
  // the step, unless speculative: then it assumes the coefficient 1 and keeps a backup.
  const bool needs_norm = clip > 0.0 || loss_scale != 1.0;
  planned_.active = true;
  planned_.lr = lr;
  planned_.clip = clip;
  planned_.loss_scale = loss_scale;
  planned_.micro_batches = micro_batches;
  planned_.speculative = needs_norm && config_.optimizer_overlap == OptimizerOverlap::speculative;
  planned_.update = !needs_norm || planned_.speculative;
  planned_.reduced.assign(plan_.num_units(), 0);
  planned_.handed.assign(plan_.num_units(), 0);
  planned_.updated.assign(plan_.num_units(), 0);
  planned_.sum_squares.assign(plan_.num_units(), std::nullopt);
  // What step() computes when clipping does not bind (its clip scale stays exactly 1.0): the
  // gradient scale 1 / loss_scale (exactly 1 without loss scaling), step t + 1.
  planned_.base = step_params(lr, 1.0 / loss_scale, t_ + 1);
}

size_t PartitionStore::settle_speculation(std::vector<char>& updated,
                                          const std::vector<char>& handed,
                                          const kernels::AdamWParams& speculated, double lr,
                                          double scale, bool finite) {
  // The update the step makes now, compared field by field with the one the worker made: equal
  // bits are equal updates (the kernel is a function of its inputs).
  const kernels::AdamWParams real = step_params(lr, scale, t_ + 1);
  const bool kept = finite && real.lr == speculated.lr && real.beta1 == speculated.beta1 &&
                    real.beta2 == speculated.beta2 && real.eps == speculated.eps &&
                    real.weight_decay == speculated.weight_decay &&
                    real.grad_scale == speculated.grad_scale && real.step == speculated.step;
  size_t undone = 0;
  if (!kept) {
    const double t0 = monotonic_seconds();
    for (size_t u = 0; u < plan_.num_units(); ++u) {
      // The gathered copy is stale, and a read-ahead of the shard must not race the write. Every
      // handed unit, on every rank alike (whether this rank's backup had room or not), since a
      // drop may issue a held-back gather.
      if (config_.stage == 3 && handed[u]) fetcher_->drop(u);
      if (!updated[u]) continue;
      backups_->restore(u);
      updated[u] = 0;  // the step updates it in the reference order (or skips it)
      ++undone;
    }
    if (undone > 0) {
      nvme_->discard_staged_reads();  // they may hold the speculated states
      ActivityLog::global().record(Track::optimizer, "undo speculative adamw", t0,
                                   monotonic_seconds());
    }
  }
  backups_->release_all();
  return undone;
}

void PartitionStore::on_reduced(size_t unit) {
  if (!planned_.active || planned_.handed[unit]) return;
  if (storage_->placement(unit).optimizer == Tier::device) return;  // updated at the step
  // One reduction per micro-batch (with gradient sync on; deferred gradients are reduced once,
  // at the step, and never count this far): the last one makes the shard final.
  if (++planned_.reduced[unit] < planned_.micro_batches) return;
  reducer_->copy_slice_to_host(unit);  // below stage 2: the owned slice to the host shard
  if (!backward_->running()) {
    // The NVMe pipeline's slots are the worker's from now on: the previous step's update behind
    // this forward ends first (its units were all fetched by the forward already).
    background_->join();
  }
  planned_.handed[unit] = 1;
  if (planned_.update) {
    if (!planned_.speculative || backups_->reserve(unit))
      planned_.updated[unit] = 1;
    else
      ++counters_.optimizer_unbacked_units;  // no room for its backup: updated at the step
  }
  backward_->push(unit);  // rethrows the worker's error
}

void PartitionStore::update_during_backward(size_t unit) {
  // Its share of the norm first, from the final shard the update is about to read too.
  planned_.sum_squares[unit] = norm_->unit_sum_squares(unit);
  if (!planned_.updated[unit]) return;
  if (planned_.speculative) backups_->save(unit);
  const double t0 = monotonic_seconds();
  if (storage_->placement(unit).optimizer == Tier::nvme)
    nvme_->update_unit(unit, planned_.base);
  else
    in_memory_->update(unit, planned_.base);
  ActivityLog::global().record(Track::optimizer, "adamw during backward", t0, monotonic_seconds(),
                               0, static_cast<int64_t>(unit));
}

double PartitionStore::finish_backward_updates() {
  return backward_->finish();
}

void PartitionStore::check_not_updating(const char* op, size_t unit) const {
  TZ_CHECK(!planned_.active || !planned_.handed[unit],
           std::string("PartitionStore::") + op + ": unit " + plan_.units()[unit].name +
               " is used after its last gradient of the step, while its optimizer update (or its "
               "share of the gradient norm) runs during the backward",
           "finish each unit's gradient once per micro-batch and use it no more in that pass, or "
           "set tierzero.optimizer_overlap to off");
}

void PartitionStore::load_unit(size_t unit, const float* host_values) {
  TZ_CHECK(host_values != nullptr || plan_.units()[unit].numel == 0,
           "PartitionStore::load_unit: null values for unit " + plan_.units()[unit].name, "");
  load_unit_from(unit, [host_values](size_t begin, size_t count, float* out) {
    std::memcpy(out, host_values + begin, count * sizeof(float));
  });
}

void PartitionStore::load_unit_from(size_t unit, const UnitValues& values) {
  check_unit("load_unit", unit);
  backward_->finish();
  background_->join();
  nvme_->discard_staged_reads();  // they may hold the old master values
  TZ_CHECK(fetcher_->references(unit) == 0,
           "PartitionStore::load_unit: unit " + plan_.units()[unit].name + " is acquired",
           "load parameters before training or between steps");
  const UnitPartition& p = plan_.partition(unit);
  const size_t owned = p.owned_numel(plan_.rank());
  const size_t begin = p.shard_begin(plan_.rank());
  float* shard = nullptr;  // (shard_numel) this rank's shard, padding zero
  HostStaging full;
  HostStaging own;
  if (config_.stage < 3) {
    full = host_staging(*storage_, p.padded_numel * sizeof(float), "zero load staging (unit)");
    float* f = full.floats();  // (padded_numel) the whole unit, padding zero
    std::memset(f, 0, p.padded_numel * sizeof(float));
    values(0, p.numel, f);
    storage_->load_full_params(unit, f);
    shard = f + begin;
  } else {
    own = host_staging(*storage_, p.shard_numel * sizeof(float), "zero load staging (shard)");
    shard = own.floats();
    std::memset(shard, 0, p.shard_numel * sizeof(float));
    if (owned > 0) values(begin, owned, shard);
    // The gathered copy is stale, and a read-ahead of these extents must not race the write.
    fetcher_->drop(unit);
    storage_->write_shard(StateBuffer::param_shard, unit, shard);
  }
  if (!storage_->placement(unit).master_is_param)
    storage_->write_shard(StateBuffer::master, unit, shard);
}

void PartitionStore::read_unit(size_t unit, float* host_values) {
  check_unit("read_unit", unit);
  backward_->finish();  // a unit updated during the backward is read once its update is done
  counters_.stall_s += background_->wait(unit, false);
  if (config_.stage < 3)
    storage_->read_full_params(unit, host_values);
  else
    fetcher_->read(unit, host_values);
}

std::vector<PartitionStore::StateBlock> PartitionStore::state_blocks() const {
  // The working parameters, then the optimizer's states; a master that is the parameter shard
  // itself has no slot of its own.
  constexpr StateBuffer kinds[] = {StateBuffer::params_full, StateBuffer::param_shard,
                                   StateBuffer::master, StateBuffer::adam_m, StateBuffer::adam_v};
  const StateArenas& arenas = storage_->arenas();
  std::vector<StateBlock> blocks;
  for (size_t u = 0; u < plan_.num_units(); ++u)
    for (StateBuffer kind : kinds) {
      if (!arenas.has(kind, u)) continue;
      StateBlock b;
      b.unit = u;
      b.kind = kind;
      b.tier = arenas.slot(kind, u).tier;
      b.elems = arenas.slot(kind, u).elems;
      b.elem_bytes = arenas.elem_bytes(kind);
      b.begin = kind == StateBuffer::params_full ? 0 : plan_.partition(u).shard_begin(plan_.rank());
      blocks.push_back(b);
    }
  return blocks;
}

void PartitionStore::save_state(
    const std::function<void(const StateBlock&, const void* data)>& sink) {
  backward_->finish();
  background_->join();  // every update published (and written to NVMe)
  for (const StateBlock& b : state_blocks()) {
    HostStaging host =
        host_staging(*storage_, b.bytes(), "checkpoint staging");  // (elems x elem_bytes)
    storage_->read_slot(b.kind, b.unit, host.data());
    sink(b, host.data());
  }
}

void PartitionStore::load_state(const std::function<void(const StateBlock&, void* data)>& source,
                                int64_t steps_taken) {
  background_->join();
  nvme_->discard_staged_reads();  // they may hold the old master values
  for (const StateBlock& b : state_blocks()) {
    TZ_CHECK(fetcher_->references(b.unit) == 0,
             "PartitionStore::load_state: unit " + plan_.units()[b.unit].name + " is acquired",
             "load a checkpoint before training or between steps");
    HostStaging host =
        host_staging(*storage_, b.bytes(), "checkpoint staging");  // (elems x elem_bytes)
    source(b, host.data());
    // The gathered copy is stale, and a read-ahead of these extents must not race the write.
    if (b.kind == StateBuffer::param_shard) fetcher_->drop(b.unit);
    storage_->write_slot(b.kind, b.unit, host.data());
  }
  TZ_CHECK(steps_taken >= 0, "negative optimizer step count in a checkpoint", "");
  t_ = steps_taken;
}

offload::HostPool* PartitionStore::host_pool() {
  return storage_->host_pool();
}

offload::SwapSpace* PartitionStore::nvme_swap() {
  return storage_->swap();
}

}  // namespace tierzero::zero
