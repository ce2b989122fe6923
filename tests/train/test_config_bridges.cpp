// TrainConfig's sections as the lower layers' option structs: the NVMe engine's and streaming
// pipeline's options from DeepSpeed's aio / offload keys, and the GPT's shape.
#include <gtest/gtest.h>

#include <string>

#include "error_of.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/config_bridges.hpp"

using namespace tierzero;
using namespace tierzero::train;
using tierzero::testing::error_of;

TEST(ConfigBridges, NvmeOptionsFromDeepSpeedConfig) {
  AioConfig aio;
  aio.block_size = 262144;
  aio.queue_depth = 16;
  aio.single_submit = true;
  OffloadConfig off;
  off.device = "nvme";
  off.nvme_path = "/mnt/nvme0,/mnt/nvme1";
  offload::NvmeOptions o = nvme_options_from(aio, off);
  ASSERT_EQ(o.directories.size(), 2u);
  EXPECT_EQ(o.directories[1], "/mnt/nvme1");
  EXPECT_EQ(o.block_size, 262144u);
  EXPECT_EQ(o.queue_depth, 16u);
  EXPECT_TRUE(o.single_submit);
  off.nvme_path.clear();
  EXPECT_THROW(nvme_options_from(aio, off), Error);
}

TEST(ConfigBridges, StreamOptionsFromDeepSpeedConfig) {
  OffloadConfig off;
  off.buffer_count = 5;
  off.buffer_size = 100000000;  // elements
  offload::StreamOptions o = stream_options_from(off, 4);
  EXPECT_EQ(o.buffer_count, 5u);
  EXPECT_EQ(o.buffer_bytes % 4096, 0u);
  EXPECT_GE(o.buffer_bytes, size_t{400000000});
  off.buffer_count = 1;
  EXPECT_THROW(stream_options_from(off, 4), Error);
}

TEST(ConfigBridges, GptShapePadsTheVocabularyAndValidates) {
  ModelShape s;
  s.vocab_size = 257;
  nn::GPTConfig c = gpt_config_from(s);
  EXPECT_EQ(c.padded_vocab_size, 384u);
  s.padded_vocab_size = 320;
  EXPECT_EQ(gpt_config_from(s).padded_vocab_size, 320u);
  s.n_embd = 130;  // not a multiple of n_head = 4
  EXPECT_THROW(gpt_config_from(s), Error);
}

// Every key the store reads reaches zero::StoreConfig: a changed value changes the store's
// config (the keys a DeepSpeed user tunes most, and the legacy cpu_offload switch).
TEST(ConfigBridges, StoreConfigFollowsTheZeroKeys) {
  const zero::StoreConfig d = store_config_from(TrainConfig::defaults());
  EXPECT_EQ(d.stage, 0);
  EXPECT_EQ(d.reduce_bucket_elems, 500000000u);
  EXPECT_TRUE(d.overlap_comm);
  EXPECT_EQ(d.allgather_bucket_elems, 500000000u);
  EXPECT_EQ(d.reduce_dtype, DType::f32);
  EXPECT_EQ(d.placement.optimizer.tier, Tier::device);
  EXPECT_EQ(d.placement.working, DType::f32);

  const zero::StoreConfig c = store_config_from(TrainConfig::parse(
      R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": 12345, "overlap_comm": false,
            "allgather_bucket_size": 777, "cpu_offload": true,
            "stage3_prefetch_bucket_size": 99, "stage3_param_persistence_threshold": 11,
            "stage3_max_live_parameters": 1234, "stage3_max_reuse_distance": 55,
            "offload_optimizer": {"buffer_count": 6, "buffer_size": 4096}},
          "communication_data_type": "bf16", "bf16": {"enabled": true},
          "tierzero": {"host_memory_budget_gb": 2}})",
      "ds.json"));
  EXPECT_EQ(c.stage, 2);
  EXPECT_EQ(c.reduce_bucket_elems, 12345u);
  EXPECT_FALSE(c.overlap_comm);
  EXPECT_EQ(c.allgather_bucket_elems, 777u);
  EXPECT_EQ(c.reduce_dtype, DType::bf16);
  EXPECT_EQ(c.placement.optimizer.tier, Tier::host);  // cpu_offload
  EXPECT_EQ(c.placement.param.tier, Tier::device);
  EXPECT_EQ(c.placement.working, DType::bf16);
  EXPECT_EQ(c.prefetch_bucket_elems, 99u);
  EXPECT_EQ(c.param_persistence_threshold, 11u);
  EXPECT_EQ(c.max_live_elems, 1234u);
  EXPECT_EQ(c.max_reuse_distance, 55u);
  EXPECT_EQ(c.optimizer_swap_buffers, 6u);
  EXPECT_EQ(c.placement.nvme_chunk_elems, 4096u);
  EXPECT_EQ(c.host_budget_bytes, size_t{2} << 30);
  EXPECT_EQ(store_config_from(TrainConfig::parse(R"({"communication_data_type": "fp16"})", "t"))
                .reduce_dtype,
            DType::f16);
}

