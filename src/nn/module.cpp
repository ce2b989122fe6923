// The pieces every module shares: finding its unit and tensors in a layout, and zeroing what a
// backward accumulates into.
#include "tierzero/nn/module.hpp"

#include <utility>

#include "tierzero/core/error.hpp"
#include "tierzero/nn/micro_batch.hpp"
#include "tierzero/nn/model_scratch.hpp"

namespace tierzero::nn {

DType ModuleContext::compute() const {
  return mb.dims().compute;
}

void ModuleContext::zero(float* p, size_t n) const {
  device.fill_zero(p, n * sizeof(float), stream);
}

void ModuleContext::round_to_compute(const ComputeTensor& p, const float* src, size_t n) const {
  k.convert_from_f32(p.raw(), p.type, src, n);
}

ComputeTensor ModuleContext::gather_stream(const ComputeTensor& local,
                                           const ComputeTensor& into) const {
  if (!sequence_parallel()) return local;
  TZ_CHECK(local.type == into.type, "an all-gather of the stream between two dtypes",
           "internal error: gather into a buffer of the tensor's own dtype");
  const ActivationDims& d = mb.dims();
  tp->all_gather(stream, local.raw(), into.raw(), d.stream_tokens * d.channels, local.type);
  return into;
}

const float* ModuleContext::gather_stream(const float* local, float* into) const {
  const ComputeTensor full = gather_stream(ComputeTensor{const_cast<float*>(local), DType::f32},
                                           ComputeTensor{into, DType::f32});
  return static_cast<const float*>(full.raw());
}

const float* ModuleContext::reduce_stream(float* partial) const {
  if (tp == nullptr) return partial;
  const ActivationDims& d = mb.dims();
  if (!sequence_parallel()) {
    tp->all_reduce(stream, partial, d.tokens * d.channels);
    return partial;
  }
  tp->reduce_scatter(stream, partial, scratch.reduced(), d.stream_tokens * d.channels);
  return scratch.reduced();
}

void ParamRef::bind(const ParamLayout& layout) {
  const ParamTensor& t = layout.get(kind_, layer_);
  offset_ = layout.offset_in_unit(t);
  shape_ = t.shape;
}

Module::Module(std::string name, std::string unit_name, size_t index)
    : name_(std::move(name)), unit_name_(std::move(unit_name)), index_(index) {}

void Module::bind(const ParamLayout& layout) {
  unit_ = layout.unit_index(unit_name_);
}

}  // namespace tierzero::nn
