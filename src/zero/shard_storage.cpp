// The partition store's persistent state and its offload resources (see shard_storage.hpp).
#include "shard_storage.hpp"

#include <cstring>
#include <string>

#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"

namespace tierzero::zero {

ShardStorage::ShardStorage(const PartitionPlan& plan, int stage,
                           const std::vector<UnitPlacement>& placement, const StoreConfig& config,
                           DeviceAllocator& allocator)
    : plan_(plan),
      stage_(stage),
      working_(config.placement.working),
      placement_(placement),
      allocator_(allocator),
      device_(allocator.device()),
      host_kernels_(kernels::make_cpu_kernels()) {
  bool host = false, nvme = false;
  for (const UnitPlacement& p : placement_) {
    host = host || p.param != Tier::device || p.optimizer != Tier::device;
    nvme = nvme || p.param == Tier::nvme || p.optimizer == Tier::nvme;
  }
  if (host)
    host_pool_ = std::make_unique<offload::HostPool>(config.host_budget_bytes, &device_,
                                                     allocator_.tracker());
  if (nvme) {
    TZ_CHECK(!config.nvme.directories.empty(),
             "NVMe placement needs a directory: nvme_path is empty",
             "set offload_param.nvme_path / offload_optimizer.nvme_path to a directory on the "
             "drive (several, comma-separated, stripe over several drives)");
    nvme_ = std::make_unique<offload::NvmeEngine>(config.nvme, host_pool_.get());
    swap_ = std::make_unique<offload::SwapSpace>(*nvme_, 0, allocator_.tracker());
  }
  arenas_ = std::make_unique<StateArenas>(plan_, stage_, placement_, config.placement, allocator_,
                                          host_pool_.get(), swap_.get());
  grad_clear_.assign(plan_.num_units(), 1);  // NVMe state starts as zeros
}

ShardStorage::~ShardStorage() = default;

Stream& ShardStorage::copy_stream() {
  // Only stores with parameters off the device copy shards to it (on the CPU: a worker thread).
  if (!copy_stream_) copy_stream_ = device_.create_stream();
  return *copy_stream_;
}

float* ShardStorage::param_shard_ptr(size_t unit) {
  if (stage_ == 3) return arenas_->ptr(StateBuffer::param_shard, unit);
  return arenas_->ptr(StateBuffer::params_full, unit) +
         plan_.partition(unit).shard_begin(plan_.rank());
}

void* ShardStorage::param_shard_raw(size_t unit) {
  if (stage_ == 3) return arenas_->raw(StateBuffer::param_shard, unit);
  return static_cast<std::byte*>(arenas_->raw(StateBuffer::params_full, unit)) +
         plan_.partition(unit).shard_begin(plan_.rank()) *
             arenas_->elem_bytes(StateBuffer::params_full);
}

void* ShardStorage::full_params_raw(size_t unit) {
  return arenas_->raw(StateBuffer::params_full, unit);
}

float* ShardStorage::grad_shard_ptr(size_t unit) {
  if (arenas_->has(StateBuffer::grad_shard, unit))
    return arenas_->ptr(StateBuffer::grad_shard, unit);
  return arenas_->ptr(StateBuffer::grads_full, unit) +
         plan_.partition(unit).shard_begin(plan_.rank());
}

StateBuffer ShardStorage::master_kind(size_t unit) const {
  if (!placement_[unit].master_is_param) return StateBuffer::master;
  return stage_ == 3 ? StateBuffer::param_shard : StateBuffer::params_full;
}

float* ShardStorage::master_ptr(size_t unit) {
  return placement_[unit].master_is_param ? param_shard_ptr(unit)
                                          : arenas_->ptr(StateBuffer::master, unit);
}

void ShardStorage::write_shard(StateBuffer kind, size_t unit, const float* host_shard) {
  const size_t n = plan_.partition(unit).shard_numel;
  if (n == 0) return;
  // 16-bit working parameters are rounded once here; the bits are then stored like any state.
  const size_t elem_bytes = arenas_->elem_bytes(kind);
  std::vector<uint16_t> bits;  // (shard_numel) working type, 16-bit kinds only
  const void* src = host_shard;
  if (elem_bytes != sizeof(float)) {
    bits.resize(n);
    host_kernels_->convert_from_f32(bits.data(), working_, host_shard, n);
    src = bits.data();
  }
  const StateArenas::Slot& slot = arenas_->slot(kind, unit);
  if (slot.tier == Tier::nvme) {
    auto writes = arenas_->write(kind, unit, 0, n, src);
    wait_io(writes);
  } else if (slot.tier == Tier::host) {
    std::memcpy(arenas_->raw(kind, unit), src, n * elem_bytes);
  } else {
    device_.copy(arenas_->raw(kind, unit), src, n * elem_bytes, CopyKind::host_to_device,
                 device_.default_stream());
    device_.default_stream().synchronize();
  }
}

void ShardStorage::read_slot(StateBuffer kind, size_t unit, void* host) {
  const StateArenas::Slot& slot = arenas_->slot(kind, unit);
  const size_t bytes = slot.elems * arenas_->elem_bytes(kind);
  if (bytes == 0) return;
  if (slot.tier == Tier::nvme) {
    auto reads = arenas_->read(kind, unit, 0, slot.elems, host);
    wait_io(reads);
  } else if (slot.tier == Tier::host) {
    std::memcpy(host, arenas_->raw(kind, unit), bytes);
  } else {
    device_.copy(host, arenas_->raw(kind, unit), bytes, CopyKind::device_to_host,
                 device_.default_stream());
    device_.default_stream().synchronize();
  }
}

void ShardStorage::write_slot(StateBuffer kind, size_t unit, const void* host) {
  const StateArenas::Slot& slot = arenas_->slot(kind, unit);
  const size_t bytes = slot.elems * arenas_->elem_bytes(kind);
  if (bytes == 0) return;
  if (slot.tier == Tier::nvme) {
    auto writes = arenas_->write(kind, unit, 0, slot.elems, host);
    wait_io(writes);
  } else if (slot.tier == Tier::host) {
    std::memcpy(arenas_->raw(kind, unit), host, bytes);
  } else {
    device_.copy(arenas_->raw(kind, unit), host, bytes, CopyKind::host_to_device,
                 device_.default_stream());
    device_.default_stream().synchronize();
  }
}

void ShardStorage::load_full_params(size_t unit, const float* host_values) {
  const size_t numel = plan_.units()[unit].numel;
  std::vector<uint16_t> bits;  // (numel) working type, 16-bit types only
  const void* src = host_values;
  if (working_ != DType::f32) {
    bits.resize(numel);
    host_kernels_->convert_from_f32(bits.data(), working_, host_values, numel);
    src = bits.data();
  }
  Stream& st = device_.default_stream();
  device_.copy(full_params_raw(unit), src, numel * dtype_size(working_), CopyKind::host_to_device,
               st);
  st.synchronize();  // the host array may be freed on return
}

void ShardStorage::read_full_params(size_t unit, float* host_values) {
  const size_t numel = plan_.units()[unit].numel;
  std::vector<uint16_t> bits;  // (numel) working type, 16-bit types only
  if (working_ != DType::f32) bits.resize(numel);
  void* dst = working_ == DType::f32 ? static_cast<void*>(host_values) : bits.data();
  Stream& st = device_.default_stream();
  device_.copy(dst, full_params_raw(unit), numel * dtype_size(working_), CopyKind::device_to_host,
               st);
  st.synchronize();
  if (working_ != DType::f32)
    host_kernels_->convert_to_f32(host_values, bits.data(), working_, numel);
}

uint16_t* ShardStorage::host_bf16_params(size_t unit) {
  const UnitPlacement& pl = placement_[unit];
  if (working_ != DType::bf16 || stage_ != 3 || pl.param != Tier::host || pl.master_is_param)
    return nullptr;
  return static_cast<uint16_t*>(param_shard_raw(unit));
}

void* ShardStorage::device_working_params(size_t unit) {
  const UnitPlacement& pl = placement_[unit];
  const Tier home = stage_ == 3 ? pl.param : Tier::device;
  if (working_ == DType::f32 || home != Tier::device || pl.optimizer != Tier::device ||
      pl.master_is_param)
    return nullptr;
  return param_shard_raw(unit);
}

void ShardStorage::publish_params(size_t unit, const float* master, size_t begin, size_t count,
                                  bool master_on_device) {
  if (count == 0) return;
  const Tier home = stage_ == 3 ? placement_[unit].param : Tier::device;
  const size_t eb = dtype_size(working_);
  const size_t bytes = count * eb;
  Stream& st = device_.default_stream();
  const double t0 = monotonic_seconds();
  const auto u = static_cast<int64_t>(unit);
  std::vector<float> master_copy;  // (count) host, a device master of 16-bit parameters off it
  std::vector<uint16_t> bits;      // (count) working type, 16-bit types only
  const void* src = master;
  if (working_ != DType::f32) {
    if (master_on_device && home == Tier::device) {
      void* dst = static_cast<std::byte*>(param_shard_raw(unit)) + begin * eb;
      // In stream order with what reads the shard next (gathers and fetches record an event on
      // this stream first): no host wait.
      device_.kernels().convert_from_f32(dst, working_, master, count);
      return;
    }
    if (master_on_device) {
      master_copy.resize(count);
      device_.copy(master_copy.data(), master, count * sizeof(float), CopyKind::device_to_host, st);
      st.synchronize();
      master = master_copy.data();
    }
    bits.resize(count);
    host_kernels_->convert_from_f32(bits.data(), working_, master, count);
    src = bits.data();
    master_on_device = false;
  }
  if (home == Tier::device || home == Tier::host) {
    void* dst = static_cast<std::byte*>(param_shard_raw(unit)) + begin * eb;
    if (home == Tier::host && !master_on_device) {
      std::memcpy(dst, src, bytes);
      return;
    }
    const CopyKind kind = home == Tier::host ? CopyKind::device_to_host
                          : master_on_device ? CopyKind::device_to_device
                                             : CopyKind::host_to_device;
    device_.copy(dst, src, bytes, kind, st);
    if (kind == CopyKind::device_to_device) return;  // in stream order, as the conversion above
    st.synchronize();  // `src` (host, maybe this call's own) is read until the copy lands
    ActivityLog::global().record(
        kind == CopyKind::host_to_device ? Track::host_to_device : Track::device_to_host,
        "publish params", t0, monotonic_seconds(), bytes, u);
    return;
  }
  offload::PinnedBuffer staging;
  if (master_on_device) {
    staging = host_pool_->allocate(bytes, Category::io, "zero param publish staging");
    device_.copy(staging.data(), src, bytes, CopyKind::device_to_host, st);
    st.synchronize();
    src = staging.data();
  }
  auto writes = arenas_->write(StateBuffer::param_shard, unit, begin, count, src);
  wait_io(writes);
}

}  // namespace tierzero::zero
