// TrainConfig parsing: a real DeepSpeed config reads unchanged; unknown keys, wrong types and
// out-of-range values are errors that name the key's full path.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/train/global_batch.hpp"
#include "tierzero/train/train_config.hpp"

using namespace tierzero;
using namespace tierzero::train;

namespace {

// Returns the error message of parsing `json`, or "" if it parsed.
std::string parse_error(const std::string& json) {
  try {
    TrainConfig::parse(json, "'test.json'");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TrainConfig, DefaultsAreValid) {
  TrainConfig c = TrainConfig::defaults();
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_EQ(c.optimizer.type, "AdamW");
  EXPECT_GT(c.steps, 0);
}

TEST(TrainConfig, ReadsADeepSpeedZero3ConfigUnchanged) {
  const char* ds = R"({
    "train_batch_size": 64,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 2,
    "gradient_clipping": 1.0,
    "steps_per_print": 100,
    "wall_clock_breakdown": false,
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 6e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupCosineLR",
                  "params": {"total_num_steps": 1000, "warmup_num_steps": 50,
                             "warmup_min_ratio": 0.0, "cos_min_ratio": 0.1}},
    "bf16": {"enabled": true},
    "fp16": {"enabled": false, "loss_scale": 0, "initial_scale_power": 16},
    "zero_optimization": {
      "stage": 3, "overlap_comm": true, "contiguous_gradients": true,
      "reduce_bucket_size": 5e8, "stage3_prefetch_bucket_size": 5e7,
      "stage3_param_persistence_threshold": 1e5, "stage3_max_live_parameters": 1e9,
      "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": true,
      "sub_group_size": 1e9,
      "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true,
                        "buffer_count": 5, "buffer_size": 1e8, "max_in_cpu": 1e9},
      "offload_optimizer": {"device": "cpu", "pin_memory": true, "fast_init": false}
    },
    "aio": {"block_size": 1048576, "queue_depth": 8, "thread_count": 1, "single_submit": false,
            "overlap_events": true}
  })";
  TrainConfig c = TrainConfig::parse(ds, "ds.json");
  EXPECT_EQ(c.micro_batch_size, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 2);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 6e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_EQ(c.scheduler.total_num_steps, 1000);
  EXPECT_TRUE(c.bf16);
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.offload_param.device, "nvme");
  EXPECT_EQ(c.zero.offload_param.nvme_path, "/local_nvme");
  EXPECT_EQ(c.zero.offload_param.buffer_size, 100000000);
  EXPECT_EQ(c.zero.prefetch_bucket_size, 50000000);
  EXPECT_EQ(c.zero.offload_optimizer.device, "cpu");
  EXPECT_EQ(c.aio.queue_depth, 8);
  // Every other key states what TierZero does; only the print interval is ignored, and said so.
  EXPECT_EQ(c.ignored_keys, std::vector<std::string>{"steps_per_print"});
}

TEST(TrainConfig, LegacyCpuOffloadIsTheOptimizerOnTheHost) {
  TrainConfig c =
      TrainConfig::parse(R"({"zero_optimization": {"stage": 2, "cpu_offload": true}})", "ds.json");
  EXPECT_EQ(c.zero.offload_optimizer.device, "cpu");
  EXPECT_EQ(c.zero.offload_param.device, "none");
  c = TrainConfig::parse(R"({"zero_optimization": {"stage": 2, "cpu_offload": false}})", "ds.json");
  EXPECT_EQ(c.zero.offload_optimizer.device, "none");
  c = TrainConfig::parse(R"({"zero_optimization": {"stage": 3, "cpu_offload": true,
      "cpu_offload_params": true, "offload_optimizer": {"device": "cpu"}}})",
                         "ds.json");
  EXPECT_EQ(c.zero.offload_optimizer.device, "cpu");
  EXPECT_EQ(c.zero.offload_param.device, "cpu");
  std::string e = parse_error(R"({"zero_optimization": {"stage": 2, "cpu_offload": true,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}})");
  std::printf("error: %s\n", e.c_str());
  EXPECT_NE(e.find("'zero_optimization.cpu_offload' = true contradicts "
                   "offload_optimizer.device = \"nvme\""),
            std::string::npos)
      << e;
  // Legacy param offload still needs stage 3, as offload_param does.
  e = parse_error(R"({"zero_optimization": {"stage": 2, "cpu_offload_params": true}})");
  EXPECT_NE(e.find("needs stage 3"), std::string::npos) << e;
}

