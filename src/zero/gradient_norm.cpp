// The global gradient norm over the partition and model-parallel groups, and the tied units'
// gradient sum (see gradient_norm.hpp).
#include "gradient_norm.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "group_exchange.hpp"
#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/zero/unit_groups.hpp"

namespace tierzero::zero {

namespace {

// fn(chunk offset, slot, elements) for each part of unit u's shard range [at, at + count) that
// lies in a segment of a replicated tensor (`replicated`) or of the others; `slot` is where the
// part falls when those segments are packed one after another.
template <typename Fn>
void segment_parts(const PartitionPlan& plan, size_t u, bool replicated, size_t at, size_t count,
                   Fn fn) {
  size_t slot = 0;
  for (const ShardSegment& seg : plan.segments(u)) {
    if (plan.units()[u].tensors[seg.tensor].replicated != replicated) continue;
    const size_t lo = std::max(at, seg.shard_offset);
    const size_t hi = std::min(at + count, seg.shard_offset + seg.numel);
    if (lo < hi) fn(lo - at, slot + (lo - seg.shard_offset), hi - lo);
    slot += seg.numel;
  }
}

constexpr size_t kHostTerm = SIZE_MAX;  // a norm term computed on the host, not in a device slot

struct DeviceSum {
  const float* x;  // (n) a device gradient shard, or a segment of one
  size_t n;
};

// Each device sum of squares (the bits of Kernels::sum_squares), summed on the device and read
// back with one copy: the one host wait the norm needs.
std::vector<double> device_sums_to_host(ShardStorage& storage, const std::vector<DeviceSum>& sums) {
  std::vector<double> host(sums.size());  // (sums)
  if (sums.empty()) return host;
  Device& device = storage.device();
  kernels::Kernels& k = storage.kernels_for(Tier::device);
  DeviceBuffer slots =
      storage.allocator().allocate(sums.size() * sizeof(double), Category::workspace,
                                   "zero grad-norm sums");  // (sums) fp64
  auto* out = static_cast<double*>(slots.data());
  for (size_t i = 0; i < sums.size(); ++i) k.sum_squares_to(out + i, sums[i].x, sums[i].n);
  Stream& st = device.default_stream();
  device.copy(host.data(), out, host.size() * sizeof(double), CopyKind::device_to_host, st);
  st.synchronize();
  return host;
}

}  // namespace

GradientNorm::GradientNorm(int stage, ShardStorage& storage, comm::Communicator& group,
                           const StoreGroups& groups, std::function<void()> flush_collectives)
    : stage_(stage),
      storage_(storage),
      group_(group),
      groups_(groups),
      flush_collectives_(std::move(flush_collectives)) {
  check_tied_shapes();
}

void GradientNorm::check_tied_shapes() {
  if (groups_.tie == nullptr || groups_.tie->size() == 1) return;
  const PartitionPlan& plan = storage_.plan();
  size_t units = 0, elems = 0;
  for (size_t u = 0; u < plan.num_units(); ++u) {
    if (!plan.units()[u].tied) continue;
    ++units;
    elems += plan.partition(u).shard_numel;
  }
  // (hi, lo) floats carry the element count exactly; the unit count fits a float as it is.
  const auto hi = static_cast<float>(elems);
  const auto lo = static_cast<float>(static_cast<double>(elems) - static_cast<double>(hi));
  const std::vector<float> counts =
      all_gather_pair(*groups_.tie, storage_.allocator(), static_cast<float>(units), 0.0f,
                      "zero tied unit check");  // (ranks, 2)
  const std::vector<float> sizes =
      all_gather_pair(*groups_.tie, storage_.allocator(), hi, lo, "zero tied unit check");
  auto describe = [&](size_t r) {
    const double n = static_cast<double>(sizes[2 * r]) + static_cast<double>(sizes[2 * r + 1]);
    return "rank " + std::to_string(r) + " holds " +
           std::to_string(static_cast<size_t>(counts[2 * r])) + " tied unit(s) of " +
           std::to_string(static_cast<size_t>(n)) + " shard elements";
  };
  for (size_t r = 1; r < counts.size() / 2; ++r)
    TZ_CHECK(counts[2 * r] == counts[0] && sizes[2 * r] == sizes[0] && sizes[2 * r + 1] == sizes[1],
             "tied units differ across the tie group (" + groups_.tie->describe() +
                 "): " + describe(0) + " while " + describe(r),
             "every rank sharing a tied unit must build it with the same tensors and the same "
             "partition group size");
}

void GradientNorm::sum_tied_gradients() {
  if (groups_.tie == nullptr || groups_.tie->size() == 1) return;
  const PartitionPlan& plan = storage_.plan();
  Device& device = storage_.device();
  Stream& st = device.default_stream();
  flush_collectives_();
  // In pieces of the NVMe chunk on every tier, so the ranks of the tie group issue the same
  // all-reduces wherever each keeps its copy's gradients (the sum is element by element).
  const size_t piece = std::max<size_t>(storage_.arenas().chunk_elems, 1);
  for (size_t u = 0; u < plan.num_units(); ++u) {
    if (!plan.units()[u].tied) continue;
    const size_t n = plan.partition(u).shard_numel;
    if (n == 0) continue;
    const double t0 = monotonic_seconds();
    const Tier tier = storage_.placement(u).grad;
    if (tier == Tier::device) {
      float* shard = storage_.grad_shard_ptr(u);
      st.synchronize();
      for (size_t at = 0; at < n; at += piece)
        groups_.tie->all_reduce(shard + at, shard + at, std::min(piece, n - at), DType::f32,
                                comm::ReduceOp::sum);
    } else {
      // Through device memory: a communicator may take device buffers only (NCCL).
      DeviceBuffer staged = storage_.allocator().allocate(
          std::min(piece, n) * sizeof(float), Category::comm, "zero tied gradient");  // fp32
      const auto reduce = [&](size_t count, float* values) {
        device.copy(staged.data(), values, count * sizeof(float), CopyKind::host_to_device, st);
        st.synchronize();
        groups_.tie->all_reduce(staged.data(), staged.data(), count, DType::f32,
                                comm::ReduceOp::sum);
        device.copy(values, staged.data(), count * sizeof(float), CopyKind::device_to_host, st);
        st.synchronize();
      };
      if (tier == Tier::nvme) {
        each_nvme_grad_chunk(u, true, [&](size_t, size_t count, float* values) {
          for (size_t at = 0; at < count; at += piece)
            reduce(std::min(piece, count - at), values + at);
        });
      } else {
        float* shard = storage_.grad_shard_ptr(u);
        for (size_t at = 0; at < n; at += piece) reduce(std::min(piece, n - at), shard + at);
      }
    }
    ActivityLog::global().record(Track::collective, "all_reduce tied grads", t0,
                                 monotonic_seconds(), n * sizeof(float), static_cast<int64_t>(u));
  }
}

void GradientNorm::each_nvme_grad_chunk(size_t unit, bool write_back,
                                        const std::function<void(size_t, size_t, float*)>& fn,
                                        const std::function<bool(size_t, size_t)>& wanted) {
  StateArenas& arenas = storage_.arenas();
  const size_t n = storage_.plan().partition(unit).shard_numel;
  if (n == 0) return;
  const bool clear = storage_.grad_clear(unit);
  const size_t chunk = std::min(arenas.chunk_elems, n);
  offload::PinnedBuffer buffer = storage_.host_pool()->allocate(
      chunk * sizeof(float), Category::io, "zero nvme grad chunk");  // (chunk) fp32
  auto* values = static_cast<float*>(buffer.data());
  for (size_t at = 0; at < n; at += chunk) {
    const size_t count = std::min(chunk, n - at);
    // A clear shard's chunks hold stale bytes on NVMe: once it is written, all of it must be.
    if (wanted && !wanted(at, count) && !(clear && write_back)) continue;
    if (clear) {
      std::fill_n(values, count, 0.0f);
    } else {
      auto reads = arenas.read(StateBuffer::grad_shard, unit, at, count, values);
      wait_io(reads);
    }
    fn(at, count, values);
    if (write_back) {
      auto writes = arenas.write(StateBuffer::grad_shard, unit, at, count, values);
      wait_io(writes);
    }
  }
  if (write_back) storage_.set_grad_clear(unit, false);
}

size_t replicated_shard_elems(const PartitionPlan& plan) {
  size_t n = 0;
  for (size_t u = 0; u < plan.num_units(); ++u)
    for (const ShardSegment& seg : plan.segments(u))
      if (plan.units()[u].tensors[seg.tensor].replicated) n += seg.numel;
  return n;
}

size_t max_replicated_shard_elems(const PartitionPlan& plan) {
  return max_replicated_shard_elems(plan_groups(plan, std::vector<UnitPlacement>(plan.num_units())),
                                    plan.ranks());
}

void GradientNorm::sync_replicated_gradients() {
  if (groups_.replica == nullptr || groups_.replica->size() == 1) return;
  const PartitionPlan& plan = storage_.plan();
  const size_t total = replicated_shard_elems(plan);  // the same on every replica rank
  if (total == 0) return;
  Device& device = storage_.device();
  Stream& st = device.default_stream();
  flush_collectives_();
  // One packed broadcast (a device buffer: a communicator may take device buffers only).
  DeviceBuffer packed = storage_.allocator().allocate(total * sizeof(float), Category::comm,
                                                      "zero replicated gradients");  // (total) fp32
  const double t0 = monotonic_seconds();
  // fn(shard part, packed slot, elements, copy kind to the device) per replicated segment in
  // memory; fn_nvme(unit, first segment's slot) per unit whose gradient shard is on NVMe.
  auto each_segment = [&](auto&& fn, auto&& fn_nvme) {
    size_t at = 0;
    for (size_t u = 0; u < plan.num_units(); ++u) {
      const Tier tier = storage_.placement(u).grad;
      const CopyKind to_device =
          tier == Tier::device ? CopyKind::device_to_device : CopyKind::host_to_device;
      if (tier == Tier::nvme) {
        const size_t first = at;
        for (const ShardSegment& seg : plan.segments(u))
          if (plan.units()[u].tensors[seg.tensor].replicated) at += seg.numel;
        if (at > first) fn_nvme(u, first);
        continue;
      }
      for (const ShardSegment& seg : plan.segments(u)) {
        if (!plan.units()[u].tensors[seg.tensor].replicated) continue;
        fn(storage_.grad_shard_ptr(u) + seg.shard_offset, packed.f32() + at, seg.numel, to_device);
        at += seg.numel;
      }
    }
  };
  const bool root = groups_.replica->rank() == 0;
  // The chunks of an NVMe shard that a replicated segment touches.
  auto touched = [&plan](size_t u) {
    return [&plan, u](size_t at, size_t count) {
      bool any = false;
      segment_parts(plan, u, true, at, count, [&](size_t, size_t, size_t) { any = true; });
      return any;
    };
  };
  each_segment([&](float* shard, float* slot, size_t n,
                   CopyKind kind) { device.copy(slot, shard, n * sizeof(float), kind, st); },
               [&](size_t u, size_t slot) {
                 if (!root) return;  // the others' packed values are overwritten by the broadcast
                 each_nvme_grad_chunk(
                     u, false,
                     [&](size_t at, size_t count, float* values) {
                       segment_parts(plan, u, true, at, count, [&](size_t off, size_t s, size_t n) {
                         device.copy(packed.f32() + slot + s, values + off, n * sizeof(float),
                                     CopyKind::host_to_device, st);
                       });
                       st.synchronize();  // the chunk buffer is refilled next
                     },
                     touched(u));
               });
  st.synchronize();
  groups_.replica->broadcast(packed.data(), total, DType::f32, 0);
  each_segment(
      [&](float* shard, float* slot, size_t n, CopyKind kind) {
        const CopyKind back = kind == CopyKind::device_to_device ? CopyKind::device_to_device
                                                                 : CopyKind::device_to_host;
        device.copy(shard, slot, n * sizeof(float), back, st);
      },
      [&](size_t u, size_t slot) {
        if (root) return;  // the broadcast's values are its own
        each_nvme_grad_chunk(
            u, true,
            [&](size_t at, size_t count, float* values) {
              segment_parts(plan, u, true, at, count, [&](size_t off, size_t s, size_t n) {
                device.copy(values + off, packed.f32() + slot + s, n * sizeof(float),
                            CopyKind::device_to_host, st);
              });
              st.synchronize();  // before the chunk is written
            },
            touched(u));
      });
  st.synchronize();
  ActivityLog::global().record(Track::collective, "broadcast replicated grads", t0,
                               monotonic_seconds(), total * sizeof(float), -1);
}

double GradientNorm::unit_sum_squares(size_t unit) {
  TZ_CHECK((groups_.tie == nullptr || groups_.tie->size() == 1) &&
               (groups_.replica == nullptr || groups_.replica->size() == 1),
           "GradientNorm::unit_sum_squares: unit " + storage_.plan().units()[unit].name +
               " belongs to a model with tied or replicated groups across ranks",
           "those gradients are final only at the step: take the norm there");
  if (storage_.placement(unit).grad == Tier::nvme) return nvme_sum_squares(unit, false);
  kernels::Kernels& k = storage_.kernels_for(storage_.placement(unit).grad);
  return k.sum_squares(storage_.grad_shard_ptr(unit), storage_.plan().partition(unit).shard_numel);
}

double GradientNorm::local_sum_squares(const std::vector<std::optional<double>>& known) {
  // At stage 0 every rank owns (and holds) the whole mean gradient; at stage 1 every rank holds
  // it but owns only its shard. The terms are added in unit order; those of device shards are
  // summed on the device into `sums` and read back together, one host wait for the whole norm
  // (a read per unit drained the GPU's queue once per unit).
  const PartitionPlan& plan = storage_.plan();
  const bool skip_tied = groups_.tie != nullptr && groups_.tie->rank() != 0;
  const bool skip_replicated = groups_.replica != nullptr && groups_.replica->rank() != 0;
  struct Term {
    double value = 0.0;       // a host term
    size_t slot = kHostTerm;  // else: its index in the device sums
  };
  std::vector<Term> terms;
  std::vector<DeviceSum> device_sums;
  auto add = [&](Tier tier, const float* x, size_t n) {
    if (tier == Tier::device) {
      terms.push_back({0.0, device_sums.size()});
      device_sums.push_back({x, n});
    } else {
      terms.push_back({storage_.kernels_for(tier).sum_squares(x, n), kHostTerm});
    }
  };
  for (size_t u = 0; u < plan.num_units(); ++u) {
    const UnitSpec& spec = plan.units()[u];
    if (skip_tied && spec.tied) continue;
    // Taken by unit_sum_squares when the shard became final: the same value this loop would
    // add now (the same kernel call on the same final shard), added at the same place.
    if (u < known.size() && known[u].has_value()) {
      terms.push_back({*known[u], kHostTerm});
      continue;
    }
    const size_t n = plan.partition(u).shard_numel;
    const Tier tier = storage_.placement(u).grad;
    if (tier == Tier::nvme) {
      terms.push_back({nvme_sum_squares(u, skip_replicated), kHostTerm});
      continue;
    }
    const float* g = storage_.grad_shard_ptr(u);
    bool any_replicated = false;
    for (const TensorSpec& t : spec.tensors) any_replicated = any_replicated || t.replicated;
    if (!skip_replicated || !any_replicated) {
      add(tier, g, n);
      continue;
    }
    for (const ShardSegment& seg : plan.segments(u))
      if (!spec.tensors[seg.tensor].replicated) add(tier, g + seg.shard_offset, seg.numel);
  }
  const std::vector<double> sums = device_sums_to_host(storage_, device_sums);
  double local = 0.0;
  for (const Term& t : terms) local += t.slot == kHostTerm ? t.value : sums[t.slot];
  return local;
}

double GradientNorm::nvme_sum_squares(size_t unit, bool skip_replicated) {
  if (storage_.grad_clear(unit)) return 0.0;
  const PartitionPlan& plan = storage_.plan();
  kernels::Kernels& k = storage_.host_kernels();
  double sum = 0.0;
  each_nvme_grad_chunk(unit, false, [&](size_t at, size_t count, const float* values) {
    if (!skip_replicated) {
      sum += k.sum_squares(values, count);
      return;
    }
    segment_parts(plan, unit, false, at, count,
                  [&](size_t off, size_t, size_t n) { sum += k.sum_squares(values + off, n); });
  });
  return sum;
}

double GradientNorm::global_sum_squares(const std::vector<std::optional<double>>& known) {
  double total = local_sum_squares(known);
  if (stage_ > 0) {
    // Also on one rank: the (hi, lo) round trip is part of the value every stage > 0 clips with.
    flush_collectives_();  // collectives go out in the same order on every rank
    total = exact_group_sum(group_, storage_.allocator(), total, "zero grad-norm exchange");
  }
  for (comm::Communicator* g : groups_.model_parallel)
    if (g != nullptr && g->size() > 1)
      total = exact_group_sum(*g, storage_.allocator(), total, "zero grad-norm exchange (mp)");
  return total;
}

}  // namespace tierzero::zero
