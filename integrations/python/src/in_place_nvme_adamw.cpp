// OffloadAdamW's in-place NVMe path (in_place_nvme_adamw.hpp).
#include "in_place_nvme_adamw.hpp"

#include <algorithm>
#include <cstring>

#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::python {
namespace {

constexpr size_t kMomentBytes = 2 * sizeof(float);  // m and v of one element
// A tensor without a gradient is updated from zeros in pieces of this many elements.
constexpr size_t kZeroElems = size_t{1} << 16;

}  // namespace

InPlaceNvmeAdamW::InPlaceNvmeAdamW(const std::vector<size_t>& numels, offload::HostPool& pool,
                                   offload::SwapSpace* shared, const offload::NvmeOptions& nvme,
                                   size_t chunk_elems, size_t buffer_count)
    : numels_(numels) {
  offsets_.reserve(numels.size() + 1);
  offsets_.push_back(0);
  for (size_t n : numels) offsets_.push_back(offsets_.back() + n);
  const size_t total = offsets_.back();
  TZ_CHECK(total > 0, "OffloadAdamW: no elements to update in place", "");
  TZ_CHECK(chunk_elems > 0 && buffer_count >= 2,
           "OffloadAdamW: NVMe chunks of " + std::to_string(chunk_elems) + " elements through " +
               std::to_string(buffer_count) + " buffers",
           "pass nvme_chunk_elems > 0; the pipeline needs at least 2 buffers");
  // Whole 4 KiB blocks per chunk (the staging buffers' and O_DIRECT's unit), and no larger than
  // all the elements need, so that a small model keeps small buffers.
  const auto blocks = [](size_t elems) {
    return (elems * kMomentBytes + offload::kIoAlignment - 1) / offload::kIoAlignment;
  };
  chunk_elems_ =
      std::min(blocks(chunk_elems), blocks(total)) * offload::kIoAlignment / kMomentBytes;
  const size_t buffer_bytes = chunk_elems_ * kMomentBytes;
  // The buffers, the zeros and, for an engine of our own, its bounce buffers (queue depth x
  // block size).
  const size_t need =
      buffer_count * offload::HostPool::round_size(buffer_bytes) +
      offload::HostPool::round_size(kZeroElems * sizeof(float)) +
      (shared != nullptr ? 0 : nvme.queue_depth * offload::HostPool::round_size(nvme.block_size));
  const offload::HostPoolStats stats = pool.stats();
  TZ_CHECK(stats.in_use + need <= stats.budget,
           "OffloadAdamW: the NVMe pipeline's buffers need " + std::to_string(need) +
               " bytes of pinned host memory, the host budget leaves " +
               std::to_string(stats.budget - std::min(stats.budget, stats.in_use)),
           "raise host_budget to at least " + std::to_string(stats.in_use + need) +
               " bytes, or pass a smaller nvme_chunk_elems (now " + std::to_string(chunk_elems) +
               ")");
  swap_ = shared;
  if (swap_ == nullptr) {
    own_engine_ = std::make_unique<offload::NvmeEngine>(nvme, &pool);
    own_swap_ = std::make_unique<offload::SwapSpace>(*own_engine_);
    swap_ = own_swap_.get();
  }
  pipeline_ = std::make_unique<offload::StreamPipeline>(
      swap_->engine(), pool, offload::StreamOptions{buffer_count, buffer_bytes});
  extents_ = pipeline_->allocate(*swap_, total * kMomentBytes, Category::optimizer,
                                 "offload_adamw exp_avg+exp_avg_sq");
  zeros_ = pool.allocate(kZeroElems * sizeof(float), Category::workspace, "offload_adamw zeros");
  std::memset(zeros_.data(), 0, kZeroElems * sizeof(float));
  pipeline_->run(extents_, offload::StreamPipeline::Mode::write,
                 [](std::byte* chunk, size_t bytes, size_t) { std::memset(chunk, 0, bytes); });
}

