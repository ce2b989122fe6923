// Timing attention and GELU at a GPT's per-rank shapes for the planner (see plan_kernel_times.hpp).
#include "plan_kernel_times.hpp"

#include <algorithm>
#include <vector>

#include "tierzero/device/device_allocator.hpp"
#include "tierzero/kernels/cpu_ops.hpp"
#include "tierzero/kernels/kernels.hpp"
#include "tierzero/profile/calibration.hpp"

namespace tierzero::cli {

namespace {

// Where a product carries the MLP's GELU in 16-bit compute: the fc's forward writes gelu(pre)
// in its epilogue, the projection's backward multiplies by gelu'(pre) in its own.
enum class GeluFold { none, forward, backward };

struct Operands {
  DeviceBuffer inp, w, out, dinp, dw, pre;  // pre: the GELU's input where one is folded
};

// One product, forward and backward, as the blocks' linears run it in `compute`: fp32 (its GELU
// timed apart), or 16-bit operands with the forward's output and the input gradient in 16 bits,
// the GELU folded in where the MLP folds it.
void linear_step(kernels::Kernels& k, DType compute, GeluFold fold, Operands& o, size_t N,
                 size_t ic, size_t oc) {
  if (compute == DType::f32) {
    k.matmul_forward(o.out.f32(), o.inp.f32(), o.w.f32(), nullptr, N, ic, oc);
    k.matmul_backward(o.dinp.f32(), o.dw.f32(), nullptr, o.out.f32(), o.inp.f32(), o.w.f32(), N, ic,
                      oc, kernels::GradWrite::overwrite);  // as the blocks' linears write it
    return;
  }
  if (fold == GeluFold::forward)
    k.matmul16_gelu_forward(o.out.data(), o.pre.data(), o.inp.data(), o.w.data(), nullptr, compute,
                            N, ic, oc);
  else
    k.matmul16_forward(o.out.data(), compute, o.inp.data(), o.w.data(), nullptr, compute, N, ic,
                       oc);
  if (fold == GeluFold::backward)
    k.matmul16_backward_gelu(o.dinp.data(), o.dw.f32(), nullptr, o.out.data(), o.inp.data(),
                             o.pre.data(), o.w.data(), compute, N, ic, oc);
  else
    k.matmul16_backward(o.dinp.data(), compute, o.dw.f32(), nullptr, o.out.data(), o.inp.data(),
                        o.w.data(), compute, N, ic, oc, kernels::GradWrite::overwrite);
}

// One block's products on a rank, forward and backward, for one sequence: tensor parallelism
// splits each product's output (column-parallel) or input (row-parallel) features, sequence
// parallelism the tokens. Returns FLOP/s: 2 N IC OC per forward product, twice that backward.
// `buffer(elems, type, label)` makes a filled device buffer of `elems` values of `type`.
template <class MakeBuffer>
double block_gemm_rate(Device& device, const nn::GPTConfig& model, size_t seq,
                       const profile::WorldLayout& world, DType compute, int threads,
                       MakeBuffer& buffer) {
  const size_t C = model.channels;
  const auto tp = static_cast<size_t>(std::max(1, world.tp));
  const size_t N = std::max<size_t>(1, seq / static_cast<size_t>(std::max(1, world.sp)));
  struct Product {
    size_t ic, oc;
    GeluFold fold;
  };
  const Product products[] = {{C, 3 * C / tp, GeluFold::none},
                              {C / tp, C, GeluFold::none},
                              {C, 4 * C / tp, GeluFold::forward},
                              {4 * C / tp, C, GeluFold::backward}};
  Stream& s = device.default_stream();
  kernels::Kernels& k = device.kernels();
  double seconds = 0.0, flops = 0.0;
  for (const Product& p : products) {
    const size_t ic = std::max<size_t>(p.ic, 1), oc = std::max<size_t>(p.oc, 1);
    const bool folds = compute != DType::f32 && p.fold != GeluFold::none;
    const size_t pre = !folds ? 1 : p.fold == GeluFold::forward ? N * oc : N * ic;
    Operands o{buffer(N * ic, compute, "plan gemm inp"),      // (N, IC) compute
               buffer(oc * ic, compute, "plan gemm weight"),  // (OC, IC) compute
               buffer(N * oc, compute, "plan gemm out"),      // (N, OC) compute
               buffer(N * ic, compute, "plan gemm dinp"),     // (N, IC) compute
               buffer(oc * ic, DType::f32, "plan gemm dw"),   // (OC, IC) fp32
               buffer(pre, compute, "plan gemm pre")};        // (N, OC) fc, (N, IC) proj; else (1)
    seconds += profile::compute_seconds(3, threads, [&] {
      linear_step(k, compute, p.fold, o, N, ic, oc);
      s.synchronize();
    });
    flops += 6.0 * static_cast<double>(N) * static_cast<double>(ic) * static_cast<double>(oc);
  }
  return seconds > 0.0 ? flops / seconds : 0.0;
}

}  // namespace

LayerKernelTimes measure_layer_kernels(Device& device, const nn::GPTConfig& model, size_t seq,
                                       const profile::WorldLayout& world, DType compute) {
  LayerKernelTimes t;
  const auto split = static_cast<size_t>(std::max(1, world.tp * world.sp));
  const size_t head_size = model.channels / model.num_heads;
  const size_t heads = std::max<size_t>(1, model.num_heads / split);
  const size_t C = heads * head_size;  // the rank's attention channels
  const size_t T = seq;
  const size_t gelu_elems =
      std::max<size_t>(1, (seq / static_cast<size_t>(std::max(1, world.sp))) * 4 * model.channels /
                              static_cast<size_t>(std::max(1, world.tp)));
  const auto pp = static_cast<size_t>(std::max(1, world.pp));
  t.layers = (model.num_layers + pp - 1) / pp;

  DeviceAllocator alloc(device, 0);
  Stream& s = device.default_stream();
  kernels::Kernels& k = device.kernels();
  const int threads = device.kind() == DeviceKind::cpu ? std::max(kernels::cpu::threads(), 1) : 0;
  // `elems` values of `type`, each 0.01 (small values: no overflow in exp or tanh).
  auto buffer = [&](size_t elems, DType type, const char* label) {
    DeviceBuffer b = alloc.allocate(elems * dtype_size(type), Category::workspace, label);
    std::vector<float> value(elems, 0.01f);            // (elems) fp32
    std::vector<char> host(elems * dtype_size(type));  // (elems) type
    convert_from_f32(host.data(), type, value.data(), elems);
    device.copy(b.data(), host.data(), host.size(), CopyKind::host_to_device, s);
    return b;
  };
  {
    const kernels::AttentionShape shape = kernels::AttentionShape::mha(1, T, C, heads);
    DeviceBuffer qkv = buffer(T * 3 * C, compute, "plan qkv");          // (1, T, 3C) compute
    DeviceBuffer out = buffer(T * C, compute, "plan attention out");    // (1, T, C) compute
    DeviceBuffer dout = buffer(T * C, compute, "plan attention dout");  // (1, T, C) compute
    // (the kernel's saved state and scratch, fp32; at least one float each, so they exist)
    DeviceBuffer saved =
        buffer(std::max<size_t>(k.attention_saved_floats(shape), 1), DType::f32, "plan lse");
    DeviceBuffer scratch = buffer(std::max<size_t>(k.attention_scratch_floats(shape), 1),
                                  DType::f32, "plan attention scratch");
    DeviceBuffer dqkv = buffer(T * 3 * C, compute, "plan dqkv");  // (1, T, 3C) compute
    const bool f32 = compute == DType::f32;
    t.attention_forward_s = profile::compute_seconds(3, threads, [&] {
      if (f32)
        k.attention_forward(out.f32(), saved.f32(), qkv.f32(), shape);
      else
        k.attention16_forward(out.data(), saved.f32(), qkv.data(), compute, shape);
      s.synchronize();
    });
    t.attention_backward_s = profile::compute_seconds(3, threads, [&] {
      if (f32)
        k.attention_backward(dqkv.f32(), scratch.f32(), dout.f32(), out.f32(), qkv.f32(),
                             saved.f32(), shape);
      else
        k.attention16_backward(dqkv.data(), scratch.f32(), dout.data(), out.data(), qkv.data(),
                               saved.f32(), compute, shape);
      s.synchronize();
    });
  }
  // In 16-bit compute the GELU runs in the MLP's products (timed with them, block_gemm_rate).
  if (compute == DType::f32) {
    DeviceBuffer inp = buffer(gelu_elems, DType::f32, "plan gelu in");     // (gelu_elems)
    DeviceBuffer out = buffer(gelu_elems, DType::f32, "plan gelu out");    // (gelu_elems)
    DeviceBuffer dinp = buffer(gelu_elems, DType::f32, "plan gelu dinp");  // (gelu_elems)
    t.gelu_forward_s = profile::compute_seconds(3, threads, [&] {
      k.gelu_forward(out.f32(), inp.f32(), gelu_elems);
      s.synchronize();
    });
    t.gelu_backward_s = profile::compute_seconds(3, threads, [&] {
      k.gelu_backward(dinp.f32(), inp.f32(), out.f32(), gelu_elems);
      s.synchronize();
    });
  }
  t.block_gemm_flops_per_s = block_gemm_rate(device, model, seq, world, compute, threads, buffer);
  return t;
}

double other_kernel_seconds(const LayerKernelTimes& t, size_t micro_batch,
                            profile::RecomputeMode recompute) {
  const bool full = recompute == profile::RecomputeMode::full;
  const double attention_runs = recompute == profile::RecomputeMode::none ? 1.0 : 2.0;
  const double forward =
      attention_runs * t.attention_forward_s + (full ? 2.0 : 1.0) * t.gelu_forward_s;
  const double backward = t.attention_backward_s + t.gelu_backward_s;
  return static_cast<double>(t.layers * micro_batch) * (forward + backward);
}

}  // namespace tierzero::cli
