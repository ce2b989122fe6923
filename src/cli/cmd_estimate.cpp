// `tierzero estimate`: bytes per tier and category that each rank will hold for a model, world
// layout, ZeRO stage and placement, and an overview over every stage and offload option. The
// numbers come from profile::estimate (model state exact, buffers bounded; docs/estimator.md).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "estimate_model.hpp"
#include "estimate_report.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt_modules.hpp"

namespace tierzero::cli {

namespace {

struct EstimateFlags {
  ModelFlags model;
  WorldFlags world;
  RunFlags run;
  bool json = false;
};

void print_human(const EstimateSettings& s, const profile::Estimate& e,
                 const std::vector<profile::TableRow>& table) {
  const profile::WorldLayout& w = s.input.world;
  const size_t total = nn::gpt_parameter_count(s.model);
  std::printf("model     %s, %zu parameters\n", s.model.str().c_str(), total);
  if (w.tp > 1 || w.pp > 1)
    std::printf("          %zu of them on each rank's tensor/pipeline-parallel part (%zu units)\n",
                e.parameters, e.units);
  else
    std::printf("          every rank works on all of them (%zu units)\n", e.units);
  const size_t group = static_cast<size_t>(w.partition_group());
  const int stage = s.input.stage;
  if (stage == 0 || group == 1)
    std::printf("          not sharded (%s): each rank holds its part's full state\n",
                stage == 0 ? "stage 0" : "a partition group of one rank");
  else
    std::printf(
        "          stage %d shards %s over the %zu ranks of a partition group: a shard of %zu "
        "parameters per rank\n",
        stage,
        stage == 1   ? "the optimizer states"
        : stage == 2 ? "the gradients and optimizer states"
                     : "parameters, gradients and optimizer states",
        group, (e.parameters + group - 1) / group);
  std::printf("world     %d ranks = dp %d x tp %d x pp %d x sp %d (partition group %d)%s\n",
              w.ranks(), w.dp, w.tp, w.pp, w.sp, w.partition_group(),
              s.sequence_parallel && w.tp > 1 ? ", Megatron sequence parallelism" : "");
  std::printf(
      "run       stage %d, offload_param %s, offload_optimizer %s, micro-batch %zu, seq "
      "%zu, checkpointing %s%s\n",
      s.input.stage, s.param_desc.c_str(), s.optimizer_desc.c_str(), s.micro_batch, s.seq_len,
      s.checkpointing ? "on" : "off", s.recompute.is_selective() ? ", selective recompute" : "");
  std::printf("precision working parameters %s, compute %s%s\n",
              dtype_name(s.input.placement.working), dtype_name(s.input.compute),
              s.input.compute != DType::f32
                  ? " (the products' operands and their activations in 16 bits)"
                  : "");
  if (s.input.stage == 3)
    std::printf("          %zu units below the persistence threshold (%zu) stay gathered\n",
                e.persistent_units, s.input.param_persistence_threshold);
  std::printf("\nper rank   %-10s %-11s %14s %14s %14s\n", "tier", "category", "model state",
              "buffers", "total");
  for (Tier t : {Tier::device, Tier::host, Tier::nvme}) {
    for (size_t c = 0; c < kNumCategories; ++c) {
      const auto cat = static_cast<Category>(c);
      const size_t p = e.persistent.at(t, cat), b = e.buffers.at(t, cat);
      if (p + b == 0) continue;
      std::printf("           %-10s %-11s %14s %14s %14s\n", tier_name(t), category_name(cat),
                  format_bytes(p).c_str(), format_bytes(b).c_str(), format_bytes(p + b).c_str());
    }
    std::printf("           %-10s %-11s %14s %14s %14s\n", tier_name(t), "= total",
                format_bytes(e.persistent.tier_total(t)).c_str(),
                format_bytes(e.buffers.tier_total(t)).c_str(),
                format_bytes(e.tier_total(t)).c_str());
  }
  std::printf("\nall stages and offload options (per rank, model state + buffers)\n");
  std::printf("  %-5s %-22s %12s %12s %12s\n", "stage", "offload", "device", "host", "nvme");
  for (const profile::TableRow& r : table) {
    if (!r.valid) {
      std::printf("  %-5d %-22s n/a: %s\n", r.stage, profile::offload_option_name(r.offload),
                  r.reason.c_str());
      continue;
    }
    std::printf("  %-5d %-22s %12s %12s %12s\n", r.stage, profile::offload_option_name(r.offload),
                format_bytes(r.estimate.tier_total(Tier::device)).c_str(),
                format_bytes(r.estimate.tier_total(Tier::host)).c_str(),
                format_bytes(r.estimate.tier_total(Tier::nvme)).c_str());
  }
}

int run_estimate(const EstimateFlags& f) {
  const EstimateSettings s = resolve_settings(f.model, f.world, f.run);
  const profile::Estimate e = profile::estimate(s.input);
  const std::vector<profile::TableRow> table = profile::estimate_table(s.input);
  if (!f.json) {
    print_human(s, e, table);
    return 0;
  }
  std::printf("%s\n", estimate_report(s, e, table).dump(2).c_str());
  return 0;
}

}  // namespace

Command add_estimate_command(CLI::App& app) {
  auto f = std::make_shared<EstimateFlags>();
  CLI::App* sub = app.add_subcommand(
      "estimate", "bytes per tier and category per rank, for a model, layout, stage and placement");
  add_model_options(*sub, f->model);
  add_world_options(*sub, f->world);
  add_run_options(*sub, f->run);
  sub->add_flag("--json", f->json, "machine-readable output");
  return {sub, [f] { return run_estimate(*f); }};
}

}  // namespace tierzero::cli
