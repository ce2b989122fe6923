// The model's products with fp32 and with native 16-bit operands (model_products.hpp).
#include "tierzero/bench/model_products.hpp"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/core/random.hpp"
#include "tierzero/core/timer.hpp"

namespace tierzero::bench {

std::vector<ModelProduct> model_products(const nn::GPTConfig& cfg, size_t B, size_t T,
                                         size_t classifier_rows) {
  const size_t N = B * T, C = cfg.channels, L = cfg.num_layers;
  const size_t rows = std::max<size_t>(1, std::min(N, classifier_rows));
  // The head's product is over the padded vocabulary (its GEMM tiles evenly), in whole chunks of
  // rows and a last partial one.
  const size_t Vp = cfg.padded_vocab_size;
  std::vector<ModelProduct> out = {{"qkv", N, cfg.qkv_channels(), C, L},
                                   {"attn_proj", N, C, cfg.attention_channels(), L},
                                   {"fc", N, cfg.fc_channels(), C, L},
                                   {"mlp_proj", N, C, cfg.hidden(), L},
                                   {"head", rows, Vp, C, N / rows}};
  if (N % rows != 0) out.push_back({"head_tail", N % rows, Vp, C, 1});
  return out;
}

namespace {

double median_seconds(Stream& s, int repeats, const std::function<void()>& fn) {
  std::vector<double> times;
  for (int i = 0; i <= repeats; ++i) {
    s.synchronize();
    Timer t;
    fn();
    s.synchronize();
    if (i > 0) times.push_back(t.seconds());  // the first call warms up
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

void time_model_products(Device& dev, DeviceAllocator& alloc, DType type,
                         std::vector<ModelProduct>& products, int repeats) {
  TZ_CHECK(dtype_size(type) == 2, std::string("model products: ") + dtype_name(type),
           "the native operands are bf16 or fp16");
  TZ_CHECK(repeats >= 1, "model products: repeats " + std::to_string(repeats),
           "time at least once");
  Stream& s = dev.default_stream();
  // One host buffer of random operands, never zero, for every product (drawn once: at GPT-2 XL
  // and B 16 a product's operands are tens of millions of elements).
  size_t most = 0;
  for (const ModelProduct& p : products) most = std::max({most, p.m * p.k, p.n * p.k});
  std::vector<float> host(most);
  Rng rng(11);
  for (auto& x : host) x = static_cast<float>(rng.normal()) * 0.02f + 1e-3f;
  for (ModelProduct& p : products) {
    const size_t a_elems = p.m * p.k, b_elems = p.n * p.k;
    DeviceBuffer a = alloc.allocate(a_elems * sizeof(float), Category::workspace, "bench a");
    DeviceBuffer b = alloc.allocate(b_elems * sizeof(float), Category::workspace, "bench b");
    DeviceBuffer a16 = alloc.allocate(a_elems * 2, Category::workspace, "bench a16");  // (m, k)
    DeviceBuffer b16 = alloc.allocate(b_elems * 2, Category::workspace, "bench b16");  // (n, k)
    DeviceBuffer c = alloc.allocate(p.m * p.n * sizeof(float), Category::workspace, "bench c");
    dev.copy(a.data(), host.data(), a_elems * sizeof(float), CopyKind::host_to_device, s);
    dev.copy(b.data(), host.data(), b_elems * sizeof(float), CopyKind::host_to_device, s);
    dev.kernels().convert_from_f32(a16.data(), type, a.f32(), a_elems);
    dev.kernels().convert_from_f32(b16.data(), type, b.f32(), b_elems);
    p.fp32_operands_s = median_seconds(s, repeats, [&] {
      dev.kernels().matmul_forward(c.f32(), a.f32(), b.f32(), nullptr, p.m, p.k, p.n);
    });
    p.native_s = median_seconds(s, repeats, [&] {
      dev.kernels().gemm_16bit(c.f32(), a16.data(), b16.data(), type, p.m, p.n, p.k);
    });
  }
}

double product_gflops(const ModelProduct& p, double seconds) {
  return 2.0 * static_cast<double>(p.m * p.n * p.k) / seconds / 1e9;
}

double native_speedup(const std::vector<ModelProduct>& products) {
  double fp32 = 0.0, native = 0.0;
  for (const ModelProduct& p : products) {
    fp32 += static_cast<double>(p.per_step) * p.fp32_operands_s;
    native += static_cast<double>(p.per_step) * p.native_s;
  }
  return native > 0.0 ? fp32 / native : 0.0;
}

}  // namespace tierzero::bench