TEST(TrainConfig, KeysThatWouldChangeTheRunAreAppliedOrRefusedByName) {
  TrainConfig c = TrainConfig::parse(R"({"communication_data_type": "bf16",
      "fp16": {"enabled": true, "consecutive_hysteresis": true},
      "zero_optimization": {"stage": 1, "allgather_bucket_size": 1000, "reduce_bucket_size": 2000,
                            "overlap_comm": false}})",
                                     "ds.json");
  EXPECT_EQ(c.communication_data_type, "bf16");
  EXPECT_TRUE(c.fp16_scaling.consecutive_hysteresis);
  EXPECT_EQ(c.zero.allgather_bucket_size, 1000);
  EXPECT_EQ(c.zero.reduce_bucket_size, 2000);
  EXPECT_FALSE(c.zero.overlap_comm);
  EXPECT_EQ(TrainConfig::parse(R"({"communication_data_type": null})", "t").communication_data_type,
            "fp32");
  // Each: a config, the key's full path and value as the error must name them.
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"({"zero_optimization": {"reduce_scatter": false}})",
       "'zero_optimization.reduce_scatter' = false is not supported"},
      {R"({"zero_optimization": {"contiguous_gradients": false}})",
       "'zero_optimization.contiguous_gradients' = false is not supported"},
      {R"({"zero_optimization": {"allgather_partitions": false}})",
       "'zero_optimization.allgather_partitions' = false is not supported"},
      {R"({"zero_optimization": {"round_robin_gradients": true}})",
       "'zero_optimization.round_robin_gradients' = true is not supported"},
      {R"({"zero_optimization": {"sub_group_size": 1e8}})",
       "'zero_optimization.sub_group_size' = 1e+08 is not supported"},
      {R"({"zero_optimization": {"zero_hpz_partition_size": 8}})",
       "'zero_optimization.zero_hpz_partition_size' = 8 is not supported: ZeRO++"},
      {R"({"zero_optimization": {"zero_quantized_weights": true}})",
       "'zero_optimization.zero_quantized_weights' = true is not supported"},
      {R"({"zero_optimization": {"zero_quantized_gradients": true}})",
       "'zero_optimization.zero_quantized_gradients' = true is not supported"},
      {R"({"zero_optimization": {"load_from_fp32_weights": false}})",
       "'zero_optimization.load_from_fp32_weights' = false is not supported"},
      {R"({"zero_optimization": {"offload_optimizer": {"pin_memory": false}}})",
       "'zero_optimization.offload_optimizer.pin_memory' = false is not supported"},
      {R"({"zero_optimization": {"offload_optimizer": {"fast_init": true}}})",
       "'zero_optimization.offload_optimizer.fast_init' = true is not supported"},
      {R"({"zero_optimization": {"offload_param": {"max_in_cpu": 1e6}}})",
       "'zero_optimization.offload_param.max_in_cpu' = 1e+06 is not supported"},
      {R"({"zero_optimization": {"offload_param": {"buffer_size": 1e6}}})",
       "'zero_optimization.offload_param.buffer_size' = 1e+06 is not supported"},
      {R"({"aio": {"thread_count": 4}})", "'aio.thread_count' = 4 is not supported"},
      {R"({"aio": {"intra_op_parallelism": 2}})",
       "'aio.intra_op_parallelism' = 2 is not supported: TierZero's io_uring engine"},
      {R"({"aio": {"overlap_events": false}})", "'aio.overlap_events' = false is not supported"},
      {R"({"amp": {"enabled": true, "opt_level": "O1"}})",
       "'amp.enabled' = true is not supported: Apex AMP"},
      {R"({"data_types": {"grad_accum_dtype": "bf16"}})",
       "'data_types.grad_accum_dtype' = \"bf16\" is not supported"},
      {R"({"seq_parallel_communication_data_type": "bf16"})",
       "'seq_parallel_communication_data_type' = \"bf16\" is not supported"},
      {R"({"communication_data_type": "int8"})",
       "'communication_data_type' = \"int8\" is not one of: fp32, fp16, bf16"},
      {R"({"gradient_predivide_factor": 2.0})", "'gradient_predivide_factor' = 2 is not supported"},
      {R"({"prescale_gradients": true})", "'prescale_gradients' = true is not supported"},
      {R"({"fp16": {"auto_cast": true}})", "'fp16.auto_cast' = true is not supported"},
      {R"({"fp16": {"fp16_master_weights_and_grads": true}})",
       "'fp16.fp16_master_weights_and_grads' = true is not supported"},
      {R"({"bf16": {"loss_scale": 0}})", "unknown key 'bf16.loss_scale'"},
      {R"({"scheduler": {"params": {"last_batch_iteration": 10}}})",
       "'scheduler.params.last_batch_iteration' = 10 is not supported"},
      {R"({"checkpoint": {"use_node_local_storage": true}})",
       "'checkpoint.use_node_local_storage' = true is not supported"},
  };
  for (const auto& [json, want] : refused) {
    const std::string e = parse_error(json);
    std::printf("%s -> %s\n", json.c_str(), e.c_str());
    EXPECT_NE(e.find(want), std::string::npos) << json << " gave: " << e;
  }
  // The same keys at the value that states what TierZero does read silently.
  c = TrainConfig::parse(R"({"zero_optimization": {"reduce_scatter": true,
      "contiguous_gradients": true, "allgather_partitions": true, "round_robin_gradients": false,
      "sub_group_size": 1000000000, "zero_hpz_partition_size": 1, "zero_quantized_weights": false,
      "zero_quantized_gradients": false, "elastic_checkpoint": true,
      "offload_optimizer": {"pin_memory": true, "pipeline_read": false, "pipeline_write": true}},
      "aio": {"thread_count": 1, "intra_op_parallelism": 1, "overlap_events": true},
      "amp": {"enabled": false, "opt_level": "O1"}, "data_types": {"grad_accum_dtype": "fp32"},
      "scheduler": {"params": {"last_batch_iteration": -1}}, "communication_data_type": "fp32",
      "checkpoint": {"tag_validation": "Fail", "load_universal": true}})",
                         "ds.json");
  EXPECT_TRUE(c.ignored_keys.empty());
}

