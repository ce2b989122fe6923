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

// One block's products on a rank, forward and backward, for one sequence: tensor parallelism
// splits each product's output (column-parallel) or input (row-parallel) features, sequence
// parallelism the tokens. Returns FLOP/s: 2 N IC OC per forward product, twice that backward.
template <class MakeBuffer>
double block_gemm_rate(Device& device, const nn::GPTConfig& model, size_t seq,
                       const profile::WorldLayout& world, int threads, MakeBuffer& buffer) {
  const size_t C = model.channels;
  const auto tp = static_cast<size_t>(std::max(1, world.tp));
  const size_t N = std::max<size_t>(1, seq / static_cast<size_t>(std::max(1, world.sp)));
  struct Product {
    size_t ic, oc;
  };
  const Product products[] = {{C, 3 * C / tp}, {C / tp, C}, {C, 4 * C / tp}, {4 * C / tp, C}};
  Stream& s = device.default_stream();
  kernels::Kernels& k = device.kernels();
  double seconds = 0.0, flops = 0.0;
  for (const Product& p : products) {
    const size_t ic = std::max<size_t>(p.ic, 1), oc = std::max<size_t>(p.oc, 1);
    DeviceBuffer inp = buffer(N * ic, "plan gemm inp");    // (N, IC)
    DeviceBuffer w = buffer(oc * ic, "plan gemm weight");  // (OC, IC)
    DeviceBuffer out = buffer(N * oc, "plan gemm out");    // (N, OC)
    DeviceBuffer dinp = buffer(N * ic, "plan gemm dinp");  // (N, IC)
    DeviceBuffer dw = buffer(oc * ic, "plan gemm dw");     // (OC, IC)
    seconds += profile::compute_seconds(3, threads, [&] {
      k.matmul_forward(out.f32(), inp.f32(), w.f32(), nullptr, N, ic, oc);
      k.matmul_backward(dinp.f32(), dw.f32(), nullptr, out.f32(), inp.f32(), w.f32(), N, ic, oc,
                        kernels::GradWrite::overwrite);  // as the blocks' linears write theirs
      s.synchronize();
    });
    flops += 6.0 * static_cast<double>(N) * static_cast<double>(ic) * static_cast<double>(oc);
  }
  return seconds > 0.0 ? flops / seconds : 0.0;
}

}  // namespace

LayerKernelTimes measure_layer_kernels(Device& device, const nn::GPTConfig& model, size_t seq,
                                       const profile::WorldLayout& world) {
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
  auto buffer = [&](size_t elems, const char* label) {
    DeviceBuffer b = alloc.allocate(elems * sizeof(float), Category::workspace, label);
    std::vector<float> host(elems, 0.01f);  // (elems) small values: no overflow in exp or tanh
    device.copy(b.data(), host.data(), elems * sizeof(float), CopyKind::host_to_device, s);
    return b;
  };
  {
    const kernels::AttentionShape shape = kernels::AttentionShape::mha(1, T, C, heads);
    DeviceBuffer qkv = buffer(T * 3 * C, "plan qkv");          // (1, T, 3C)
    DeviceBuffer out = buffer(T * C, "plan attention out");    // (1, T, C)
    DeviceBuffer dout = buffer(T * C, "plan attention dout");  // (1, T, C)
    // (the kernel's saved state and scratch; at least one float each, so the buffers exist)
    DeviceBuffer saved = buffer(std::max<size_t>(k.attention_saved_floats(shape), 1), "plan lse");
    DeviceBuffer scratch =
        buffer(std::max<size_t>(k.attention_scratch_floats(shape), 1), "plan attention scratch");
    DeviceBuffer dqkv = buffer(T * 3 * C, "plan dqkv");  // (1, T, 3C)
    t.attention_forward_s = profile::compute_seconds(3, threads, [&] {
      k.attention_forward(out.f32(), saved.f32(), qkv.f32(), shape);
      s.synchronize();
    });
    t.attention_backward_s = profile::compute_seconds(3, threads, [&] {
      k.attention_backward(dqkv.f32(), scratch.f32(), dout.f32(), out.f32(), qkv.f32(), saved.f32(),
                           shape);
      s.synchronize();
    });
  }
  {
    DeviceBuffer inp = buffer(gelu_elems, "plan gelu in");     // (gelu_elems)
    DeviceBuffer out = buffer(gelu_elems, "plan gelu out");    // (gelu_elems)
    DeviceBuffer dinp = buffer(gelu_elems, "plan gelu dinp");  // (gelu_elems)
    t.gelu_forward_s = profile::compute_seconds(3, threads, [&] {
      k.gelu_forward(out.f32(), inp.f32(), gelu_elems);
      s.synchronize();
    });
    t.gelu_backward_s = profile::compute_seconds(3, threads, [&] {
      k.gelu_backward(dinp.f32(), inp.f32(), out.f32(), gelu_elems);
      s.synchronize();
    });
  }
  t.block_gemm_flops_per_s = block_gemm_rate(device, model, seq, world, threads, buffer);
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
