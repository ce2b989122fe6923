// Timing a block's kernels at a GPT's per-rank shapes for the planner (see plan_kernel_times.hpp).
#include "plan_kernel_times.hpp"

#include <algorithm>
#include <vector>

#include "tierzero/device/device_allocator.hpp"
#include "tierzero/kernels/cpu_ops.hpp"
#include "tierzero/kernels/kernels.hpp"
#include "tierzero/profile/calibration.hpp"

namespace tierzero::cli {

namespace {

// What the timings share: the device, its kernels and stream, buffers of small values.
struct Bench {
  Device& device;
  DeviceAllocator alloc;
  Stream& s;
  kernels::Kernels& k;
  int threads;  // the CPU backend's (its CPU time counts: profile::compute_seconds); 0 on a GPU

  explicit Bench(Device& d)
      : device(d),
        alloc(d, 0),
        s(d.default_stream()),
        k(d.kernels()),
        threads(d.kind() == DeviceKind::cpu ? std::max(kernels::cpu::threads(), 1) : 0) {}

  // `elems` values of `type`, each 0.01 (small values: no overflow in exp or tanh).
  DeviceBuffer buffer(size_t elems, DType type, const char* label) {
    elems = std::max<size_t>(elems, 1);
    DeviceBuffer b = alloc.allocate(elems * dtype_size(type), Category::workspace, label);
    std::vector<float> value(elems, 0.01f);            // (elems) fp32
    std::vector<char> host(elems * dtype_size(type));  // (elems) type
    convert_from_f32(host.data(), type, value.data(), elems);
    device.copy(b.data(), host.data(), host.size(), CopyKind::host_to_device, s);
    return b;
  }
  // Best seconds of `fn` over a few runs, each waited for.
  template <class Fn>
  double seconds(Fn&& fn) {
    return profile::compute_seconds(3, threads, [&] {
      fn();
      s.synchronize();
    });
  }
};

// Where a product carries the MLP's GELU in 16-bit compute: the fc's forward writes gelu(pre)
// in its epilogue, the projection's backward multiplies by gelu'(pre) in its own.
enum class GeluFold { none, forward, backward };

// One of a block's linears on a rank, as the model runs it in 16-bit compute: a column-parallel
// one (qkv, fc) reads a norm's 16-bit output, writes 16 bits and sends its input gradient, fp32,
// to the norm's backward; a row-parallel one (the projections) writes the fp32 residual stream
// and its input gradient in 16 bits. (In fp32 every tensor is fp32.)
struct Product {
  size_t ic, oc;
  bool column;  // column-parallel: 16-bit output, fp32 input gradient
  GeluFold fold;
};

// One product, forward and backward, in `compute`; returns its seconds.
double time_product(Bench& b, DType compute, const Product& p, size_t N) {
  const size_t ic = std::max<size_t>(p.ic, 1), oc = std::max<size_t>(p.oc, 1);
  const bool f32 = compute == DType::f32;
  const DType out_type = f32 || !p.column ? DType::f32 : compute;
  const DType din_type = f32 || p.column ? DType::f32 : compute;
  const bool folds = !f32 && p.fold != GeluFold::none;
  DeviceBuffer inp = b.buffer(N * ic, compute, "plan gemm inp");     // (N, IC) compute
  DeviceBuffer w = b.buffer(oc * ic, compute, "plan gemm weight");   // (OC, IC) compute
  DeviceBuffer out = b.buffer(N * oc, out_type, "plan gemm out");    // (N, OC) out_type
  DeviceBuffer dout = b.buffer(N * oc, compute, "plan gemm dout");   // (N, OC) compute
  DeviceBuffer dinp = b.buffer(N * ic, din_type, "plan gemm dinp");  // (N, IC) din_type
  DeviceBuffer dw = b.buffer(oc * ic, DType::f32, "plan gemm dw");   // (OC, IC) fp32
  DeviceBuffer pre = b.buffer(!folds                        ? 1      // (N, OC) fc, (N, IC) proj
                              : p.fold == GeluFold::forward ? N * oc
                                                            : N * ic,
                              compute, "plan gemm pre");
  const auto write = kernels::GradWrite::overwrite;  // as the blocks' linears write theirs
  return b.seconds([&] {
    if (f32) {
      b.k.matmul_forward(out.f32(), inp.f32(), w.f32(), nullptr, N, ic, oc);
      b.k.matmul_backward(dinp.f32(), dw.f32(), nullptr, dout.f32(), inp.f32(), w.f32(), N, ic, oc,
                          write);
      return;
    }
    if (folds && p.fold == GeluFold::forward)
      b.k.matmul16_gelu_forward(out.data(), pre.data(), inp.data(), w.data(), nullptr, compute, N,
                                ic, oc);
    else
      b.k.matmul16_forward(out.data(), out_type, inp.data(), w.data(), nullptr, compute, N, ic, oc);
    if (folds && p.fold == GeluFold::backward)
      b.k.matmul16_backward_gelu(dinp.data(), dw.f32(), nullptr, dout.data(), inp.data(),
                                 pre.data(), w.data(), compute, N, ic, oc);
    else
      b.k.matmul16_backward(dinp.data(), din_type, dw.f32(), nullptr, dout.data(), inp.data(),
                            w.data(), compute, N, ic, oc, write);
  });
}

// One block's products on a rank, forward and backward, for one sequence: tensor parallelism
// splits each product's output (column-parallel) or input (row-parallel) features, sequence
// parallelism the tokens. Returns FLOP/s: 2 N IC OC per forward product, twice that backward.
double block_gemm_rate(Bench& b, const nn::GPTConfig& model, size_t N, size_t tp, DType compute) {
  const size_t C = model.channels;
  const bool gelu = model.arch.mlp == nn::MlpKind::gelu;
  const Product products[] = {
      {C, model.qkv_channels() / tp, true, GeluFold::none},
      {model.attention_channels() / tp, C, false, GeluFold::none},
      {C, model.fc_channels() / tp, true, gelu ? GeluFold::forward : GeluFold::none},
      {model.hidden() / tp, C, false, gelu ? GeluFold::backward : GeluFold::none}};
  double seconds = 0.0, flops = 0.0;
  for (const Product& p : products) {
    seconds += time_product(b, compute, p, N);
    flops += 6.0 * static_cast<double>(N) * static_cast<double>(std::max<size_t>(p.ic, 1)) *
             static_cast<double>(std::max<size_t>(p.oc, 1));
  }
  return seconds > 0.0 ? flops / seconds : 0.0;
}

// The attention's fused kernels over all T positions of the rank's heads, in `compute`.
void time_attention(Bench& b, const kernels::AttentionShape& shape, DType compute,
                    LayerKernelTimes& t) {
  const size_t T = shape.T;
  DeviceBuffer qkv = b.buffer(T * shape.qkv_width(), compute, "plan qkv");    // (1, T, qkv) type
  DeviceBuffer out = b.buffer(T * shape.q_width(), compute, "plan att out");  // (1, T, Cl) type
  DeviceBuffer dout = b.buffer(T * shape.q_width(), compute, "plan datt");    // (1, T, Cl) type
  DeviceBuffer dqkv = b.buffer(T * shape.qkv_width(), compute, "plan dqkv");  // (1, T, qkv) type
  DeviceBuffer saved = b.buffer(b.k.attention_saved_floats(shape), DType::f32, "plan lse");
  DeviceBuffer scratch =
      b.buffer(b.k.attention_scratch_floats(shape), DType::f32, "plan attention scratch");
  const bool f32 = compute == DType::f32;
  t.attention_forward_s = b.seconds([&] {
    if (f32)
      b.k.attention_forward(out.f32(), saved.f32(), qkv.f32(), shape);
    else
      b.k.attention16_forward(out.data(), saved.f32(), qkv.data(), compute, shape);
  });
  t.attention_backward_s = b.seconds([&] {
    if (f32)
      b.k.attention_backward(dqkv.f32(), scratch.f32(), dout.f32(), out.f32(), qkv.f32(),
                             saved.f32(), shape);
    else
      b.k.attention16_backward(dqkv.data(), scratch.f32(), dout.data(), out.data(), qkv.data(),
                               saved.f32(), compute, shape);
  });
}

// The MLP's activation over N tokens' H hidden features: GELU (in fp32 its own pass; in 16-bit
// compute folded into the products, so 0 here) or SwiGLU (its own pass in either).
void time_activation(Bench& b, const nn::GPTConfig& model, size_t N, size_t H, DType compute,
                     LayerKernelTimes& t) {
  const bool swiglu = model.arch.mlp == nn::MlpKind::swiglu;
  const bool f32 = compute == DType::f32;
  if (!swiglu && !f32) return;
  const size_t in_cols = swiglu ? 2 * H : H;
  DeviceBuffer inp = b.buffer(N * in_cols, compute, "plan act in");     // (N, 2H or H) compute
  DeviceBuffer out = b.buffer(N * H, compute, "plan act out");          // (N, H) compute
  DeviceBuffer dinp = b.buffer(N * in_cols, compute, "plan act dinp");  // (N, 2H or H) compute
  if (!swiglu) {
    t.gelu_forward_s = b.seconds([&] { b.k.gelu_forward(out.f32(), inp.f32(), N * H); });
    t.gelu_backward_s =
        b.seconds([&] { b.k.gelu_backward(dinp.f32(), inp.f32(), out.f32(), N * H); });
    return;
  }
  t.gelu_forward_s = b.seconds([&] {
    if (f32)
      b.k.swiglu_forward(out.f32(), inp.f32(), N, H);
    else
      b.k.swiglu16_forward(out.data(), inp.data(), compute, N, H);
  });
  t.gelu_backward_s = b.seconds([&] {  // out stands in for the activation's output gradient
    if (f32)
      b.k.swiglu_backward(dinp.f32(), inp.f32(), out.f32(), N, H);
    else
      b.k.swiglu16_backward(dinp.data(), inp.data(), out.data(), compute, N, H);
  });
}

}  // namespace

LayerKernelTimes measure_layer_kernels(Device& device, const nn::GPTConfig& model, size_t seq,
                                       const profile::WorldLayout& world, DType compute) {
  LayerKernelTimes t;
  const auto tp = static_cast<size_t>(std::max(1, world.tp));
  const auto sp = static_cast<size_t>(std::max(1, world.sp));
  const auto pp = static_cast<size_t>(std::max(1, world.pp));
  t.layers = (model.num_layers + pp - 1) / pp;
  const size_t N = std::max<size_t>(1, seq / sp);  // the rank's tokens of one sequence
  kernels::AttentionShape shape;                   // the rank's heads over all seq positions
  shape.B = 1;
  shape.T = seq;
  shape.n_head = std::max<size_t>(1, model.num_heads / (tp * sp));
  shape.n_kv_head = std::max<size_t>(1, model.kv_heads() / (tp * sp));
  shape.head_dim = model.head_dim();
  if (shape.n_head % shape.n_kv_head != 0) shape.n_kv_head = shape.n_head;  // a split's remainder

  Bench b(device);
  time_attention(b, shape, compute, t);
  time_activation(b, model, N, std::max<size_t>(1, model.hidden() / tp), compute, t);
  t.block_gemm_flops_per_s = block_gemm_rate(b, model, N, tp, compute);
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