TEST(TrainConfig, LoggingKeysAreNamedInOneWarningList) {
  TrainConfig c = TrainConfig::parse(R"({"wall_clock_breakdown": true, "steps_per_print": 5,
      "tensorboard": {"enabled": true, "output_path": "tb/"}, "wandb": {"enabled": false},
      "csv_monitor": {"enabled": true}, "flops_profiler": {"enabled": false, "profile_step": 1},
      "comms_logger": {"enabled": true}, "memory_breakdown": false, "dump_state": true,
      "activation_checkpointing": {"profile": true}})",
                                     "ds.json");
  const std::vector<std::string> want = {"steps_per_print",      "activation_checkpointing.profile",
                                         "wall_clock_breakdown", "dump_state",
                                         "tensorboard",          "csv_monitor",
                                         "comms_logger"};
  EXPECT_EQ(c.ignored_keys, want);
  std::printf("%s\n", c.ignored_keys_warning().c_str());
  EXPECT_EQ(c.ignored_keys_warning(),
            "config keys ignored (in DeepSpeed they only log, time or report): steps_per_print, "
            "activation_checkpointing.profile, wall_clock_breakdown, dump_state, tensorboard, "
            "csv_monitor, comms_logger");
  EXPECT_EQ(TrainConfig::defaults().ignored_keys_warning(), "");
  EXPECT_TRUE(TrainConfig::parse(R"({"wall_clock_breakdown": false, "wandb": {}})", "t")
                  .ignored_keys.empty());
  std::string e = parse_error(R"({"wall_clock_breakdwn": true})");
  EXPECT_NE(e.find("did you mean 'wall_clock_breakdown'"), std::string::npos) << e;
}

TEST(TrainConfig, UnknownKeyNamesItsFullPathAndASuggestion) {
  std::string e = parse_error(R"({"zero_optimization": {"stage": 1, "offload_parm": {}}})");
  std::printf("error: %s\n", e.c_str());
  EXPECT_NE(e.find("unknown key 'zero_optimization.offload_parm'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'zero_optimization.offload_param'"), std::string::npos) << e;
  EXPECT_NE(e.find("test.json"), std::string::npos) << e;

  e = parse_error(R"({"optimizer": {"params": {"learning_rate": 0.1}}})");
  EXPECT_NE(e.find("'optimizer.params.learning_rate'"), std::string::npos) << e;
  e = parse_error(R"({"tierzero": {"model": {"n_layers": 2}}})");
  EXPECT_NE(e.find("'tierzero.model.n_layers'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'tierzero.model.n_layer'"), std::string::npos) << e;
}

