// The trainer's checkpoints: training checkpoints (every rank its state blocks; what must match
// to resume, writing one, restoring one) and the llm.c model file written at the end, streamed
// piece by piece from every rank of data-parallel replica 0.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "run_report.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/error_report.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/tp/tensor_parallel_params.hpp"
#include "tierzero/train/checkpoint.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/rank_agreement.hpp"
#include "tierzero/train/run_outputs.hpp"
#include "tierzero/train/store_provider.hpp"
#include "tierzero/train/training_checkpoint.hpp"
#include "trainer_state.hpp"

namespace tierzero::train {

namespace {

// A Llama-family model's architecture in the checkpoint identity (read back by
// checkpoint_contents' model_arch_from); flags as 0/1.
nlohmann::ordered_json model_arch_json(const nn::GPTArch& a) {
  const nn::RopeScaling& r = a.rope_scaling;
  return {{"norm", a.norm == nn::NormKind::rmsnorm ? "rmsnorm" : "layernorm"},
          {"norm_eps", a.norm_eps},
          {"positions", a.positions == nn::PositionKind::rope ? "rope" : "learned"},
          {"rope_theta", a.rope_theta},
          {"rope_llama3", r.llama3 ? 1 : 0},
          {"rope_factor", r.factor},
          {"rope_low_freq_factor", r.low_freq_factor},
          {"rope_high_freq_factor", r.high_freq_factor},
          {"rope_original_max", r.original_max_position_embeddings},
          {"mlp", a.mlp == nn::MlpKind::swiglu ? "swiglu" : "gelu"},
          {"intermediate_size", a.intermediate_size},
          {"num_kv_heads", a.num_kv_heads},
          {"head_dim", a.head_dim},
          {"qkv_bias", a.qkv_bias ? 1 : 0},
          {"linear_bias", a.linear_bias ? 1 : 0},
          {"tie_embeddings", a.tie_embeddings ? 1 : 0}};
}

// A checkpoint block's element type: fp32 for 4-byte states, else the working type.
std::string block_dtype(const TrainConfig& c, size_t elem_bytes) {
  return dtype_name(elem_bytes == sizeof(float) ? DType::f32 : working_dtype(c));
}

// What a checkpoint may be resumed under when it differs: the data-parallel (and Ulysses) world,
// the ZeRO stage, the placement, and the micro-batch (the global batch stays). The state is then
// read by ranges (CheckpointRanges).
const std::vector<std::string> kCheckpointLayoutKeys = {"ranks",      "dp",        "sp",
                                                        "zero_stage", "placement", "micro_batch"};

// The checkpoint's kinds that hold a block kind's values, in order of preference: the fp32 master
// is the working parameters themselves where no separate master was kept.
std::vector<std::string> source_kinds(const std::string& kind) {
  if (kind == "params_full" || kind == "param_shard") return {"params_full", "param_shard"};
  if (kind == "master") return {"master", "params_full", "param_shard"};
  return {kind};
}

}  // namespace

std::string Trainer::save_model_streamed(const std::string& path) {
  State& s = *state_;
  const nn::ParamLayout& layout = s.chunks.layout();
  const bool split = layout.tp().size > 1 || config_.pipeline_parallel > 1;
  if (!split) {
    std::unique_ptr<TolerantModelWriter> writer;
    if (s.run.rank == 0)
      writer = std::make_unique<TolerantModelWriter>(path, s.shape.model, layout);
    s.params->for_each_piece([&](size_t begin, size_t count, const float* values) {
      if (writer) writer->write(begin, count, values);
    });
    if (!writer) return "";
    writer->commit();
    return writer->failure();
  }
  // Data-parallel replica 0 (sequence-parallel rank 0) holds every piece once; the other
  // replicas only take part in reads.
  // Elements per message: 16 MiB; TIERZERO_TEST_SAVE_CHUNK_ELEMS makes it small enough for the
  // tests' tiny models to take several (partial chunks, chunks across units).
  size_t kChunk = size_t{1} << 22;
  if (const char* v = std::getenv("TIERZERO_TEST_SAVE_CHUNK_ELEMS"); v != nullptr && *v != '\0')
    kChunk = std::max<size_t>(1, std::strtoull(v, nullptr, 10));
  const int tag = 7;
  comm::Communicator& world = s.run.session->world();
  const comm::MeshLayout& mesh = s.groups.mesh->layout();
  const comm::MeshCoord me = mesh.coords(s.run.rank);
  if (me[static_cast<size_t>(comm::MeshDim::dp)] != 0 ||
      me[static_cast<size_t>(comm::MeshDim::sp)] != 0) {
    s.params->for_each_piece([](size_t, size_t, const float*) {});
    return "";
  }
  if (s.run.rank != 0) {
    std::vector<float> chunk;  // (up to kChunk) fp32, the next message
    chunk.reserve(kChunk);
    const auto send = [&] {
      world.send(chunk.data(), chunk.size(), DType::f32, 0, tag);
      chunk.clear();
    };
    s.params->for_each_piece([&](size_t, size_t count, const float* values) {
      for (size_t i = 0; i < count;) {
        const size_t take = std::min(kChunk - chunk.size(), count - i);
        chunk.insert(chunk.end(), values + i, values + i + take);
        i += take;
        if (chunk.size() == kChunk) send();
      }
    });
    if (!chunk.empty()) send();
    return "";
  }
  // Rank 0: the file's layout is the one-rank model's; every rank's layout maps onto it run by
  // run. Replicated tensors come from tp rank 0, the tied embeddings from the first stage.
  const nn::ParamLayout full_layout = nn::gpt_param_layout(s.shape.model);
  TolerantModelWriter writer(path, s.shape.model, full_layout);
  struct Source {
    int from;
    size_t tp_rank, stage;
    nn::ParamLayout layout;
    size_t done = 0;  // elements received
  };
  const auto write = [&](const nn::ParamLayout& from_layout, size_t tp_rank, size_t stage,
                         size_t begin, size_t count, const float* values) {
    nn::for_each_whole_run(from_layout, full_layout, begin, count,
                           [&](const nn::ParamTensor& t, size_t full, size_t at, size_t n) {
                             if (t.replicated() && tp_rank > 0) return;
                             if (from_layout.units()[t.unit].tied && stage > 0) return;
                             writer.write(full, n, values + at);
                           });
  };
  const auto tp = static_cast<size_t>(mesh.shape().tp);
  const auto pp = static_cast<size_t>(mesh.shape().pp);
  std::vector<Source> sources;
  for (size_t st = 0; st < pp; ++st)
    for (size_t t = 0; t < tp; ++t) {
      comm::MeshCoord c{};
      c[static_cast<size_t>(comm::MeshDim::tp)] = static_cast<int>(t);
      c[static_cast<size_t>(comm::MeshDim::pp)] = static_cast<int>(st);
      const int from = mesh.rank_of(c);
      if (from != 0)
        sources.push_back(
            {from, t, st,
             nn::chunks_param_layout(s.shape.model, nn::rank_chunks(s.shape.stages, pp, st),
                                     nn::TensorParallel{tp, t})});
    }
  std::vector<float> chunk(kChunk);  // (kChunk) fp32, a received message
  const auto receive_until = [&](Source& src, size_t target) {
    const size_t total = src.layout.total_numel();
    while (src.done < std::min(target, total)) {
      const size_t n = std::min(kChunk, total - src.done);
      world.recv(chunk.data(), n, DType::f32, src.from, tag);
      write(src.layout, src.tp_rank, src.stage, src.done, n, chunk.data());
      src.done += n;
    }
  };
  // Rank 0's own pieces, and after each the others' chunks in the same proportion: every source
  // (and the data-parallel peers its reads wait on) moves at rank 0's pace.
  const size_t own_total = layout.total_numel();
  s.params->for_each_piece([&](size_t begin, size_t count, const float* values) {
    write(layout, 0, 0, begin, count, values);
    const double share = static_cast<double>(begin + count) / static_cast<double>(own_total);
    for (Source& src : sources)
      receive_until(src,
                    static_cast<size_t>(share * static_cast<double>(src.layout.total_numel())));
  });
  for (Source& src : sources) receive_until(src, src.layout.total_numel());
  writer.commit();
  return writer.failure();
}

nlohmann::ordered_json Trainer::checkpoint_identity() const {
  const State& s = *state_;
  nlohmann::ordered_json id;
  id["model"] = s.shape.model.str();
  const nn::GPTConfig& mc = s.shape.model;
  id["model_shape"] = {{"max_seq_len", mc.max_seq_len},
                       {"vocab_size", mc.vocab_size},
                       {"padded_vocab_size", mc.padded_vocab_size},
                       {"num_layers", mc.num_layers},
                       {"num_heads", mc.num_heads},
                       {"channels", mc.channels}};
  if (!mc.is_gpt2()) id["model_arch"] = model_arch_json(mc.arch);  // GPT-2's files unchanged
  // The layout (may change on resume: checkpoint_layout_keys), then what may not.
  const comm::MeshShape mesh = s.groups.mesh ? s.groups.mesh->layout().shape() : comm::MeshShape{};
  id["ranks"] = s.run.world_size;
  id["dp"] = mesh.dp;
  id["sp"] = mesh.sp;
  id["zero_stage"] = s.params->zero_stage();
  id["tp"] = mesh.tp;
  id["pp"] = mesh.pp;
  id["pipeline_virtual_stages"] = config_.pipeline_virtual_stages;
  id["placement"] = describe_placement(config_);
  id["precision"] = dtype_name(working_dtype(config_));
  id["blocks_per_unit"] = config_.blocks_per_unit;
  id["micro_batch"] = config_.micro_batch_size;
  // Sequences per optimizer step: what must stay for the run to go on as it was.
  id["global_batch"] = config_.micro_batch_size * config_.gradient_accumulation_steps * mesh.dp;
  id["seq_len"] = config_.seq_len;
  id["gradient_accumulation_steps"] = config_.gradient_accumulation_steps;
  id["parameters"] = nn::gpt_param_layout(s.shape.model).parameter_count();  // the whole model's
  return id;
}

std::string Trainer::save_training_checkpoint(int64_t steps_done, const LossScaler& scaler) {
  State& s = *state_;
  comm::Communicator* group =
      s.run.session && s.run.world_size > 1 ? &s.run.session->world() : nullptr;
  CheckpointWriter writer(config_.checkpoint.save_dir, steps_done, s.run.rank, group);
  ResumePoint point;
  point.step = steps_done;
  point.scaler = scaler.state();
  point.data = s.data.train->position();
  point.lr_schedule_steps = s.lr_schedule_steps;
  const auto add = [&](const std::string& unit, const std::string& kind, size_t elem_bytes,
                       const std::string& tier, size_t begin, size_t elems, const void* data) {
    nlohmann::ordered_json meta;
    meta["unit"] = unit;
    meta["kind"] = kind;
    meta["dtype"] = block_dtype(config_, elem_bytes);
    meta["tier"] = tier;
    meta["begin"] = begin;  // global range [begin, begin + elems) in the unit
    meta["elems"] = elems;
    writer.add_block(unit + "." + kind, meta, data, elems * elem_bytes);
  };
  s.params->save_blocks(add);
  point.steps_taken = s.params->steps_taken();
  // Where each tensor of this rank sits in the units its blocks hold.
  const nn::ParamLayout& layout = s.chunks.layout();
  const UnitGrouping g = group_units(layout, static_cast<size_t>(config_.blocks_per_unit));
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const nn::ParamTensor& t : layout.tensors()) {
    nlohmann::ordered_json j;
    j["tensor"] = t.name();
    j["unit"] = g.specs[g.store_unit[t.unit]].name;
    j["offset"] = g.offset[t.unit] + layout.offset_in_unit(t);  // elements in the unit
    std::vector<int64_t> shape;
    for (size_t d = 0; d < t.shape.rank(); ++d) shape.push_back(t.shape[d]);
    j["shape"] = shape;
    j["tp_rank"] = layout.tp().rank;
    j["tp_size"] = layout.tp().size;
    tensors.push_back(std::move(j));
  }
  return writer.commit(checkpoint_identity(), point,
                       static_cast<size_t>(config_.checkpoint.keep_last), tensors);
}

