// `tierzero plan`: the fastest configuration that fits the given memory budgets, with its predicted
// step time and why it was chosen, and the faster ones that would not fit. Optionally writes it as
// a TrainConfig JSON that `tierzero train --config` runs. Model: profile::plan (docs/estimator.md).
// With --check it trains the choice here for a few steps and prints the prediction's error. The
// plan itself is built by plan_report.cpp (shared with the Python package's tierzero.plan());
// this file formats it as text, or prints it whole with --json.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "plan_check.hpp"
#include "plan_longest_seq.hpp"
#include "plan_report.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/output_files.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/output_paths.hpp"

namespace tierzero::cli {

namespace {

std::string bytes_of(const nlohmann::json& v) {
  return format_bytes(v.get<size_t>());
}

// What the plan's bytes (and measured times) assume.
void print_precision(const std::string& working, const std::string& compute) {
  std::printf(
      "precision working parameters %s, compute %s%s\n", working.c_str(), compute.c_str(),
      compute != "fp32" ? " (the products' operands and their activations in 16 bits)" : "");
}

void print_report(const nlohmann::json& j) {
  const nlohmann::json& w = j["world"];
  std::printf("plan     %s on %d ranks (dp %d, tp %d, pp %d, sp %d), seq %zu, global batch %lld\n",
              j["model"].get<std::string>().c_str(), w["ranks"].get<int>(), w["dp"].get<int>(),
              w["tp"].get<int>(), w["pp"].get<int>(), w["sp"].get<int>(), j["seq"].get<size_t>(),
              j["global_batch"].get<long long>());
  std::printf("device   %s (%s)\n", j["device"].get<std::string>().c_str(),
              j["device_why"].get<std::string>().c_str());
  print_precision(j["precision"]["working"].get<std::string>(),
                  j["precision"]["compute"].get<std::string>());
  const nlohmann::json& b = j["budgets"];
  std::printf("budgets  device %s, host %s, nvme %s; a tier fits at <= %.0f%% of its budget\n",
              bytes_of(b["device"]).c_str(), bytes_of(b["host"]).c_str(),
              bytes_of(b["nvme"]).c_str(), 100.0 * (1.0 - j["margin"].get<double>()));
  const nlohmann::json& r = j["rates"];
  std::printf(
      "rates    (%s) gemm %.1f GFLOP/s, copy %.2f GB/s, nvme read %.2f / write %.2f GB/s, "
      "cpu adam %.2f GB/s, comm %.2f GB/s\n",
      r["source"].get<std::string>().c_str(), r["gemm_gflops"].get<double>(),
      r["copy_gbps"].get<double>(), r["nvme_read_gbps"].get<double>(),
      r["nvme_write_gbps"].get<double>(), r["adam_cpu_gbps"].get<double>(),
      r["comm_gbps"].get<double>());
  const nlohmann::json& k = j["kernels"];
  if (!k.is_null())
    std::printf(
        "kernels  per layer and sequence: attention %.2f ms forward + %.2f ms backward, %s "
        "%.2f + %.2f ms (%d CPU threads)\n",
        k["attention_forward_s"].get<double>() * 1e3, k["attention_backward_s"].get<double>() * 1e3,
        k["activation"].get<std::string>().c_str(), k["gelu_forward_s"].get<double>() * 1e3,
        k["gelu_backward_s"].get<double>() * 1e3, k["threads"].get<int>());
  else
    std::printf("kernels  outside the GEMMs: not counted (rates from --calibration)\n");
  std::printf("searched %zu configurations, %zu fit\n", j["considered"].get<size_t>(),
              j["fitting"].get<size_t>());
  if (j["rejected"].empty()) std::printf("every configuration searched fits\n");
  if (!j["rejected"].empty()) {
    std::printf("\nthe fastest that would not fit:\n");
    for (const nlohmann::json& c : j["rejected"]) {
      const nlohmann::json& o = c["overflow"];
      std::printf("  %s: %.1f ms/step, %s needs %s > %s usable of %s\n",
                  c["describe"].get<std::string>().c_str(), c["step_s"].get<double>() * 1e3,
                  o["tier"].get<std::string>().c_str(), bytes_of(o["need"]).c_str(),
                  bytes_of(o["usable"]).c_str(), bytes_of(o["budget"]).c_str());
    }
  }
  if (!j["found"].get<bool>()) return;
  const nlohmann::json& c = j["chosen"];
  const nlohmann::json& t = c["time"];
  std::printf("\nchosen   %s\n", c["describe"].get<std::string>().c_str());
  // dp x micro-batch x accumulation cannot always be the asked batch (dp may not divide it).
  const long long chosen_batch = w["dp"].get<long long>() * c["micro_batch"].get<long long>() *
                                 c["accumulation"].get<long long>();
  if (chosen_batch != j["global_batch"].get<long long>())
    std::printf(
        "batch    %lld sequences per step: the %lld asked, rounded up to dp %d x micro-batch x "
        "accumulation\n",
        chosen_batch, j["global_batch"].get<long long>(), w["dp"].get<int>());
  std::printf(
      "why      fastest per token of those that fit: predicted step %.1f ms for %.0f "
      "tokens (%.0f tokens/s)\n",
      c["step_s"].get<double>() * 1e3, c["tokens"].get<double>(), c["tokens_per_s"].get<double>());
  std::printf(
      "    compute %.1f ms (GEMMs %.1f, attention and activation %.1f) + exposed transfer %.1f ms "
      "(of %.1f ms, the rest overlaps compute) + optimizer %.1f ms\n",
      t["compute_s"].get<double>() * 1e3, t["gemm_s"].get<double>() * 1e3,
      t["other_kernels_s"].get<double>() * 1e3, t["exposed_s"].get<double>() * 1e3,
      t["transfer_s"].get<double>() * 1e3, t["optimizer_s"].get<double>() * 1e3);
  if (w["tp"].get<int>() > 1)
    std::printf("    + tensor-parallel collectives %.1f ms (on the critical path)\n",
                t["tensor_parallel_s"].get<double>() * 1e3);
  if (w["sp"].get<int>() > 1)
    std::printf("    + Ulysses all-to-alls %.1f ms (on the critical path)\n",
                t["ulysses_s"].get<double>() * 1e3);
  if (w["pp"].get<int>() > 1)
    std::printf("    + pipeline bubble %.1f ms ((pp - 1) / m of the compute, 1F1B)\n",
                t["pipeline_bubble_s"].get<double>() * 1e3);
  std::printf(
      "error    step times are predicted for a machine the run has to itself; tests hold the "
      "model to within %.0f%% of a measured step (a small GPT, one CPU thread); `plan --check` "
      "trains the choice for a few steps and prints this plan's own error\n",
      100.0 * j["validated_time_error"].get<double>());
  std::printf("  bytes per rank vs budget:\n");
  for (const char* tier : {"device", "host", "nvme"}) {
    const nlohmann::json& e = c["tiers"][tier];
    std::printf("    %-7s %12s of %12s usable (budget %s)   model state %s, buffers %s\n", tier,
                bytes_of(e["need"]).c_str(), bytes_of(e["usable"]).c_str(),
                bytes_of(e["budget"]).c_str(), bytes_of(e["model_state"]).c_str(),
                bytes_of(e["buffers"]).c_str());
  }
}

int run_plan(const PlanFlags& flags, bool json) {
  std::unique_ptr<PlanSetup> setup = prepare_plan(flags);
  PlanSetup& s = *setup;
  const PlanFlags& f = s.flags;
  if (f.longest_seq) {
    TZ_CHECK(!json, "plan --longest-seq has no --json form yet", "leave out --json");
    print_precision(dtype_name(train::working_dtype(s.planned)), dtype_name(s.compute));
    return print_longest_seq(s.req, s.seq, s.model.max_seq_len, seq_quantum(s));
  }
  // Before the measurements: an output that cannot be written is found now, not after them.
  if (!f.output.empty()) train::check_output_file("-o", f.output, {f.calibration});
  TZ_CHECK(!f.check || s.world.ranks() == 1,
           "plan --check trains the chosen configuration in this process, on one rank; this plan "
           "is for " +
               std::to_string(s.world.ranks()) + " ranks",
           "run the written config under mpiexec with `tierzero train --metrics` and compare its "
           "step times with the prediction, or plan for one rank");
  nlohmann::json report = plan_report(s);
  if (!json) print_report(report);
  if (report["found"].get<bool>() && !f.output.empty())
    write_file_atomic(f.output, report["config"].dump(2) + "\n");
  if (json) {
    std::printf("%s\n", report.dump().c_str());
    check_plan_found(report);
    TZ_CHECK(!f.check, "plan --check has no --json form", "leave out --json");
    return 0;
  }
  check_plan_found(report);
  if (!f.output.empty())
    std::printf("\nwrote    %s (run it with `tierzero train --config %s`)\n", f.output.c_str(),
                f.output.c_str());
  if (f.check) {
    std::fflush(stdout);
    const PlanCheck k = run_plan_check(report["config"], 1, f.check_steps);
    const double predicted = report["chosen"]["step_s"].get<double>();
    std::printf(
        "\ncheck    trained the choice here for %lld + %lld steps (%d CPU threads); median step "
        "%.1f ms wall, %.1f ms CPU time per thread\n",
        static_cast<long long>(k.warmup), static_cast<long long>(k.steps), k.threads,
        k.wall_s * 1e3, k.cpu_s * 1e3);
    std::printf(
        "check    predicted %.1f ms vs measured %.1f ms on an idle machine (the lower of the "
        "two): error %+.1f%%, ratio measured / predicted %.2f\n",
        predicted * 1e3, k.idle_s * 1e3, 100.0 * (predicted - k.idle_s) / k.idle_s,
        k.idle_s / predicted);
    if (k.wall_s > 1.2 * k.idle_s)
      std::printf(
          "check    the wall time was %.0f%% longer: other processes shared this machine's "
          "cores\n",
          100.0 * (k.wall_s / k.idle_s - 1.0));
  }
  return 0;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand(
      "plan", "the fastest stage, placement and batch that fit the given memory budgets");
  add_model_options(*sub, f->model);
  add_world_options(*sub, f->world);
  sub->add_option("--device-mem", f->device_mem, "device memory per rank, e.g. 24GiB")
      ->transform(CLI::AsSizeValue(false))
      ->required();
  sub->add_option("--host-mem", f->host_mem,
                  "pinned host memory per rank (default: as the trainer, the rank's share of 80% "
                  "of physical memory); written to -o as the node's budget")
      ->transform(CLI::AsSizeValue(false));
  sub->add_option("--ranks-per-node", f->ranks_per_node,
                  "ranks that share one node's host memory (default: every rank, one node)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--nvme", f->nvme, "NVMe swap space per rank (default 0: no NVMe offload)")
      ->transform(CLI::AsSizeValue(false));
  sub->add_option("--nvme-path", f->nvme_path, "directory on the NVMe drive")
      ->capture_default_str();
  sub->add_option("--seq", f->seq, "tokens per sequence (default: the model's context)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  sub->add_option("--global-batch", f->global_batch, "sequences per optimizer step, all ranks")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  sub->add_option("--margin", f->margin, "fraction of each budget kept free")
      ->check(finite_in(0.0, 0.9))
      ->capture_default_str();
  sub->add_option("--calibration", f->calibration,
                  "rates file: `tierzero bench` JSON lines or an object of rates "
                  "(default: measure quickly)");
  sub->add_option("--device", f->device,
                  "cpu, cuda or cuda:N: measured, and written to -o (default: cuda when this "
                  "machine has a GPU, else cpu)");
  sub->add_option("--threads", f->threads,
                  "CPU kernel threads, measured with and written to -o (default: every core)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  sub->add_option("-o,--output", f->output, "write the chosen configuration as a config JSON");
  sub->add_flag("--check", f->check,
                "train the choice here for 1 + --check-steps steps and print the predicted step "
                "time's error (one rank)");
  sub->add_flag("--longest-seq", f->longest_seq,
                "the longest sequence (up to the model's context) this model trains at with "
                "these budgets, by the estimator, with the placement chosen there, for "
                "checkpoints on each tier");
  sub->add_option("--precision", f->precision,
                  "the working parameters' type, written to -o: fp32, bf16 or fp16; the products "
                  "compute in it on CUDA and in fp32 on the CPU, as `tierzero train` runs it")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  sub->add_option("--recompute", f->recompute,
                  "search only this recompute mode: none, selective or full (default: all three)")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  sub->add_option("--check-steps", f->check_steps, "steps --check measures after one warm-up")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}))
      ->capture_default_str();
  sub->add_flag("--json", *json,
                "print the plan as one JSON object (what tierzero.plan() returns in Python)");
  return {sub, [f, json] { return run_plan(*f, *json); }};
}

}  // namespace tierzero::cli
