// What a run reports about itself outside the step: the opening line, the profile recorder
// primed with the run's shape and the estimator's prediction, the --memory-json file, and the
// memory summaries at the end (run_report.hpp).
#include "run_report.hpp"

#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tierzero/core/error.hpp"
#include "tierzero/core/output_files.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/profile/estimator.hpp"
#include "tierzero/train/activation_estimate.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/estimate_inputs.hpp"
#include "tierzero/train/placement_from_config.hpp"
#include "tierzero/train/progress.hpp"

namespace tierzero::train {

namespace {
// One micro-batch in flight of this rank's model in its recompute mode, as the model sizes it
// (its dims carry the backend's attention layout).
size_t one_micro_batch_activation_bytes(const nn::GPT& model, size_t B, size_t T) {
  const nn::ActivationDims d = model.dims(B, T);
  return nn::GPT::micro_batch_bytes_for(model.config(), d, model.stage(), model.recompute()) +
         nn::ModelScratch::bytes_for(d, model.recompute());
}
}  // namespace

// "device tier", or where the offloaded states go: "optimizer on nvme (50% of units), ...".
std::string describe_placement(const TrainConfig& c) {
  std::string out;
  auto add = [&](const char* what, const char* key, const OffloadConfig& o) {
    const Tier tier = tier_from_name(o.device, key);
    if (tier == Tier::device) return;
    if (!out.empty()) out += ", ";
    out += std::string(what) + " on " + tier_name(tier);
    if (o.ratio < 1.0)
      out += " (" + std::to_string(static_cast<int>(o.ratio * 100.0)) + "% of units)";
  };
  add("params", "zero_optimization.offload_param.device", c.zero.offload_param);
  add("optimizer", "zero_optimization.offload_optimizer.device", c.zero.offload_optimizer);
  return out.empty() ? "device tier" : out;
}

// A recorder primed with what the run is, where each unit's states live, and what the estimator
// predicts for every tier and category, so the report can set measured against predicted.
std::unique_ptr<profile::ProfileRecorder> make_recorder(
    const TrainConfig& c, bool timeline, const std::vector<nn::GPT*>& chunks,
    const nn::ParamLayout& layout, const zero::PartitionStore* store, const UnitGrouping* grouping,
    int rank, int ranks, size_t budget, const Device& device) {
  profile::RecorderOptions options;
  options.timeline = timeline;
  // Where the driver counts device bytes (CUDA), the report shows what nobody accounted for.
  if (device.driver_used_bytes() >= 0)
    options.driver_device_used = [&device] { return device.driver_used_bytes(); };
  auto recorder = std::make_unique<profile::ProfileRecorder>(options);
  const nn::GPT& model = *chunks.front();
  std::vector<nn::PipelineStage> chunk_stages;
  std::string stage_text;
  for (const nn::GPT* m : chunks) {
    chunk_stages.push_back(m->stage());
    stage_text += (stage_text.empty() ? "" : "; ") + m->stage().str();
  }
  const size_t pp = model.stage().stages / chunks.size();
  profile::RunInfo info;
  info.model = (model.config().is_gpt2() ? "GPT-2 " : "Llama family ") + model.config().str();
  info.parameters = static_cast<int64_t>(layout.parameter_count());
  info.ranks = ranks;
  info.rank = rank;
  info.stage = static_cast<int>(c.zero.stage);
  info.device = device.name();
  info.device_budget = budget;
  info.extra["micro_batch"] = std::to_string(c.micro_batch_size);
  info.extra["seq_len"] = std::to_string(c.seq_len);
  info.extra["offload_param"] = c.zero.offload_param.device;
  info.extra["offload_optimizer"] = c.zero.offload_optimizer.device;
  info.extra["activation_checkpointing"] = c.activation_checkpointing ? "on" : "off";
  info.extra["recompute"] = c.recompute;
  // What the activation and gathered-unit bytes are held in (tierzero.compute_dtype resolved).
  info.extra["working_dtype"] = dtype_name(working_dtype(c));
  info.extra["compute_dtype"] = dtype_name(model.compute());
  if (c.activation_checkpointing)
    info.extra["activation_checkpoints"] = c.activation_checkpoints.device;
  // Under tensor parallelism the parameters, placements and estimate are this rank's pieces.
  const size_t tp = model.tensor_parallel();
  info.extra["tensor_parallel"] = std::to_string(tp);
  info.extra["sequence_parallel"] = model.sequence_parallel() ? "on" : "off";
  if (pp > 1) {
    info.extra["pipeline_parallel"] = std::to_string(pp);
    info.extra["pipeline_stage"] = stage_text;
    info.extra["pipeline_schedule"] = c.pipeline_schedule;
    if (chunks.size() > 1) info.extra["pipeline_virtual_stages"] = std::to_string(chunks.size());
  }
  if (tp > 1 || pp > 1)
    info.extra["parameters_whole_model"] =
        std::to_string(nn::gpt_param_layout(model.config()).parameter_count());
  recorder->set_run_info(info);
  std::vector<profile::PlacementRow> rows;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const nn::ParamUnit& unit = layout.units()[u];
    profile::PlacementRow row{unit.name, unit.numel, "device", "device", "device"};
    if (store) {
      // The store unit holding it (blocks_per_unit joins several nn units into one).
      const zero::UnitPlacement& p = store->placement()[grouping ? grouping->store_unit[u] : u];
      row.param_tier = tier_name(p.param);
      row.grad_tier = tier_name(p.grad);
      row.optimizer_tier = tier_name(p.optimizer);
    }
    rows.push_back(row);
  }
  recorder->set_placements(rows);
  profile::WorldLayout world;
  world.tp = static_cast<int>(tp);
  world.pp = static_cast<int>(pp);
  world.sp = static_cast<int>(model.ulysses());
  world.dp = ranks / (world.tp * world.pp * world.sp);
  const auto B = static_cast<size_t>(c.micro_batch_size), T = static_cast<size_t>(c.seq_len);
  // This rank's own (estimate and plan take the rank where it is largest): under pipeline
  // parallelism the schedule's micro-batches in flight, each its chunks' blocks; else one
  // micro-batch as this backend keeps it. With the checkpoints on a tier, the micro-batches hold
  // none of them: the tier counts them.
  const ActivationEstimate activations =
      activation_estimate(model.config(), model.dims(B, T),
                          world.pp > 1 ? chunk_stages : std::vector<nn::PipelineStage>{},
                          nn::pipeline_schedule_from_name(c.pipeline_schedule),
                          static_cast<size_t>(c.gradient_accumulation_steps), model.recompute(),
                          checkpoint_tier_of(c.activation_checkpoints),
                          static_cast<size_t>(c.activation_checkpoints.buffer_count));
  profile::EstimateInput input =
      estimate_input_from(c, units_from_layout(layout, static_cast<size_t>(c.blocks_per_unit)),
                          world, activations.activation_bytes);
  input.checkpoints = activations.checkpoints;
  input.compute = model.compute();  // how the store hands the units out
  const profile::Estimate e = profile::estimate(input);
  profile::TierCategoryBytes predicted{};
  for (size_t t = 0; t < kNumTiers; ++t)
    for (size_t k = 0; k < kNumCategories; ++k)
      predicted[t][k] = e.at(static_cast<Tier>(t), static_cast<Category>(k));
  recorder->set_predicted(predicted);
  return recorder;
}

