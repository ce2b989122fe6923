// Module: a top-level piece of the GPT (embedding, transformer block, final norm, tied head) with
// an explicit forward and backward, and ModuleContext, what one call of it runs with. Top-level
// modules are what the model runs in order, one ParamProvider unit each; a pipeline stage will
// run a contiguous range of them. Modules are stateless between calls: everything a forward
// keeps for its backward lives in the MicroBatch, so several micro-batches can be in flight.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tierzero/core/dtype.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/kernels/kernels.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/nn/saved_activations.hpp"
#include "tierzero/nn/sp/ulysses_group.hpp"
#include "tierzero/nn/tensor_meta.hpp"
#include "tierzero/nn/tp/tensor_parallel_group.hpp"

namespace tierzero::nn {

class MicroBatch;
class ModelScratch;

// A block's output left as its last residual add, into = a + b, for the next module to write
// together with its norm (Kernels::fused_residual_layernorm_forward / _rmsnorm_forward): the
// sum is written once and not read back for the norm. a and b stay valid until that module's
// first kernel has run.
struct ResidualSum {
  float* into = nullptr;     // (S, C) where the sum belongs: the next module's `in`
  const float* a = nullptr;  // (S, C)
  const float* b = nullptr;  // (S, C)
};

// One module call: the kernels and stream it issues on, the micro-batch it runs for, the model's
// scratch, the tensor-parallel or Ulysses group, and its unit's parameters (and, in the backward,
// gradients) as the ParamProvider handed them out. Sub-modules of a unit get the same context.
struct ModuleContext {
  kernels::Kernels& k;
  Device& device;
  Stream& stream;
  MicroBatch& mb;
  ModelScratch& scratch;
  TensorParallelGroup* tp = nullptr;  // null on one tensor-parallel rank
  const float* params = nullptr;      // (units[unit].numel) the unit as acquired
  float* grads = nullptr;             // (units[unit].numel) its gradients; backward only
  UlyssesGroup* ulysses = nullptr;    // null on one Ulysses rank
  // Forward only. in_sum: this module's input is in_sum->a + in_sum->b, not yet written to `in`
  // (== in_sum->into), which the module writes first. out_sum: the next module takes a
  // ResidualSum (Module::takes_residual_sum), so this one may fill it instead of writing `out`.
  const ResidualSum* in_sum = nullptr;
  ResidualSum* out_sum = nullptr;
  // 16-bit compute (mb.dims().compute bf16 or fp16): the unit as acquire_params16 handed it out,
  // of that dtype, in place of `params` (then null).
  const void* params16 = nullptr;  // (units[unit].numel) compute
  // Backward, 16-bit compute: the model's scratch.stream_grad16() as the backward hands it on.
  // dout16: it already holds dout rounded (the module before this one in the backward wrote it
  // with its norm's pass); want_din16: the module after this one reads din rounded, so a module
  // whose last kernel writes din may write the copy too, and then sets wrote_din16.
  bool dout16 = false;
  bool want_din16 = false;
  bool wrote_din16 = false;

  // The dtype the products run in (ActivationDims::compute), and whether it is 16-bit: the
  // layers then call the 16-bit kernels on params16 and the compute-dtype activations.
  DType compute() const;
  bool compute16() const { return compute() != DType::f32; }
  void zero(float* p, size_t n) const;  // p (n): what a backward accumulates into starts at 0
  // p (n) of the compute dtype = src (n) rounded (16-bit compute only)
  void round_to_compute(const ComputeTensor& p, const float* src, size_t n) const;
  bool sequence_parallel() const { return tp != nullptr && tp->sequence_parallel(); }

  // Entering a tensor-parallel region (Megatron's f forward, g backward with sequence
  // parallelism): the full (B*T, C) rows of a stream-sized (S, C) tensor, all-gathered into
  // `into` (B*T, C) of its dtype under sequence parallelism, else `local` itself.
  ComputeTensor gather_stream(const ComputeTensor& local, const ComputeTensor& into) const;
  const float* gather_stream(const float* local, float* into) const;
  // Leaving one: `partial` (B*T, C), this rank's partial sums, summed over the group. Under
  // sequence parallelism reduce-scattered into scratch.reduced() (S, C) and returned; else
  // all-reduced in place (one rank: unchanged) and `partial` returned.
  const float* reduce_stream(float* partial) const;
};

// A parameter tensor a (sub-)module uses: its kind and layer, and after bind() where it sits in
// its unit and its local shape.
class ParamRef {
 public:
  ParamRef(ParamKind kind, int layer) : kind_(kind), layer_(layer) {}
  void bind(const ParamLayout& layout);
  const float* in(const float* unit) const { return unit + offset_; }
  float* in(float* unit) const { return unit + offset_; }
  // The tensor in a unit handed out in 16 bits (ModuleContext::params16) of dtype t.
  const void* in16(const void* unit, DType t) const {
    return static_cast<const char*>(unit) + offset_ * dtype_size(t);
  }
  const Shape& shape() const { return shape_; }  // local

 private:
  ParamKind kind_;
  int layer_;
  size_t offset_ = 0;  // elements from the unit's start
  Shape shape_;
};

class Module {
 public:
  // name: "embeddings", "block.3", "final_norm", "head"; unit_name: the layout unit holding its
  // parameters (the head's is "embeddings": it is tied to wte); index: its position among the
  // model's top-level modules, which keys what it saves in a MicroBatch.
  Module(std::string name, std::string unit_name, size_t index);
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }
  const std::string& unit_name() const { return unit_name_; }
  size_t index() const { return index_; }
  size_t unit() const { return unit_; }  // index into layout.units(), set by bind()
  // The transformer block this module is, -1 for the others: what its unit declares.
  virtual int block() const { return -1; }

  // The tensors this module owns, full shapes and tp metadata, in layout order; empty when its
  // parameters belong to another module (the tied head).
  virtual std::vector<TensorMeta> parameters() const = 0;
  // Finds its unit and its tensors in a layout built from parameters().
  virtual void bind(const ParamLayout& layout);
  // False when the backward needs only gradients (the embedding lookup's), so the caller does
  // not gather the parameters for it.
  virtual bool backward_reads_params() const { return true; }
  // Whether its forward accepts its input as a ResidualSum (ModuleContext::in_sum): it begins
  // with a norm of the residual stream, which the add is fused into.
  virtual bool takes_residual_sum() const { return false; }

  // out = f(in) for ctx.mb, keeping in ctx.mb what the backward needs.
  virtual void forward(ModuleContext& ctx, const float* in, float* out) = 0;
  // With activation checkpointing: rebuilds what forward would have kept, from the saved input.
  // Called inside the backward's parameter acquisition, before its gradients are acquired.
  virtual void recompute(ModuleContext&) {}
  // Accumulates (+=) the gradient of the input into din and the parameter gradients into
  // ctx.grads, given dout. din may alias dout: the residual stream's running gradient, where a
  // block adds its branches' contributions in place. din is null for the first module.
  virtual void backward(ModuleContext& ctx, const float* dout, float* din) = 0;

 protected:
  size_t unit_ = 0;

 private:
  std::string name_;
  std::string unit_name_;
  size_t index_;
};

}  // namespace tierzero::nn
