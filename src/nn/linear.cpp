// Linear: its tensor metadata per split, and the matmul kernels on its local shapes.
#include "linear.hpp"

#include "tierzero/core/error.hpp"
#include "tierzero/nn/micro_batch.hpp"

namespace tierzero::nn {

Linear::Linear(ParamKind weight, ParamKind bias, int layer, size_t in_features, size_t out_features,
               LinearSplit split, size_t stride, size_t granule, bool has_bias)
    : weight_kind_(weight),
      bias_kind_(bias),
      layer_(layer),
      full_in_(in_features),
      full_out_(out_features),
      in_(in_features),
      out_(out_features),
      split_(split),
      stride_(stride),
      granule_(granule),
      has_bias_(has_bias),
      weight_(weight, layer),
      bias_(bias, layer) {}

std::vector<TensorMeta> Linear::parameters() const {
  const auto in = static_cast<int64_t>(full_in_), out = static_cast<int64_t>(full_out_);
  TensorMeta w{weight_kind_, layer_, {out, in}, true};
  TensorMeta b{bias_kind_, layer_, {out}, false};
  if (split_ == LinearSplit::column) {  // output features: W's rows and b
    w.partition_dim = b.partition_dim = 0;
    w.partition_stride = b.partition_stride = stride_;
    w.partition_granule = b.partition_granule = granule_;
  } else if (split_ == LinearSplit::row) {  // input features: W's columns; b added after the sum
    w.partition_dim = 1;
    w.partition_stride = stride_;
    w.partition_granule = granule_;
  }
  if (!has_bias_) return {w};
  return {w, b};
}

void Linear::bind(const ParamLayout& layout) {
  weight_.bind(layout);
  if (has_bias_) bias_.bind(layout);
  out_ = static_cast<size_t>(weight_.shape()[0]);
  in_ = static_cast<size_t>(weight_.shape()[1]);
  // A row-parallel output is summed over the group: one rank adds the (replicated) bias.
  bias_in_forward_ = has_bias_ && (split_ != LinearSplit::row || layout.tp().rank == 0);
}

// Each of the four runs the product in the run's compute (ctx.compute16(): the 16-bit kernels on
// the working copy ctx.params16, else the fp32 ones on ctx.params).
void Linear::forward(const ModuleContext& ctx, const ComputeTensor& in,
                     const ComputeTensor& out) const {
  const size_t N = ctx.mb.dims().tokens;
  if (ctx.compute16()) {
    ctx.k.matmul16_forward(out.raw(), out.type, in.raw(), weight16(ctx), bias16(ctx), ctx.compute(),
                           N, in_, out_);
    return;
  }
  ctx.k.matmul_forward(out.f32(), in.f32(), weight_.in(ctx.params),
                       bias_in_forward_ ? bias_.in(ctx.params) : nullptr, N, in_, out_);
}

void Linear::backward(const ModuleContext& ctx, const ComputeTensor& in, const ComputeTensor& dout,
                      const ComputeTensor& din) const {
  // Every rank has the whole dout of a row-parallel output, so each computes the bias's
  // gradient, and the replicas stay equal.
  const size_t N = ctx.mb.dims().tokens;
  float* db = has_bias_ ? bias_.in(ctx.grads) : nullptr;
  if (ctx.compute16()) {
    ctx.k.matmul16_backward(din.raw(), din.type, weight_.in(ctx.grads), db, dout.raw(), in.raw(),
                            weight16(ctx), ctx.compute(), N, in_, out_,
                            kernels::GradWrite::overwrite);
    return;
  }
  ctx.k.matmul_backward(din.f32(), weight_.in(ctx.grads), db, dout.f32(), in.f32(),
                        weight_.in(ctx.params), N, in_, out_, kernels::GradWrite::overwrite);
}

void Linear::forward_gelu(const ModuleContext& ctx, const ComputeTensor& in,
                          const ComputeTensor& pre, const ComputeTensor& act) const {
  TZ_CHECK(split_ != LinearSplit::row, "a row-parallel linear's output is a partial sum",
           "internal error: apply GELU after the tensor-parallel sum");
  const size_t N = ctx.mb.dims().tokens;
  if (ctx.compute16()) {
    ctx.k.matmul16_gelu_forward(act.raw(), pre.raw(), in.raw(), weight16(ctx), bias16(ctx),
                                ctx.compute(), N, in_, out_);
    return;
  }
  ctx.k.matmul_gelu_forward(act.f32(), pre.f32(), in.f32(), weight_.in(ctx.params),
                            bias_in_forward_ ? bias_.in(ctx.params) : nullptr, N, in_, out_);
}

void Linear::backward_gelu(const ModuleContext& ctx, const ComputeTensor& in,
                           const ComputeTensor& pre, const ComputeTensor& dout,
                           const ComputeTensor& dpre) const {
  const size_t N = ctx.mb.dims().tokens;
  float* db = has_bias_ ? bias_.in(ctx.grads) : nullptr;
  if (ctx.compute16()) {
    ctx.k.matmul16_backward_gelu(dpre.raw(), weight_.in(ctx.grads), db, dout.raw(), in.raw(),
                                 pre.raw(), weight16(ctx), ctx.compute(), N, in_, out_);
    return;
  }
  ctx.k.matmul_backward_gelu(dpre.f32(), weight_.in(ctx.grads), db, dout.f32(), in.f32(), pre.f32(),
                             weight_.in(ctx.params), N, in_, out_);
}

const void* Linear::weight16(const ModuleContext& ctx) const {
  return weight_.in16(ctx.params16, ctx.compute());
}

const void* Linear::bias16(const ModuleContext& ctx) const {
  return bias_in_forward_ ? bias_.in16(ctx.params16, ctx.compute()) : nullptr;
}

}  // namespace tierzero::nn
