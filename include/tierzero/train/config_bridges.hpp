// The trainer's settings (train_config.hpp) turned into the option structs of the layers below:
// the GPT's shape (nn), the partition store's settings (zero), the NVMe engine's and the
// streaming pipeline's options (offload), and the estimator's input (profile). Those layers know
// nothing of TrainConfig; the train layer, which sits above them all, is where a DeepSpeed-style
// config meets them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tierzero/core/dtype.hpp"
#include "tierzero/core/tensor.hpp"
#include "tierzero/kernels/matmul_precision.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/offload/nvme_engine.hpp"
#include "tierzero/offload/stream_pipeline.hpp"
#include "tierzero/profile/estimator.hpp"
#include "tierzero/train/train_config.hpp"
#include "tierzero/zero/partition.hpp"
#include "tierzero/zero/store_config.hpp"

namespace tierzero::train {

// The model shape as nn's GPTConfig: validated, V padded to a multiple of 128 unless given.
nn::GPTConfig gpt_config_from(const ModelShape& shape);

// Whether `device` is a device name the trainer runs on: cpu, cuda or cuda:N (N a decimal index).
bool is_device_name(const std::string& device);
// The kind of device it names; an Error naming the value when it names none.
DeviceKind device_kind_of(const std::string& device);

// The working parameters' type: bf16 or fp16 when enabled, else fp32.
DType working_dtype(const TrainConfig& config);
// Sets it by name (fp32, bf16 or fp16: the bf16 / fp16 keys, as the commands' --precision); a
// 16-bit compute_dtype, which is the working type's, follows (fp32 with fp32 parameters), while
// auto and fp32 hold for any. An Error for another name.
void set_precision(TrainConfig& config, const std::string& precision);

// How the products run (Kernels::set_matmul_precision): bf16 or fp16 tensor cores with those
// working parameters, else tf32 when tierzero.tf32 is set, else exact fp32. The CPU backend
// computes in fp32 whatever this says.
kernels::MatmulPrecision matmul_precision_for(const TrainConfig& config);

// The dtype the model's products and their activations run in (nn::GPT::set_compute,
// StoreConfig::compute): tierzero.compute_dtype, whose "auto" is the 16-bit working type on CUDA
// and fp32 elsewhere (the CPU's 16-bit kernels widen to fp32, no faster than its fp32 ones).
// Throws an Error for a 16-bit dtype that is not the working type.
DType compute_dtype_for(const TrainConfig& config, DeviceKind device);

// The partition store's settings as the trainer applies them: stage, stage-3 budgets, gradient
// and gather buckets, placements and the offload resources they need (the host budget defaults to
// 80% of physical memory).
zero::StoreConfig store_config_from(const TrainConfig& config);

// The NVMe engine's options for an offload section (nvme_path may name several comma-separated
// directories, one per drive) and the aio section. Throws Error when nvme_path is empty or aio's
// sizes are not positive.
offload::NvmeOptions nvme_options_from(const AioConfig& aio, const OffloadConfig& offload);

// The streaming pipeline's buffers for an offload section (buffer_count buffers of buffer_size
// elements of `element_bytes`, 4 KiB-rounded). Throws Error when buffer_count < 2.
offload::StreamOptions stream_options_from(const OffloadConfig& offload, size_t element_bytes);

// The store's settings in `config` as the trainer applies them (stage, placements and their
// ratios, NVMe chunk and staging, persistence threshold, live budget, reductions in flight),
// for `units` on `world`, with the caller's activation bytes.
profile::EstimateInput estimate_input_from(const TrainConfig& config,
                                           std::vector<zero::UnitSpec> units,
                                           profile::WorldLayout world, size_t activation_bytes);

}  // namespace tierzero::train