// The products' precision: bf16 / fp16 working parameters pick those tensor cores, tierzero.tf32
// (off by default) picks TF32 for an fp32 run, and nothing else leaves exact fp32.
TEST(ConfigBridges, MatmulPrecisionFollowsDtypeAndTf32) {
  using kernels::MatmulPrecision;
  EXPECT_FALSE(TrainConfig::defaults().tf32);
  EXPECT_EQ(matmul_precision_for(TrainConfig::defaults()), MatmulPrecision::fp32);
  EXPECT_EQ(matmul_precision_for(TrainConfig::parse(R"({"tierzero": {"tf32": true}})", "t")),
            MatmulPrecision::tf32);
  EXPECT_EQ(matmul_precision_for(TrainConfig::parse(R"({"bf16": {"enabled": true}})", "t")),
            MatmulPrecision::bf16);
  EXPECT_EQ(matmul_precision_for(TrainConfig::parse(R"({"fp16": {"enabled": true}})", "t")),
            MatmulPrecision::fp16);
  // 16-bit working parameters take precedence over the fp32 runs' TF32 switch.
  EXPECT_EQ(matmul_precision_for(TrainConfig::parse(
                R"({"bf16": {"enabled": true}, "tierzero": {"tf32": true}})", "t")),
            MatmulPrecision::bf16);
  EXPECT_THROW(TrainConfig::parse(R"({"tierzero": {"tf32": "yes"}})", "t"), Error);
}

// tierzero.compute_dtype: auto is the 16-bit working type on CUDA (every architecture and split
// computes in it), fp32 on the CPU; a 16-bit dtype asked for must be the working type.
TEST(ConfigBridges, ComputeDtypeFollowsTheWorkingTypeAndTheDevice) {
  const TrainConfig bf16 = TrainConfig::parse(R"({"bf16": {"enabled": true}})", "t");
  const TrainConfig fp16 = TrainConfig::parse(R"({"fp16": {"enabled": true}})", "t");
  EXPECT_EQ(TrainConfig::defaults().compute_dtype, "auto");
  EXPECT_EQ(compute_dtype_for(bf16, DeviceKind::cuda), DType::bf16);
  EXPECT_EQ(compute_dtype_for(fp16, DeviceKind::cuda), DType::f16);
  EXPECT_EQ(compute_dtype_for(bf16, DeviceKind::cpu), DType::f32);  // widening: no faster
  EXPECT_EQ(compute_dtype_for(TrainConfig::defaults(), DeviceKind::cuda), DType::f32);
  // Asked for: on the CPU too (the reference semantics, widened), and refused with the reason.
  const TrainConfig asked = TrainConfig::parse(
      R"({"bf16": {"enabled": true}, "tierzero": {"compute_dtype": "bf16"}})", "t");
  EXPECT_EQ(compute_dtype_for(asked, DeviceKind::cpu), DType::bf16);
  const TrainConfig wrong_type = TrainConfig::parse(
      R"({"fp16": {"enabled": true}, "tierzero": {"compute_dtype": "bf16"}})", "t");
  const std::string type_error =
      error_of([&] { (void)compute_dtype_for(wrong_type, DeviceKind::cuda); });
  EXPECT_NE(type_error.find("working parameters are fp16"), std::string::npos) << type_error;
  const TrainConfig fp32_working =
      TrainConfig::parse(R"({"tierzero": {"compute_dtype": "fp16"}})", "t");
  const std::string fp32_error =
      error_of([&] { (void)compute_dtype_for(fp32_working, DeviceKind::cuda); });
  EXPECT_NE(fp32_error.find("fp16.enabled to true"), std::string::npos) << fp32_error;
  const TrainConfig fp32 = TrainConfig::parse(
      R"({"bf16": {"enabled": true}, "tierzero": {"compute_dtype": "fp32"}})", "t");
  EXPECT_EQ(compute_dtype_for(fp32, DeviceKind::cuda), DType::f32);
  EXPECT_THROW(TrainConfig::parse(R"({"tierzero": {"compute_dtype": "int8"}})", "t"), Error);
}