TEST(TrainConfig, WrongTypeNamesKeyAndType) {
  std::string e = parse_error(R"({"train_micro_batch_size_per_gpu": "8"})");
  std::printf("error: %s\n", e.c_str());
  EXPECT_NE(e.find("'train_micro_batch_size_per_gpu' must be an integer, got a string"),
            std::string::npos)
      << e;
  e = parse_error(R"({"optimizer": {"params": {"betas": 0.9}}})");
  EXPECT_NE(e.find("'optimizer.params.betas' must be an array of 2 numbers"), std::string::npos)
      << e;
  e = parse_error(R"({"bf16": {"enabled": 1}})");
  EXPECT_NE(e.find("'bf16.enabled' must be true or false"), std::string::npos) << e;
  e = parse_error(R"({"zero_optimization": 3})");
  EXPECT_NE(e.find("'zero_optimization' must be an object"), std::string::npos) << e;
  e = parse_error(R"({"train_micro_batch_size_per_gpu": 2.5})");
  EXPECT_NE(e.find("must be an integer, got a number"), std::string::npos) << e;
}

TEST(TrainConfig, OutOfRangeNamesKeyValueAndRange) {
  std::string e = parse_error(R"({"zero_optimization": {"stage": 4}})");
  std::printf("error: %s\n", e.c_str());
  EXPECT_NE(e.find("'zero_optimization.stage' = 4 is out of range [0, 3]"), std::string::npos) << e;
  e = parse_error(R"({"optimizer": {"params": {"betas": [0.9, 1.5]}}})");
  EXPECT_NE(e.find("'optimizer.params.betas[1]' = 1.5 is out of range"), std::string::npos) << e;
  e = parse_error(R"({"train_micro_batch_size_per_gpu": 0})");
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
  e = parse_error(R"({"optimizer": {"params": {"eps": 0}}})");
  EXPECT_NE(e.find("'optimizer.params.eps' = 0 is out of range (0"), std::string::npos) << e;
  e = parse_error(R"({"aio": {"block_size": 5000}})");
  EXPECT_NE(e.find("'aio.block_size' must be a multiple of 4096"), std::string::npos) << e;
  e = parse_error(R"({"scheduler": {"type": "OneCycle"}})");
  EXPECT_NE(e.find("'scheduler.type' = \"OneCycle\" is not one of"), std::string::npos) << e;
}

TEST(TrainConfig, CrossFieldRules) {
  EXPECT_NE(parse_error(R"({"aio": {"use_gds": true}})").find("GPUDirect Storage"),
            std::string::npos);
  EXPECT_EQ(parse_error(R"({"aio": {"use_gds": false}})"), "");
  EXPECT_NE(parse_error(R"({"zero_optimization": {"stage": 3,
               "offload_param": {"device": "nvme"}}})")
                .find("needs nvme_path"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"zero_optimization": {"stage": 2,
               "offload_param": {"device": "cpu"}}})")
                .find("needs stage 3"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"tierzero": {"model": {"n_embd": 100, "n_head": 3}}})")
                .find("divisible by n_head"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"tierzero": {"seq_len": 128, "model": {"context_length": 64}}})")
                .find("exceeds model.context_length"),
            std::string::npos);
  EXPECT_NE(
      parse_error(R"({"bf16": {"enabled": true}, "fp16": {"enabled": true}})").find("both enabled"),
      std::string::npos);
}

TEST(TrainConfig, InvalidJsonAndMissingFile) {
  std::string e = parse_error("{\"steps\": ");
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;
  EXPECT_THROW(TrainConfig::load("/nonexistent/dir/config.json"), Error);
}