int64_t Trainer::resume_training(LossScaler& scaler) {
  State& s = *state_;
  // Every rank opens the same checkpoint and checks it against the same run: a mismatch or a
  // damaged file is met alike and said once (a rank that alone cannot read it ends all).
  std::unique_ptr<CheckpointReader> opened;
  std::string problem;
  try {
    opened = std::make_unique<CheckpointReader>(config_.checkpoint.resume, s.run.rank,
                                                checkpoint_identity(), kCheckpointLayoutKeys);
  } catch (const Error& e) {
    problem = user_message(e);
  }
  throw_if_any_rank_failed(problem, s.run.rank, s.run.world());
  CheckpointReader& reader = *opened;
  s.resumed_lr_schedule_steps = reader.point().lr_schedule_steps;
  std::unique_ptr<CheckpointRanges> ranges;
  if (!reader.same_layout()) {
    ranges = std::make_unique<CheckpointRanges>(reader.directory());
    log::info("resuming '" + reader.directory() +
              "' in another data-parallel layout, stage or placement: its state is resharded");
  }
  // One block, either in order from this rank's file or by range from every rank's: those of
  // this rank's tensor-parallel piece (the tp size stays; the units of every tp rank have the same
  // names).
  const size_t tp_rank = s.chunks.layout().tp().rank;
  const auto read = [&](const std::string& unit, const std::string& kind, size_t elem_bytes,
                        size_t begin, size_t elems, void* data) {
    if (!ranges) return reader.read_block(unit + "." + kind, data, elems * elem_bytes);
    TZ_CHECK(ranges->read(unit, source_kinds(kind), block_dtype(config_, elem_bytes), begin, elems,
                          data, tp_rank),
             "checkpoint '" + reader.directory() + "' holds no " + kind + " state of unit " + unit,
             "resume from a checkpoint of this model written with optimizer states");
  };
  s.params->load_blocks(read, reader.point().steps_taken);
  scaler.restore(reader.point().scaler);
  if (!ranges) {
    reader.finish();
    s.data.train->seek(reader.point().data);
  } else {
    // Another data-parallel world reads other windows: this replica starts dp_rank windows past
    // where the writer's first replica was (the runs differ from here on, as any change of the
    // data-parallel size makes them).
    s.data.train->seek_from_first_rank(ranges->first_rank_data());
  }
  return reader.point().step;
}

}  // namespace tierzero::train