namespace {

// This rank's tracked bytes per tier and category (see Trainer::run), then `sections` (an
// object: the pipeline's or Ulysses' description of what the rank's activations should be).
void write_memory_json_file(const std::string& path, int rank, int ranks,
                            const nlohmann::ordered_json& sections) {
  const std::string file = rank == 0 ? path : path + ".rank" + std::to_string(rank);
  const MemoryTracker& t = MemoryTracker::global();
  nlohmann::ordered_json j;
  j["rank"] = rank;
  j["ranks"] = ranks;
  nlohmann::ordered_json tiers = nlohmann::ordered_json::object();
  for (size_t ti = 0; ti < kNumTiers; ++ti) {
    const auto tier = static_cast<Tier>(ti);
    nlohmann::ordered_json cats = nlohmann::ordered_json::object();
    for (size_t c = 0; c < kNumCategories; ++c) {
      const auto cat = static_cast<Category>(c);
      cats[category_name(cat)] = {{"current", t.current(tier, cat)}, {"peak", t.peak(tier, cat)}};
    }
    tiers[tier_name(tier)] = cats;
  }
  j["tiers"] = tiers;
  // Each tier's peak of the sum over categories (not the sum of their peaks): what a budget limits.
  nlohmann::ordered_json tier_peaks = nlohmann::ordered_json::object();
  for (size_t ti = 0; ti < kNumTiers; ++ti)
    tier_peaks[tier_name(static_cast<Tier>(ti))] = t.peak(static_cast<Tier>(ti));
  j["tier_peaks"] = tier_peaks;
  // What the operating system saw: the process's peak resident set (every host allocation, the
  // CPU backend's device arena, libraries and untracked memory), to check the budgets against.
  struct rusage usage {};
  if (::getrusage(RUSAGE_SELF, &usage) == 0)
    j["process"] = {{"peak_rss_bytes", static_cast<int64_t>(usage.ru_maxrss) * 1024}};
  for (const auto& [key, value] : sections.items()) j[key] = value;
  write_file_atomic(file, j.dump() + "\n");
}

// The --memory-json section of a Ulysses rank: its slice of the sequence, and its activation
// bytes by the model's own count beside those of the same micro-batch on one rank (the tests
// check the tracker's peak against the first and print the ratio to the second).
nlohmann::ordered_json ulysses_memory_json(const nn::GPT& model, size_t B, size_t T) {
  const nn::Recompute ckpt = model.recompute();
  const nn::ActivationDims d = model.dims(B, T);
  nlohmann::ordered_json j;
  j["ulysses"] = model.ulysses();
  j["seq_len"] = T;
  j["positions"] = d.T;
  j["local_heads"] = d.local_heads;
  j["activation_bytes"] = one_micro_batch_activation_bytes(model, B, T);
  j["one_rank_activation_bytes"] =
      nn::GPT::activation_bytes_for(model.config(), B, T, ckpt, 1, false, 1, model.compute());
  return j;
}

// The --memory-json section of a pipeline rank: its stage, and what its activations should be:
// the chunks' one shared scratch plus, per chunk, one of its micro-batches' activations per
// micro-batch the schedule keeps in flight there (the tests check the tracker's peak against it).
nlohmann::ordered_json pipeline_memory_json(const PipelineExecutor& pipe,
                                            const std::vector<nn::GPT*>& chunks,
                                            const TrainConfig& c, size_t B, size_t T) {
  const nn::GPT& model = *chunks.front();
  const nn::ActivationDims dims = model.dims(B, T);
  const nn::Recompute ckpt = model.recompute();
  const auto bytes = [&](const nn::PipelineStage& st) {
    return nn::GPT::micro_batch_bytes_for(model.config(), dims, st, ckpt);
  };
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  size_t blocks = 0, in_flight = 0;
  for (size_t k = 0; k < chunks.size(); ++k) {
    const nn::PipelineStage& st = chunks[k]->stage();
    blocks += st.num_blocks;
    in_flight += pipe.slots(k);
    list.push_back({{"virtual_stage", st.stage},
                    {"first_block", st.first_block},
                    {"blocks", st.num_blocks},
                    {"in_flight", pipe.slots(k)},
                    {"micro_batch_activation_bytes", bytes(st)}});
  }
  nlohmann::ordered_json j;
  j["stage"] = pipe.shape().stage;
  j["stages"] = pipe.shape().stages;
  j["virtual_stages"] = chunks.size();
  j["schedule"] = c.pipeline_schedule;
  j["micro_batches"] = c.gradient_accumulation_steps;
  j["first_block"] = model.stage().first_block;
  j["blocks"] = blocks;
  j["in_flight"] = in_flight;
  j["micro_batch_activation_bytes"] = bytes(model.stage());  // chunk 0's
  j["scratch_activation_bytes"] = nn::ModelScratch::bytes_for(dims, ckpt);
  j["chunks"] = list;
  return j;
}

// The memory summary of this rank with a "rank r: " prefix on every line, written at once so
// that ranks sharing a terminal do not interleave within a summary.
void print_rank_memory_summary(std::FILE* out, int rank, const MemoryTracker& tracker) {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* buffer = open_memstream(&text, &size);
  if (!buffer) {  // no memory for the buffer: print unprefixed rather than not at all
    print_memory_summary(out, tracker);
    return;
  }
  print_memory_summary(buffer, tracker);
  std::fclose(buffer);
  std::string prefixed;
  const std::string prefix = "rank " + std::to_string(rank) + ": ";
  bool line_start = true;
  for (size_t i = 0; i < size; ++i) {
    if (line_start) prefixed += prefix;
    prefixed += text[i];
    line_start = text[i] == '\n';
  }
  std::free(text);
  std::fwrite(prefixed.data(), 1, prefixed.size(), out);
  std::fflush(out);
}

}  // namespace