TEST(TrainConfig, ActivationCheckpointingKeys) {
  EXPECT_FALSE(TrainConfig::defaults().activation_checkpointing);
  TrainConfig c = TrainConfig::parse(R"({"tierzero": {"activation_checkpointing": true}})", "t");
  EXPECT_TRUE(c.activation_checkpointing);

  // DeepSpeed's section reads unchanged (its keys have no effect here), null included.
  c = TrainConfig::parse(R"({"activation_checkpointing": {
      "partition_activations": false, "cpu_checkpointing": false,
      "contiguous_memory_optimization": true, "number_checkpoints": null,
      "synchronize_checkpoint_boundary": true, "profile": false}})",
                         "ds.json");
  EXPECT_FALSE(c.activation_checkpointing);  // the section alone does not turn it on
  EXPECT_TRUE(c.ds_activation_checkpointing.contiguous_memory_optimization);
  EXPECT_EQ(c.ignored_keys,
            std::vector<std::string>{"activation_checkpointing.synchronize_checkpoint_boundary"});
  EXPECT_EQ(c.ds_activation_checkpointing.number_checkpoints, 0);
  c = TrainConfig::parse(R"({"activation_checkpointing": {"number_checkpoints": 4}})", "t");
  EXPECT_EQ(c.ds_activation_checkpointing.number_checkpoints, 4);

  std::string e = parse_error(R"({"tierzero": {"activation_checkpointing": "yes"}})");
  std::printf("error: %s\n", e.c_str());
  EXPECT_NE(e.find("'tierzero.activation_checkpointing' must be true or false"), std::string::npos)
      << e;
  // (activation_checkpoint is nearest to tierzero.activation_checkpoints, the placement.)
  e = parse_error(R"({"tierzero": {"activation_checkpointin": true}})");
  EXPECT_NE(e.find("did you mean 'tierzero.activation_checkpointing'"), std::string::npos) << e;
  e = parse_error(R"({"tierzero": {"activation_checkpoints": {"device": "gpu"}}})");
  EXPECT_NE(e.find("tierzero.activation_checkpoints.device"), std::string::npos) << e;
  e = parse_error(R"({"tierzero": {"activation_checkpoints": {"device": "nvme"}}})");
  EXPECT_NE(e.find("tierzero.activation_checkpoints.nvme_path"), std::string::npos) << e;
  c = TrainConfig::parse(
      R"({"tierzero": {"activation_checkpoints": {"device": "host", "buffer_count": 4}}})", "t");
  EXPECT_EQ(c.activation_checkpoints.device, "cpu");
  EXPECT_EQ(c.activation_checkpoints.buffer_count, 4);
  e = parse_error(R"({"activation_checkpointing": {"partition_activations": true}})");
  std::printf("error: %s\n", e.c_str());
  EXPECT_NE(e.find("'activation_checkpointing.partition_activations' = true is not supported"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("tierzero.activation_checkpointing"), std::string::npos) << e;
  e = parse_error(R"({"activation_checkpointing": {"cpu_checkpointing": true}})");
  EXPECT_NE(e.find("'activation_checkpointing.cpu_checkpointing' = true is not supported"),
            std::string::npos)
      << e;
  e = parse_error(R"({"activation_checkpointing": {"profile": 1}})");
  EXPECT_NE(e.find("'activation_checkpointing.profile' must be true or false"), std::string::npos)
      << e;
  e = parse_error(R"({"activation_checkpointing": {"number_checkpoints": "4"}})");
  EXPECT_NE(e.find("'activation_checkpointing.number_checkpoints' must be an integer"),
            std::string::npos)
      << e;
  e = parse_error(R"({"activation_checkpointing": {"number_checkpoints": -1}})");
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
  e = parse_error(R"({"activation_checkpointing": {"partition_activation": false}})");
  EXPECT_NE(e.find("did you mean 'activation_checkpointing.partition_activations'"),
            std::string::npos)
      << e;
  e = parse_error(R"({"activation_checkpointing": true})");
  EXPECT_NE(e.find("'activation_checkpointing' must be an object"), std::string::npos) << e;
}

