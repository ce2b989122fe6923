// The plan `tierzero plan` prints and `tierzero.plan()` (the Python package) returns, built once:
// the settings are resolved, the rates measured here (or read from a calibration file), the
// planner searched, and the outcome written as one JSON object. The command formats its text from
// that object and prints it whole with --json, so the two never differ.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "estimate_model.hpp"
#include "plan_kernel_times.hpp"
#include "tierzero/profile/planner.hpp"
#include "tierzero/train/train_config.hpp"

namespace tierzero::cli {

struct PlanFlags {
  ModelFlags model;
  WorldFlags world;
  size_t device_mem = 0;
  size_t host_mem = 0;  // 0: the trainer's default, the rank's share of 80% of physical memory
  int64_t ranks_per_node = 0;  // ranks sharing a node's host memory; 0: every rank (one node)
  size_t nvme = 0;             // 0: NVMe offload is not considered
  std::string nvme_path = "/var/tmp/tierzero_nvme";
  int64_t seq = 0;  // 0: the model's context length
  int64_t global_batch = 32;
  double margin = 0.10;
  std::string calibration;
  std::string device;   // empty: cuda when a GPU is present, else cpu (said in the output)
  int64_t threads = 0;  // CPU kernel threads; 0: OpenMP's default (every core)
  std::string output;
  bool check = false;
  int64_t check_steps = 5;
  bool longest_seq = false;  // binary search for the longest sequence that fits
  std::string recompute;     // empty: every recompute mode searched; else only this one
  // The working parameters' type, written to -o: fp32, bf16 or fp16. The compute dtype follows as
  // `tierzero train` picks it on the plan's device (16-bit on CUDA, fp32 on the CPU).
  std::string precision = "fp32";
};

// A plan's inputs: the resolved settings and the planner's request, whose functions read this
// object (so it stays where it was made: prepare_plan hands out a unique_ptr).
struct PlanSetup {
  PlanFlags flags;         // device resolved
  std::string device_why;  // how the device was chosen
  nn::GPTConfig model;
  profile::WorldLayout world;
  train::TrainConfig planned;  // the config the plan writes, before its choices
  DType compute = DType::f32;  // what `planned` computes in on the plan's device
  size_t seq = 0;  // the request's activation functions read it (--longest-seq moves it)
  profile::PlanRequest req;
  LayerKernelTimes layer;  // layers == 0 when the rates come from a calibration file
};

// Resolves the settings and fills the request's sizes and budgets; measures nothing. Throws
// Error on settings that cannot be planned.
std::unique_ptr<PlanSetup> prepare_plan(const PlanFlags& flags);

// Quantum of the sequence lengths the layout can cut (Megatron sequence parallelism over tp,
// Ulysses over sp).
size_t seq_quantum(const PlanSetup& s);

// Measures the rates and kernel times (or reads --calibration), plans, and reports: the settings,
// the rates, the configurations searched and the fastest that would not fit, and when one fits
// (`found`) the chosen one with its predicted step time, its bytes per tier against the budgets
// and the config JSON that `tierzero train --config` runs (`config`).
nlohmann::json plan_report(PlanSetup& s);

// Throws the command's Error when the report found no configuration that fits.
void check_plan_found(const nlohmann::json& report);

// The step-time model's error that tests/profile/run_plan_time.sh holds it to.
extern const double kValidatedTimeError;

}  // namespace tierzero::cli
