// TrainConfig to the lower layers' option structs (see config_bridges.hpp).
#include "tierzero/train/config_bridges.hpp"

#include <string>
#include <utility>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/nn/activation_dims.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/train/placement_from_config.hpp"

namespace tierzero::train {

nn::GPTConfig gpt_config_from(const ModelShape& s) {
  nn::GPTConfig c;
  c.max_seq_len = static_cast<size_t>(s.context_length);
  c.vocab_size = static_cast<size_t>(s.vocab_size);
  c.padded_vocab_size = s.padded_vocab_size > 0 ? static_cast<size_t>(s.padded_vocab_size)
                                                : (c.vocab_size + 127) / 128 * 128;
  c.num_layers = static_cast<size_t>(s.n_layer);
  c.num_heads = static_cast<size_t>(s.n_head);
  c.channels = static_cast<size_t>(s.n_embd);
  c.arch = s.arch;
  c.classifier_chunk_tokens = static_cast<size_t>(s.classifier_chunk_tokens);
  c.validate();
  return c;
}

offload::NvmeOptions nvme_options_from(const AioConfig& aio, const OffloadConfig& offload) {
  offload::NvmeOptions o;
  size_t start = 0;
  const std::string& paths = offload.nvme_path;
  while (start <= paths.size()) {
    const size_t comma = std::min(paths.find(',', start), paths.size());
    std::string d = paths.substr(start, comma - start);
    if (!d.empty()) o.directories.push_back(std::move(d));
    start = comma + 1;
  }
  TZ_CHECK(!o.directories.empty(), "offload to nvme needs nvme_path",
           "set zero_optimization.offload_param.nvme_path (or offload_optimizer.nvme_path) to a "
           "directory on the NVMe drive");
  TZ_CHECK(aio.block_size > 0 && aio.queue_depth > 0,
           "aio.block_size and aio.queue_depth must be positive", "see docs/config.md");
  o.block_size = static_cast<size_t>(aio.block_size);
  o.queue_depth = static_cast<size_t>(aio.queue_depth);
  o.single_submit = aio.single_submit;
  return o;
}

bool is_device_name(const std::string& device) {
  DeviceKind kind = DeviceKind::cpu;
  return parse_device_name(device, &kind);
}

DeviceKind device_kind_of(const std::string& device) {
  DeviceKind kind = DeviceKind::cpu;
  TZ_CHECK(parse_device_name(device, &kind), "device '" + device + "' is not cpu, cuda or cuda:N",
           "use cpu, cuda or cuda:N (N the GPU's index)");
  return kind;
}

DType working_dtype(const TrainConfig& c) {
  return c.bf16 ? DType::bf16 : c.fp16 ? DType::f16 : DType::f32;
}

void set_precision(TrainConfig& c, const std::string& precision) {
  TZ_CHECK(precision == "fp32" || precision == "bf16" || precision == "fp16",
           "precision '" + precision + "' is not one the trainer runs",
           "use fp32, bf16 or fp16 (the working parameters' type)");
  c.bf16 = precision == "bf16";
  c.fp16 = precision == "fp16";
  if (c.compute_dtype != "auto" && c.compute_dtype != "fp32") c.compute_dtype = precision;
}

kernels::MatmulPrecision matmul_precision_for(const TrainConfig& c) {
  if (c.bf16) return kernels::MatmulPrecision::bf16;
  if (c.fp16) return kernels::MatmulPrecision::fp16;
  return c.tf32 ? kernels::MatmulPrecision::tf32 : kernels::MatmulPrecision::fp32;
}

DType compute_dtype_for(const TrainConfig& c, DeviceKind device) {
  const DType working = working_dtype(c);
  if (c.compute_dtype == "auto") return device == DeviceKind::cuda ? working : DType::f32;
  const DType asked = dtype_from_name(c.compute_dtype);
  if (asked == DType::f32) return asked;
  TZ_CHECK(asked == working,
           "tierzero.compute_dtype is " + c.compute_dtype + " but the working parameters are " +
               dtype_name(working),
           working == DType::f32
               ? "16-bit compute runs on the 16-bit working copy: set " + c.compute_dtype +
                     ".enabled to true, or tierzero.compute_dtype to fp32 or auto"
               : std::string("16-bit compute runs in the working type: set "
                             "tierzero.compute_dtype to ") +
                     dtype_name(working) + ", fp32 or auto");
  return asked;
}

zero::StoreConfig store_config_from(const TrainConfig& c) {
  zero::StoreConfig s;
  s.stage = static_cast<int>(c.zero.stage);
  auto elems = [](int64_t v) { return static_cast<size_t>(std::max<int64_t>(v, 0)); };
  s.param_persistence_threshold = elems(c.zero.param_persistence_threshold);
  s.prefetch_bucket_elems = elems(c.zero.prefetch_bucket_size);
  s.max_live_elems = elems(c.zero.max_live_parameters);
  s.max_reuse_distance = elems(c.zero.max_reuse_distance);
  s.reduce_bucket_elems = std::max<size_t>(elems(c.zero.reduce_bucket_size), 1);
  s.overlap_comm = c.zero.overlap_comm;
  s.allgather_bucket_elems = std::max<size_t>(elems(c.zero.allgather_bucket_size), 1);
  s.reduce_dtype = dtype_from_name(c.communication_data_type);
  s.optimizer_overlap = c.optimizer_overlap == "off"           ? zero::OptimizerOverlap::off
                        : c.optimizer_overlap == "speculative" ? zero::OptimizerOverlap::speculative
                                                               : zero::OptimizerOverlap::plain;
  const OffloadConfig& op = c.zero.offload_param;
  const OffloadConfig& oo = c.zero.offload_optimizer;
  s.placement = placement_from_config(c);
  // One engine for both: the union of the directories (each one drive) of what goes to NVMe.
  const bool param_nvme = s.placement.param.tier == Tier::nvme;
  const bool optimizer_nvme = s.placement.optimizer.tier == Tier::nvme;
  std::vector<std::string> dirs;
  for (const OffloadConfig* o : {param_nvme ? &op : nullptr, optimizer_nvme ? &oo : nullptr}) {
    if (o == nullptr) continue;
    for (const std::string& d : nvme_options_from(c.aio, *o).directories)
      if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
  }
  if (!dirs.empty()) {
    s.nvme = nvme_options_from(c.aio, param_nvme ? op : oo);
    s.nvme.directories = dirs;
  }
  const NvmeStaging staging = nvme_staging_from(c);
  s.nvme_read_buffers = staging.param_buffers;
  s.optimizer_swap_buffers = staging.optimizer_buffers;
  // The node's budget; the trainer gives each rank its share (host_budget_per_rank).
  s.host_budget_bytes = node_host_budget_bytes(c);
  return s;
}

offload::StreamOptions stream_options_from(const OffloadConfig& offload, size_t element_bytes) {
  TZ_CHECK(offload.buffer_count >= 2 && offload.buffer_size > 0,
           "offload buffer_count must be >= 2 and buffer_size positive (got " +
               std::to_string(offload.buffer_count) + ", " + std::to_string(offload.buffer_size) +
               ")",
           "the streaming pipeline needs one buffer to work on and one in flight");
  offload::StreamOptions o;
  o.buffer_count = static_cast<size_t>(offload.buffer_count);
  const size_t bytes = static_cast<size_t>(offload.buffer_size) * element_bytes;
  o.buffer_bytes =
      (bytes + offload::kIoAlignment - 1) / offload::kIoAlignment * offload::kIoAlignment;
  return o;
}

profile::EstimateInput estimate_input_from(const TrainConfig& c, std::vector<zero::UnitSpec> units,
                                           profile::WorldLayout world, size_t activation_bytes) {
  const ZeroConfig& z = c.zero;
  profile::EstimateInput in;
  in.units = std::move(units);
  in.world = world;
  in.stage = static_cast<int>(z.stage);
  in.placement = placement_from_config(c);
  const NvmeStaging staging = nvme_staging_from(c);
  in.staging_buffer_count = staging.optimizer_buffers;
  in.param_staging_buffers = staging.param_buffers;
  in.nvme_bounce_bytes = staging.bounce_bytes;
  in.param_persistence_threshold = static_cast<size_t>(z.param_persistence_threshold);
  in.reduce_bucket_elems = static_cast<size_t>(std::max<int64_t>(z.reduce_bucket_size, 1));
  in.overlap_comm = z.overlap_comm;
  in.reduce_dtype = dtype_from_name(c.communication_data_type);
  in.host_widening = c.device == "cpu";
  in.max_live_parameters = static_cast<size_t>(z.max_live_parameters);
  in.activation_bytes = activation_bytes;
  return in;
}

}  // namespace tierzero::train