// train_batch_size = micro x accumulation x data-parallel ranks, as DeepSpeed: given with one of
// the other two it derives the third, alone it means accumulation 1, and three that disagree
// (or a product with no whole solution) are refused, naming all of them. It was ignored: a
// config with train_batch_size 8 and micro 2 trained batches of 2.
TEST(TrainConfig, TrainBatchSizeDerivesTheMissingPartAsDeepSpeedDoes) {
  const auto resolved = [](const std::string& json, int64_t dp) {
    TrainConfig c = TrainConfig::parse(json, "batch.json");
    resolve_global_batch(c, dp);
    return std::make_pair(c.micro_batch_size, c.gradient_accumulation_steps);
  };
  const auto refusal = [](const std::string& json, int64_t dp) {
    try {
      TrainConfig c = TrainConfig::parse(json, "batch.json");
      resolve_global_batch(c, dp);
    } catch (const Error& e) {
      std::printf("dp %lld: %s\n", static_cast<long long>(dp), e.what());
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string with_micro = R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2})";
  EXPECT_EQ(resolved(with_micro, 1), std::make_pair(int64_t{2}, int64_t{4}));
  EXPECT_EQ(resolved(with_micro, 2), std::make_pair(int64_t{2}, int64_t{2}));
  EXPECT_NE(refusal(with_micro, 3).find("no whole solution"), std::string::npos);
  EXPECT_EQ(resolved(R"({"train_batch_size": 12, "gradient_accumulation_steps": 3})", 2),
            std::make_pair(int64_t{2}, int64_t{3}));
  EXPECT_EQ(resolved(R"({"train_batch_size": 16})", 2), std::make_pair(int64_t{8}, int64_t{1}));
  const std::string all_three =
      R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4,
          "gradient_accumulation_steps": 2})";
  EXPECT_EQ(resolved(all_three, 8), std::make_pair(int64_t{4}, int64_t{2}));
  const std::string e = refusal(all_three, 1);
  EXPECT_NE(e.find("does not hold"), std::string::npos) << e;
  EXPECT_NE(e.find("train_micro_batch_size_per_gpu 4"), std::string::npos) << e;
  EXPECT_NE(e.find("1 data-parallel"), std::string::npos) << e;
  EXPECT_NE(refusal(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})", 1)
                .find("no whole solution"),
            std::string::npos);
  // Without train_batch_size nothing changes.
  EXPECT_EQ(resolved(R"({"train_micro_batch_size_per_gpu": 3})", 4),
            std::make_pair(int64_t{3}, int64_t{1}));
}

// A scheduler's parameters belong to its type: WarmupCosineLR's warmup_max_lr was read and never
// used (the lr followed the optimizer's), so it is refused by name, as are WarmupLR's
// total_num_steps, a warmup that would lower the lr, and a decay that never starts.
TEST(TrainConfig, SchedulerParametersOfAnotherTypeAreRefused) {
  const auto error_of = [](const std::string& type, const std::string& params) {
    return parse_error(R"({"scheduler": {"type": ")" + type + R"(", "params": )" + params + "}}");
  };
  std::string e = error_of("WarmupCosineLR", R"({"warmup_max_lr": 0.1})");
  std::printf("%s\n", e.c_str());
  EXPECT_NE(e.find("scheduler.params.warmup_max_lr"), std::string::npos) << e;
  EXPECT_NE(e.find("not a parameter of scheduler WarmupCosineLR"), std::string::npos) << e;
  e = error_of("WarmupDecayLR", R"({"cos_min_ratio": 0.1})");
  EXPECT_NE(e.find("cos_min_ratio"), std::string::npos) << e;
  e = error_of("WarmupLR", R"({"total_num_steps": 100})");
  EXPECT_NE(e.find("total_num_steps"), std::string::npos) << e;
  e = error_of("WarmupLR", R"({"warmup_min_lr": 0.5, "warmup_max_lr": 0.1})");
  EXPECT_NE(e.find("above warmup_max_lr"), std::string::npos) << e;
  e = error_of("WarmupDecayLR", R"({"total_num_steps": 1, "warmup_num_steps": 10})");
  EXPECT_NE(e.find("below warmup_num_steps"), std::string::npos) << e;
  // Each type's own keys still read.
  EXPECT_EQ(error_of("WarmupLR", R"({"warmup_min_lr": 0.0, "warmup_max_lr": 0.1})"), "");
  EXPECT_EQ(error_of("WarmupDecayLR", R"({"warmup_max_lr": 0.1, "total_num_steps": 100})"), "");
  EXPECT_EQ(error_of("WarmupCosineLR", R"({"warmup_min_ratio": 0.1, "cos_min_ratio": 0.1})"), "");
}
