// PipelineExecutor: a rank's schedule actions with their point-to-point transfers.
#include "tierzero/train/pipeline_executor.hpp"

#include <algorithm>
#include <string>

#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"

namespace tierzero::train {

namespace {

// A transfer of the pipeline on the profile's network link, from its issue (or post) until it
// completed as the communicator saw it.
void record_transfer(const char* name, double issued_s, const comm::CommRequest& done,
                     size_t bytes) {
  const double end = std::max(done.completed_s(), issued_s);
  ActivityLog::global().record(Track::collective, name, issued_s, end, bytes);
}

}  // namespace

struct PipelineExecutor::Slot {
  struct Send {
    comm::CommRequest request;
    double issued_s = 0.0;
    size_t bytes = 0;
  };
  nn::MicroBatch mb;
  size_t micro_batch = SIZE_MAX;  // the one it holds now
  std::vector<Send> pending;      // sends from its buffers
  bool backward_done = true;      // of the micro-batch it holds (or none)
  void wait_sends() {
    for (Send& s : pending) {
      s.request.wait();
      record_transfer("pipeline send", s.issued_s, s.request, s.bytes);
    }
    pending.clear();
  }
  // True when no send reads its buffers any more (finished ones are dropped), without blocking.
  bool sends_done() {
    bool all = true;
    for (Send& s : pending) all = s.request.test() && all;
    if (!all) return false;
    for (const Send& s : pending) record_transfer("pipeline send", s.issued_s, s.request, s.bytes);
    pending.clear();
    return true;
  }
};

namespace {

// The shape of a rank holding `chunks` (virtual stages in chunk order): stages = virtual stages
// / chunks, the rank's place from chunk 0 (virtual stage = rank).
nn::PipelineShape shape_of(const std::vector<nn::PipelineStage>& chunks,
                           nn::PipelineSchedule schedule, size_t micro_batches) {
  TZ_CHECK(!chunks.empty() && chunks[0].stages % chunks.size() == 0,
           "a pipeline rank's chunks do not divide the virtual stages",
           "internal error: build chunk c of rank s as virtual stage c * stages + s");
  nn::PipelineShape s;
  s.chunks = chunks.size();
  s.stages = chunks[0].stages / s.chunks;
  s.stage = chunks[0].stage;
  s.micro_batches = micro_batches;
  s.schedule = schedule;
  nn::validate(s);
  for (size_t c = 0; c < chunks.size(); ++c)
    TZ_CHECK(chunks[c].stage == s.virtual_stage(c),
             "chunk " + std::to_string(c) + " runs " + chunks[c].str() + ", not virtual stage " +
                 std::to_string(s.virtual_stage(c)),
             "internal error: build chunk c of rank s as virtual stage c * stages + s");
  return s;
}

std::vector<nn::PipelineStage> stages_of(const std::vector<nn::GPT*>& chunks) {
  std::vector<nn::PipelineStage> st;
  for (const nn::GPT* g : chunks) st.push_back(g->stage());
  return st;
}

}  // namespace

PipelineExecutor::PipelineExecutor(std::vector<nn::GPT*> chunks, std::vector<size_t> chunk_units,
                                   comm::Communicator* pipeline, nn::PipelineSchedule schedule,
                                   size_t micro_batches, size_t B, size_t T)
    : chunks_(std::move(chunks)),
      chunk_units_(std::move(chunk_units)),
      pipeline_(pipeline),
      shape_(shape_of(stages_of(chunks_), schedule, micro_batches)),
      B_(B),
      T_(T) {
  if (chunk_units_.empty()) chunk_units_.assign(1, 0);
  TZ_CHECK(chunk_units_.size() == chunks_.size(), "one first unit per chunk is needed",
           "internal error: pass nn::chunk_unit_offsets");
  TZ_CHECK(shape_.stages == 1 ||
               (pipeline_ != nullptr && static_cast<size_t>(pipeline_->size()) == shape_.stages &&
                static_cast<size_t>(pipeline_->rank()) == shape_.stage),
           "the pipeline group does not match " + chunks_[0]->stage().str(),
           "internal error: the group's ranks are the stages in order");
  const nn::ActivationDims d = chunks_[0]->dims(B, T);
  stream_elems_ = d.stream_tokens * d.channels;
  const std::vector<size_t> n = in_flight_per_chunk(shape_);
  slots_.resize(chunks_.size());
  for (size_t c = 0; c < chunks_.size(); ++c)
    for (size_t i = 0; i < n[c]; ++i)
      slots_[c].push_back(
          std::make_unique<Slot>(Slot{chunks_[c]->make_micro_batch(B, T), SIZE_MAX, {}}));
}

PipelineExecutor::~PipelineExecutor() {
  for (auto& chunk : slots_)
    for (auto& s : chunk) s->pending.clear();  // a CommRequest waits (quietly) when destroyed
}

bool PipelineExecutor::holds_loss() const {
  return shape_.virtual_stage(shape_.chunks - 1) + 1 == shape_.virtual_stages();
}

std::vector<size_t> PipelineExecutor::in_flight_per_chunk(const nn::PipelineShape& shape) {
  std::vector<size_t> now(shape.chunks, 0), most(shape.chunks, 0);
  for (const nn::PipelineAction& a : nn::pipeline_actions(shape)) {
    if (a.kind == nn::PipelineAction::Kind::forward) {
      most[a.chunk] = std::max(most[a.chunk], ++now[a.chunk]);
    } else {
      --now[a.chunk];
    }
  }
  return most;
}

size_t PipelineExecutor::activation_bytes_for(const nn::GPTConfig& config,
                                              const nn::ActivationDims& dims,
                                              const std::vector<nn::PipelineStage>& chunks,
                                              nn::PipelineSchedule schedule, size_t micro_batches,
                                              nn::Recompute checkpointing,
                                              bool external_checkpoints) {
  const std::vector<size_t> n = in_flight_per_chunk(shape_of(chunks, schedule, micro_batches));
  // One scratch: the chunks share it (their actions never overlap).
  size_t bytes = nn::ModelScratch::bytes_for(dims, checkpointing);
  for (size_t c = 0; c < chunks.size(); ++c)
    bytes += n[c] * nn::GPT::micro_batch_bytes_for(config, dims, chunks[c], checkpointing,
                                                   external_checkpoints);
  return bytes;
}

size_t PipelineExecutor::stored_checkpoints(const std::vector<nn::PipelineStage>& chunks,
                                            nn::PipelineSchedule schedule, size_t micro_batches) {
  // The schedule's actions in order: a forward ends its micro-batch's checkpoints (each block's
  // input) and its backward frees them, so the most stored at once is the most over the
  // forwards' ends of the chunks' micro-batches in flight times their blocks. (The chunks' own
  // peaks need not coincide: summing them would overcount under the interleaved schedule.)
  const nn::PipelineShape shape = shape_of(chunks, schedule, micro_batches);
  size_t stored = 0, most = 0;
  for (const nn::PipelineAction& a : nn::pipeline_actions(shape)) {
    const size_t blocks = chunks[a.chunk].num_blocks;
    if (a.kind == nn::PipelineAction::Kind::forward) {
      stored += blocks;
      most = std::max(most, stored);
    } else {
      stored -= blocks;
    }
  }
  return most;
}

PipelineExecutor::Slot& PipelineExecutor::slot_of(size_t chunk, size_t micro_batch) {
  // A chunk's forwards and backwards both run in micro-batch order, so the micro-batches it holds
  // at once are consecutive: micro_batch mod its slots never collide.
  return *slots_[chunk][micro_batch % slots_[chunk].size()];
}

int PipelineExecutor::tag(size_t micro_batch, size_t to_virtual_stage, bool gradient) const {
  // MPI guarantees tags up to 32767; micro-batches far enough apart to share a tag are never in
  // flight together.
  const size_t V = shape_.virtual_stages();
  const size_t wrap = std::max<size_t>(1, 16383 / V);
  return static_cast<int>(((micro_batch % wrap) * V + to_virtual_stage) * 2 + (gradient ? 1 : 0));
}

void PipelineExecutor::receive(float* buffer, int peer, int tag, bool gradient,
                               comm::CommRequest* posted, double posted_at) {
  const double t0 = monotonic_seconds();
  const size_t bytes = stream_elems_ * sizeof(float);
  ++timing_.receives;
  if (posted != nullptr && posted->pending()) {
    posted->wait();  // posted ahead into this buffer
    ++timing_.posted_ahead;
    record_transfer("pipeline receive", posted_at, *posted, bytes);
  } else {
    pipeline_->recv(buffer, stream_elems_, DType::f32, peer, tag);
    ActivityLog::global().record(Track::collective, "pipeline receive", t0, monotonic_seconds(),
                                 bytes);
  }
  const double t1 = monotonic_seconds();
  timing_.wait_s += t1 - t0;
  ActivityLog::global().record(Track::stall,
                               gradient ? "wait pipeline gradient" : "wait pipeline activation", t0,
                               t1, stream_elems_ * sizeof(float));
}

void PipelineExecutor::send(Slot& slot, const float* buffer, int peer, int tag) {
  // The model's work that produced the buffer is finished: the CPU kernels return done, and on
  // CUDA the stream is synchronized first (the send reads the buffer on the group's stream).
  chunks_[0]->sync();
  const double issued = monotonic_seconds();
  slot.pending.push_back({pipeline_->send_async(buffer, stream_elems_, DType::f32, peer, tag),
                          issued, stream_elems_ * sizeof(float)});
}

std::vector<std::unique_ptr<nn::ParamProvider>> PipelineExecutor::views(
    nn::ParamProvider& params) const {
  std::vector<std::unique_ptr<nn::ParamProvider>> v;
  for (size_t first : chunk_units_)
    v.push_back(std::make_unique<nn::UnitOffsetProvider>(params, first));
  return v;
}

double PipelineExecutor::train(nn::ParamProvider& params,
                               const std::vector<std::vector<int32_t>>& tokens,
                               const std::vector<std::vector<int32_t>>& targets, float grad_scale) {
  TZ_CHECK(tokens.size() == shape_.micro_batches && targets.size() == shape_.micro_batches,
           "pipeline step got " + std::to_string(tokens.size()) + " micro-batches, expected " +
               std::to_string(shape_.micro_batches),
           "internal error");
  const size_t p = shape_.stages, V = shape_.virtual_stages();
  const int prev = static_cast<int>((shape_.stage + p - 1) % p);
  const int next = static_cast<int>((shape_.stage + 1) % p);
  const std::vector<std::unique_ptr<nn::ParamProvider>> view = views(params);
  timing_ = {};
  const double step_start = monotonic_seconds();
  // The compute of an action: from after its receive to before its send (the model's work
  // synchronized, so on CUDA the kernels are inside).
  double compute_start = 0.0;
  const auto begin_compute = [&](const nn::PipelineAction& a) {
    if (observer_) observer_(a);
    compute_start = monotonic_seconds();
  };
  const auto end_compute = [&](const char* name) {
    chunks_[0]->sync();
    const double t = monotonic_seconds();
    timing_.compute_s += t - compute_start;
    ActivityLog::global().record(Track::compute, name, compute_start, t);
  };
  const std::vector<nn::PipelineAction> actions = nn::pipeline_actions(shape_);
  // Receives posted ahead (MPI only): before an action computes, the receive of the next action
  // that needs one is posted when its buffer is free, so the transfer can land during the
  // compute. NCCL orders a group's transfers on its stream, so there every receive stays at its
  // action (a receive posted early could queue ahead of a send its peer waits for).
  const bool post_ahead =
      receive_ahead_ && pipeline_ != nullptr && std::string(pipeline_->backend()) == "mpi";
  std::vector<comm::CommRequest> posted(actions.size());
  std::vector<double> posted_at(actions.size(), 0.0);  // monotonic_seconds() of each post
  const auto needs_receive = [&](const nn::PipelineAction& a) {
    const size_t k = shape_.virtual_stage(a.chunk);
    return a.kind == nn::PipelineAction::Kind::forward ? k > 0 : k + 1 < V;
  };
  const auto try_post = [&](size_t j) {
    const nn::PipelineAction& a = actions[j];
    if (posted[j].pending() || !needs_receive(a)) return;
    Slot& slot = slot_of(a.chunk, a.micro_batch);
    const size_t k = shape_.virtual_stage(a.chunk);
    posted_at[j] = monotonic_seconds();
    if (a.kind == nn::PipelineAction::Kind::forward) {
      // Its input buffer is free once the slot's previous micro-batch is through its backward
      // (with the checkpoints in a store it is a store's slot, taken here when one can be).
      nn::GPT& model = *chunks_[a.chunk];
      if (!slot.backward_done || !slot.sends_done() || !model.can_take_input_buffer_ahead()) return;
      posted[j] = pipeline_->recv_async(model.input_buffer(slot.mb), stream_elems_, DType::f32,
                                        prev, tag(a.micro_batch, k, false));
    } else {
      // The gradient buffer is free once the slot holds this micro-batch (forward done) and no
      // send reads it.
      if (slot.micro_batch != a.micro_batch || !slot.sends_done()) return;
      posted[j] = pipeline_->recv_async(slot.mb.dresidual(), stream_elems_, DType::f32, next,
                                        tag(a.micro_batch, k, true));
    }
  };
  double loss = 0.0;
  for (size_t i = 0; i < actions.size(); ++i) {
    const nn::PipelineAction& a = actions[i];
    const size_t k = shape_.virtual_stage(a.chunk);
    const bool first = k == 0, last = k + 1 == V;
    nn::GPT& model = *chunks_[a.chunk];
    nn::ParamProvider& chunk_params = *view[a.chunk];
    Slot& slot = slot_of(a.chunk, a.micro_batch);
    nn::MicroBatch& mb = slot.mb;
    if (a.kind == nn::PipelineAction::Kind::forward) {
      // Its buffers are about to be overwritten (a receive posted ahead found no send pending).
      slot.wait_sends();
      if (!first)
        receive(model.input_buffer(mb), prev, tag(a.micro_batch, k, false), false, &posted[i],
                posted_at[i]);
      slot.micro_batch = a.micro_batch;
      slot.backward_done = false;
    } else {
      TZ_CHECK(slot.micro_batch == a.micro_batch,
               "pipeline micro-batch " + std::to_string(a.micro_batch) +
                   "'s activations were overwritten before its backward",
               "internal error: the schedule keeps more micro-batches in flight than its bound");
      if (!last) {
        if (!posted[i].pending()) slot.wait_sends();  // the output went out first
        receive(mb.dresidual(), next, tag(a.micro_batch, k, true), true, &posted[i], posted_at[i]);
      }
    }
    // The next receive goes out before this action computes.
    if (post_ahead)
      for (size_t j = i + 1; j < actions.size(); ++j)
        if (needs_receive(actions[j])) {
          try_post(j);
          break;
        }
    begin_compute(a);
    if (a.kind == nn::PipelineAction::Kind::forward) {
      model.forward(mb, chunk_params, tokens[a.micro_batch].data(), targets[a.micro_batch].data());
      end_compute("pipeline forward");
      if (!last) send(slot, mb.stage_output(), next, tag(a.micro_batch, k + 1, false));
    } else {
      model.backward(mb, chunk_params, grad_scale);
      if (last) loss += static_cast<double>(model.loss(mb));
      end_compute("pipeline backward");
      slot.backward_done = true;
      if (!first) send(slot, mb.dresidual(), prev, tag(a.micro_batch, k - 1, true));
    }
  }
  for (auto& chunk : slots_)
    for (auto& s : chunk) s->wait_sends();
  timing_.step_s = monotonic_seconds() - step_start;
  return holds_loss() ? loss / static_cast<double>(shape_.micro_batches) : 0.0;
}

double PipelineExecutor::evaluate(nn::ParamProvider& params, const int32_t* tokens,
                                  const int32_t* targets) {
  const size_t p = shape_.stages, V = shape_.virtual_stages();
  const int prev = static_cast<int>((shape_.stage + p - 1) % p);
  const int next = static_cast<int>((shape_.stage + 1) % p);
  const std::vector<std::unique_ptr<nn::ParamProvider>> view = views(params);
  double loss = 0.0;
  // The chunks in virtual-stage order: chunk c's input comes from the previous rank's chunk c
  // (or chunk c - 1 of the last rank), so every rank goes through its chunks in order.
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const size_t k = shape_.virtual_stage(c);
    Slot& slot = *slots_[c][0];
    slot.wait_sends();
    slot.micro_batch = SIZE_MAX;
    nn::MicroBatch& mb = slot.mb;
    if (k > 0) receive(chunks_[c]->input_buffer(mb), prev, tag(0, k, false), false);
    chunks_[c]->forward(mb, *view[c], tokens, targets, false);
    if (k + 1 < V) {
      send(slot, mb.stage_output(), next, tag(0, k + 1, false));
    } else if (targets) {
      loss = static_cast<double>(chunks_[c]->loss(mb));
    }
  }
  for (auto& chunk : slots_) chunk[0]->wait_sends();
  return loss;
}

}  // namespace tierzero::train
