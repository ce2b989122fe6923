// Tensor-parallel metadata: local shapes, the indices a rank holds, and cutting a rank's piece
// out of a full tensor (initialisation, and later checkpoints).
#include "tierzero/nn/tensor_meta.hpp"

#include <cstring>

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

namespace {

// `s` with dim d replaced by v (Shape has no setter; GPT tensors have rank 1 or 2).
Shape with_dim(const Shape& s, size_t d, int64_t v) {
  auto at = [&](size_t i) { return i == d ? v : s[i]; };
  switch (s.rank()) {
    case 1:
      return Shape{at(0)};
    case 2:
      return Shape{at(0), at(1)};
    case 3:
      return Shape{at(0), at(1), at(2)};
    case 4:
      return Shape{at(0), at(1), at(2), at(3)};
    default:
      TZ_THROW("tensor of rank " + std::to_string(s.rank()) + " cannot be partitioned",
               "internal error: GPT parameters have rank 1 to 4");
  }
}

}  // namespace

const char* param_kind_name(ParamKind k) {
  static const char* names[] = {"wte",      "wpe",      "ln1w", "ln1b", "qkvw",   "qkvb",
                                "attprojw", "attprojb", "ln2w", "ln2b", "fcw",    "fcb",
                                "fcprojw",  "fcprojb",  "lnfw", "lnfb", "lmheadw"};
  return names[static_cast<size_t>(k)];
}

void TensorParallel::validate() const {
  TZ_CHECK(size >= 1 && rank < size,
           "tensor-parallel rank " + std::to_string(rank) + " of " + std::to_string(size) +
               " is not a rank of the group",
           "tp size must be >= 1 and the rank in [0, size)");
}

std::string TensorMeta::name() const {
  if (layer < 0) return param_kind_name(kind);
  return "block." + std::to_string(layer) + "." + param_kind_name(kind);
}

Shape TensorMeta::local_shape(size_t tp_size) const {
  TZ_CHECK(tp_size >= 1, "tensor-parallel size 0", "tp must be >= 1");
  if (replicated() || tp_size == 1) return full_shape;
  const auto d = static_cast<size_t>(partition_dim);
  TZ_CHECK(d < full_shape.rank(),
           "tensor " + name() + " is partitioned along dim " + std::to_string(d) +
               " but has shape " + full_shape.str(),
           "internal error in the module's metadata");
  const auto extent = static_cast<size_t>(full_shape[d]);
  const size_t cut = partition_stride * tp_size * partition_granule;
  if (extent % cut != 0) {
    const std::string extent_text = partition_stride > 1
                                        ? std::to_string(partition_stride) + " fused parts of " +
                                              std::to_string(extent / partition_stride)
                                        : std::to_string(extent);
    const std::string granule =
        partition_granule > 1 ? " in whole groups of " + std::to_string(partition_granule) : "";
    TZ_THROW("tensor " + name() + " " + full_shape.str() + ": dim " + std::to_string(d) + " (" +
                 extent_text + ") does not split over tp=" + std::to_string(tp_size) + granule,
             "choose a tensor-parallel size that divides the model's channels, heads and padded "
             "vocabulary");
  }
  return with_dim(full_shape, d, static_cast<int64_t>(extent / tp_size));
}

std::vector<IndexRange> TensorMeta::local_ranges(const TensorParallel& tp) const {
  tp.validate();
  if (replicated()) {
    const size_t extent = full_shape.rank() > 0 ? static_cast<size_t>(full_shape[0]) : 1;
    return {IndexRange{0, extent}};
  }
  const Shape local = local_shape(tp.size);  // checks divisibility
  const auto d = static_cast<size_t>(partition_dim);
  const auto part = static_cast<size_t>(full_shape[d]) / partition_stride;  // one fused part
  const size_t piece = static_cast<size_t>(local[d]) / partition_stride;    // its share per rank
  std::vector<IndexRange> ranges;
  for (size_t j = 0; j < partition_stride; ++j)
    ranges.push_back(IndexRange{j * part + tp.rank * piece, piece});
  return ranges;
}

namespace {

// Walks tp.rank's piece of a tensor: fn(full_offset, local_offset, elements) per contiguous run.
template <typename Fn>
void for_each_run(const TensorMeta& m, const TensorParallel& tp, Fn fn) {
  if (m.replicated() || tp.size == 1) {
    tp.validate();
    fn(size_t{0}, size_t{0}, m.full_shape.numel());
    return;
  }
  const std::vector<IndexRange> ranges = m.local_ranges(tp);
  const auto d = static_cast<size_t>(m.partition_dim);
  size_t outer = 1, inner = 1;  // elements before / after the partition dim
  for (size_t i = 0; i < d; ++i) outer *= static_cast<size_t>(m.full_shape[i]);
  for (size_t i = d + 1; i < m.full_shape.rank(); ++i)
    inner *= static_cast<size_t>(m.full_shape[i]);
  const auto extent = static_cast<size_t>(m.full_shape[d]);
  const size_t local_extent = extent / tp.size;
  for (size_t o = 0; o < outer; ++o) {
    size_t at = 0;  // along the local dim
    for (const IndexRange& r : ranges) {
      fn((o * extent + r.start) * inner, (o * local_extent + at) * inner, r.length * inner);
      at += r.length;
    }
  }
}

}  // namespace

void TensorMeta::for_each_local_run(const TensorParallel& tp,
                                    const std::function<void(size_t, size_t, size_t)>& fn) const {
  for_each_run(*this, tp, fn);
}

void TensorMeta::copy_local_piece(const TensorParallel& tp, const float* full, float* local) const {
  for_each_run(*this, tp, [&](size_t f, size_t l, size_t n) {
    std::memcpy(local + l, full + f, n * sizeof(float));
  });
}

void TensorMeta::place_local_piece(const TensorParallel& tp, const float* local,
                                   float* full) const {
  for_each_run(*this, tp, [&](size_t f, size_t l, size_t n) {
    std::memcpy(full + f, local + l, n * sizeof(float));
  });
}

}  // namespace tierzero::nn
