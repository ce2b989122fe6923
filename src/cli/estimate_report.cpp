// estimate_report (estimate_report.hpp): the estimate as one JSON object.
#include "estimate_report.hpp"

#include "tierzero/nn/gpt_modules.hpp"

namespace tierzero::cli {
namespace {

nlohmann::json tier_json(const profile::TierBytes& b, bool skip_zero) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t t = 0; t < kNumTiers; ++t) {
    nlohmann::json cats = nlohmann::json::object();
    for (size_t c = 0; c < kNumCategories; ++c) {
      const size_t v = b.bytes[t][c];
      if (v > 0 || !skip_zero) cats[category_name(static_cast<Category>(c))] = v;
    }
    out[tier_name(static_cast<Tier>(t))] = cats;
  }
  return out;
}

}  // namespace

nlohmann::json estimate_report(const EstimateSettings& s, const profile::Estimate& e,
                               const std::vector<profile::TableRow>& table) {
  const profile::WorldLayout& w = s.input.world;
  nlohmann::json j;
  j["model"] = {{"layers", s.model.num_layers},
                {"heads", s.model.num_heads},
                {"channels", s.model.channels},
                {"vocab", s.model.vocab_size},
                {"padded_vocab", s.model.padded_vocab_size},
                {"context", s.model.max_seq_len}};
  j["parameters"] = e.parameters;  // of one rank's tensor/pipeline-parallel part
  j["model_parameters"] = nn::gpt_parameter_count(s.model);
  j["shard_parameters"] = s.input.stage == 0
                              ? e.parameters
                              : (e.parameters + static_cast<size_t>(w.partition_group()) - 1) /
                                    static_cast<size_t>(w.partition_group());
  j["world"] = {{"ranks", w.ranks()}, {"dp", w.dp},
                {"tp", w.tp},         {"pp", w.pp},
                {"sp", w.sp},         {"sequence_parallel", s.sequence_parallel && w.tp > 1}};
  j["stage"] = s.input.stage;
  j["offload_param"] = s.param_desc;
  j["offload_optimizer"] = s.optimizer_desc;
  j["micro_batch"] = s.micro_batch;
  j["seq_len"] = s.seq_len;
  j["checkpointing"] = s.checkpointing;
  j["recompute"] = s.recompute.name();
  // What the bytes assume: the working parameters' type and the dtype the model computes in
  // (the activations' and a gathered unit's; tierzero.compute_dtype resolved for the device).
  j["working_dtype"] = dtype_name(s.input.placement.working);
  j["compute_dtype"] = dtype_name(s.input.compute);
  j["persistent_units"] = e.persistent_units;
  j["tiers"] = tier_json(e.persistent, false);
  j["buffers"] = tier_json(e.buffers, true);
  nlohmann::json totals = nlohmann::json::object();
  for (Tier t : {Tier::device, Tier::host, Tier::nvme}) totals[tier_name(t)] = e.tier_total(t);
  j["totals"] = totals;
  nlohmann::json rows = nlohmann::json::array();
  for (const profile::TableRow& r : table) {
    nlohmann::json row = {{"stage", r.stage},
                          {"offload", profile::offload_option_name(r.offload)},
                          {"valid", r.valid}};
    if (r.valid) {
      for (Tier t : {Tier::device, Tier::host, Tier::nvme})
        row[tier_name(t)] = r.estimate.tier_total(t);
    } else {
      row["reason"] = "n/a: " + r.reason;
    }
    rows.push_back(row);
  }
  j["table"] = rows;
  return j;
}

}  // namespace tierzero::cli