void print_run_banner(std::FILE* out, const TrainConfig& c, const RunShape& shape,
                      const ModelChunks& chunks, const ParamState& params, int world_size,
                      size_t parameter_count, const std::string& device_name) {
  if (!out) return;
  const auto B = static_cast<size_t>(c.micro_batch_size);
  const auto T = static_cast<size_t>(c.seq_len);
  const nn::GPT& model = *chunks.model;
  std::fprintf(out,
               "tierzero train: GPT-2 %s, %zu parameters, device %s, batch %zu x %zu x %lld "
               "accumulation, %lld steps",
               shape.model.str().c_str(), parameter_count, device_name.c_str(), B, T,
               static_cast<long long>(c.gradient_accumulation_steps),
               static_cast<long long>(c.steps));
  if (const zero::PartitionStore* store = params.store()) {
    std::fprintf(out, ", ZeRO stage %d on %d rank(s), %s", store->stage(), world_size,
                 describe_placement(c).c_str());
    if (c.communication_data_type != "fp32")
      std::fprintf(out, ", gradients reduced in %s", c.communication_data_type.c_str());
  }
  if (model.tensor_parallel() > 1)
    std::fprintf(out, ", dp %d x tensor-parallel %zu%s (%zu parameters per rank)", shape.dp_size,
                 model.tensor_parallel(),
                 model.sequence_parallel() ? " with sequence parallelism" : "",
                 model.layout().parameter_count());
  if (model.ulysses() > 1)
    std::fprintf(out, ", dp %d x Ulysses %zu (%zu of each sequence's %zu positions per rank)",
                 shape.dp_size, model.ulysses(), T / model.ulysses(), T);
  if (c.pipeline_parallel > 1) {
    std::fprintf(out, ", pipeline-parallel %lld (%s", static_cast<long long>(c.pipeline_parallel),
                 c.pipeline_schedule.c_str());
    if (!chunks.more.empty())
      std::fprintf(out, ", %zu virtual stages per rank", chunks.more.size() + 1);
    for (const nn::GPT* m : chunks.all()) std::fprintf(out, "; %s", m->stage().str().c_str());
    std::fprintf(out, ")");
  }
  if (c.activation_checkpointing) std::fprintf(out, ", activation checkpointing");
  if (c.recompute == "selective") std::fprintf(out, ", selective recompute");
  if (c.activation_checkpointing && c.activation_checkpoints.device != "device")
    std::fprintf(out, " (checkpoints on %s)",
                 c.activation_checkpoints.device == "cpu" ? "the host" : "nvme");
  std::fprintf(out, "\n");
}