InPlaceNvmeAdamW::~InPlaceNvmeAdamW() {
  pipeline_.reset();  // its buffers first, while the engine that registered them lives
  for (const auto& e : extents_) swap_->free(e);
}

void InPlaceNvmeAdamW::for_each_piece(
    size_t begin, size_t count, const std::function<void(const Piece&, size_t at)>& fn) const {
  // The first tensor that ends after `begin`; empty tensors are never given (checked above).
  size_t t = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), begin) -
                                 offsets_.begin()) -
             1;
  for (size_t at = begin; at < begin + count; ++t) {
    const size_t end = std::min(begin + count, offsets_[t + 1]);
    fn(Piece{t, at - offsets_[t], end - at}, at - begin);
    at = end;
  }
}

std::vector<InPlaceNvmeAdamW::Piece> InPlaceNvmeAdamW::pieces() const {
  std::vector<Piece> out;
  const size_t total = offsets_.back();
  for (size_t begin = 0; begin < total; begin += chunk_elems_)
    for_each_piece(begin, std::min(chunk_elems_, total - begin),
                   [&](const Piece& piece, size_t) { out.push_back(piece); });
  return out;
}

void InPlaceNvmeAdamW::step(const std::vector<float*>& params,
                            const std::vector<const float*>& grads, const kernels::AdamWParams& p) {
  TZ_CHECK(params.size() == size() && grads.size() == size(),
           "OffloadAdamW: the NVMe path got " + std::to_string(params.size()) + " parameters for " +
               std::to_string(size()) + " tensors",
           "");
  const auto* zeros = static_cast<const float*>(zeros_.data());  // (kZeroElems)
  pipeline_->run(extents_, offload::StreamPipeline::Mode::read_write_back,
                 [&](std::byte* chunk, size_t bytes, size_t offset) {
                   const size_t count = bytes / kMomentBytes;
                   float* m = reinterpret_cast<float*>(chunk);  // (count)
                   float* v = m + count;                        // (count)
                   for_each_piece(offset / kMomentBytes, count, [&](const Piece& piece, size_t at) {
                     float* param = params[piece.tensor] + piece.begin;  // (piece.count)
                     const float* grad = grads[piece.tensor];
                     if (grad != nullptr) {
                       kernels::cpu::adamw_update(param, m + at, v + at, grad + piece.begin,
                                                  piece.count, p);
                       return;
                     }
                     for (size_t k = 0; k < piece.count; k += kZeroElems) {
                       const size_t n = std::min(kZeroElems, piece.count - k);
                       kernels::cpu::adamw_update(param + k, m + at + k, v + at + k, zeros, n, p);
                     }
                   });
                 });
}

void InPlaceNvmeAdamW::save(
    const std::function<void(const Piece&, const float* m, const float* v)>& sink) {
  pipeline_->run(extents_, offload::StreamPipeline::Mode::read,
                 [&](std::byte* chunk, size_t bytes, size_t offset) {
                   const size_t count = bytes / kMomentBytes;
                   const float* m = reinterpret_cast<const float*>(chunk);  // (count)
                   const float* v = m + count;                              // (count)
                   for_each_piece(offset / kMomentBytes, count, [&](const Piece& piece, size_t at) {
                     sink(piece, m + at, v + at);
                   });
                 });
}

void InPlaceNvmeAdamW::load(const std::function<void(const Piece&, float* m, float* v)>& source) {
  pipeline_->run(extents_, offload::StreamPipeline::Mode::write,
                 [&](std::byte* chunk, size_t bytes, size_t offset) {
                   const size_t count = bytes / kMomentBytes;
                   float* m = reinterpret_cast<float*>(chunk);  // (count)
                   float* v = m + count;                        // (count)
                   for_each_piece(offset / kMomentBytes, count, [&](const Piece& piece, size_t at) {
                     source(piece, m + at, v + at);
                   });
                 });
}

}  // namespace tierzero::python
