// TrainConfig parsing: a real DeepSpeed config reads unchanged; unknown keys, wrong types and
// out-of-range values are errors that name the key's full path.
#include <gtest/gtest.h>

#include <string>

#include "tierzero/core/error.hpp"
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
  EXPECT_NE(parse_error(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})")
                .find("not a multiple"),
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
  EXPECT_TRUE(c.ds_activation_checkpointing.synchronize_checkpoint_boundary);
  EXPECT_EQ(c.ds_activation_checkpointing.number_checkpoints, 0);
  c = TrainConfig::parse(R"({"activation_checkpointing": {"number_checkpoints": 4}})", "t");
  EXPECT_EQ(c.ds_activation_checkpointing.number_checkpoints, 4);

  std::string e = parse_error(R"({"tierzero": {"activation_checkpointing": "yes"}})");
  std::printf("error: %s\n", e.c_str());
  EXPECT_NE(e.find("'tierzero.activation_checkpointing' must be true or false"), std::string::npos)
      << e;
  e = parse_error(R"({"tierzero": {"activation_checkpoint": true}})");
  EXPECT_NE(e.find("did you mean 'tierzero.activation_checkpointing'"), std::string::npos) << e;
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