void write_memory_json(const std::string& path, const TrainConfig& c, const StepSchedule& schedule,
                       const ModelChunks& chunks, int rank, int ranks) {
  const auto B = static_cast<size_t>(c.micro_batch_size);
  const auto T = static_cast<size_t>(c.seq_len);
  nlohmann::ordered_json sections = nlohmann::ordered_json::object();
  if (const PipelineExecutor* pipe = schedule.pipeline())
    sections["pipeline"] = pipeline_memory_json(*pipe, chunks.all(), c, B, T);
  if (chunks.model->ulysses() > 1) sections["ulysses"] = ulysses_memory_json(*chunks.model, B, T);
  write_memory_json_file(path, rank, ranks, sections);
}

void print_memory_summaries(std::FILE* all_ranks_out, std::FILE* out, int rank, int world_size,
                            comm::Communicator* group) {
  if (world_size > 1 && all_ranks_out) {
    // Rank by rank (barriers between), so that the summaries usually arrive in rank order; every
    // rank gets the same `out` (null or not), so all or none take part.
    for (int r = 0; r < world_size; ++r) {
      if (r == rank) print_rank_memory_summary(all_ranks_out, rank, MemoryTracker::global());
      group->barrier();
    }
  } else {
    print_memory_summary(out, MemoryTracker::global());
  }
}
}  // namespace tierzero::train
