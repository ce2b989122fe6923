// `tierzero bench train` (train_step.hpp): the sgemm baseline taken the better of two ways (with
// 16-bit products on a GPU the native 16-bit GEMM, which makes the ratio the MFU), then timed
// steps of the reference path (LocalParams + AdamW on one rank; in 16-bit compute with the
// parameters' 16-bit working copy), the first not counted.
#include "tierzero/bench/train_step.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tierzero/bench/model_products.hpp"
#include "tierzero/bench/results.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/core/out_of_memory.hpp"
#include "tierzero/core/random.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/train/adamw_optimizer.hpp"
#include "train_batch_fit.hpp"

namespace tierzero::bench {

namespace {

// The upper median (the middle element, as before the benchmarks became a library).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GFLOP/s of a 2048^3 sgemm, the better of two ways: OpenBLAS with its own threads, and the
// backend's matmul (which on the CPU splits the product over OpenMP threads, one OpenBLAS call
// each). Taking the better one keeps the baseline honest whichever is faster on this machine.
struct SgemmRate {
  double openblas_threads;  // GFLOP/s, cblas_sgemm with OpenBLAS's thread pool
  double backend_matmul;    // GFLOP/s, Kernels::matmul_forward
  double best() const { return std::max(openblas_threads, backend_matmul); }
};

SgemmRate sgemm_rate(Device& dev, DeviceAllocator& alloc, int threads) {
  constexpr size_t n = 2048;
  constexpr double flops = 2.0 * n * n * n;
  DeviceBuffer a = alloc.allocate(n * n * sizeof(float), Category::workspace, "bench a");  // (n, n)
  DeviceBuffer b = alloc.allocate(n * n * sizeof(float), Category::workspace, "bench b");  // (n, n)
  DeviceBuffer c = alloc.allocate(n * n * sizeof(float), Category::workspace, "bench c");  // (n, n)
  std::vector<float> host(n * n);                                                          // (n, n)
  Rng rng(1);
  for (auto& x : host) x = static_cast<float>(rng.normal());
  Stream& s = dev.default_stream();
  dev.copy(a.data(), host.data(), n * n * sizeof(float), CopyKind::host_to_device, s);
  dev.copy(b.data(), host.data(), n * n * sizeof(float), CopyKind::host_to_device, s);
  auto time_it = [&](auto&& fn) {
    std::vector<double> times;
    for (int i = 0; i < 6; ++i) {
      s.synchronize();
      Timer t;
      fn();
      s.synchronize();
      if (i > 0) times.push_back(t.seconds());  // the first call warms up
    }
    return flops / median(times) / 1e9;
  };
  SgemmRate r{0.0, 0.0};
  if (dev.kind() == DeviceKind::cpu) {
    const int saved = openblas_get_num_threads();
    openblas_set_num_threads(threads);
    r.openblas_threads = time_it([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.f32(), n, b.f32(), n,
                  0.0f, c.f32(), n);
    });
    openblas_set_num_threads(saved);
  }
  r.backend_matmul =
      time_it([&] { dev.kernels().matmul_forward(c.f32(), a.f32(), b.f32(), nullptr, n, n, n); });
  return r;
}

// GFLOP/s of an n^3 product with 16-bit operands (Kernels::gemm_16bit, fp32 accumulation): the
// chip's own 16-bit GEMM rate, measured in the same run, that MFU divides model FLOPs by. n 8192:
// large enough (1.1 TFLOP a call) that launch costs vanish on a GPU.
double gemm_16bit_rate(Device& dev, DeviceAllocator& alloc, DType type) {
  constexpr size_t n = 8192;
  constexpr double flops = 2.0 * n * n * n;
  DeviceBuffer a = alloc.allocate(n * n * 2, Category::workspace, "bench a16");  // (n, n) type
  DeviceBuffer b = alloc.allocate(n * n * 2, Category::workspace, "bench b16");  // (n, n) type
  DeviceBuffer c = alloc.allocate(n * n * sizeof(float), Category::workspace, "bench c");  // (n, n)
  std::vector<float> block(n);  // (n) random values, repeated down the rows
  Rng rng(1);
  for (auto& x : block) x = static_cast<float>(rng.normal());
  std::vector<uint16_t> row(n);  // (n) type
  convert_from_f32(row.data(), type, block.data(), n);
  std::vector<uint16_t> host(n * n);  // (n, n) type
  for (size_t r = 0; r < n; ++r)
    std::copy(row.begin(), row.end(), host.begin() + static_cast<std::ptrdiff_t>(r * n));
  Stream& s = dev.default_stream();
  dev.copy(a.data(), host.data(), n * n * 2, CopyKind::host_to_device, s);
  dev.copy(b.data(), host.data(), n * n * 2, CopyKind::host_to_device, s);
  std::vector<double> times;
  for (int i = 0; i < 6; ++i) {
    s.synchronize();
    Timer t;
    dev.kernels().gemm_16bit(c.f32(), a.data(), b.data(), type, n, n, n);
    s.synchronize();
    if (i > 0) times.push_back(t.seconds());  // the first call warms up
  }
  return flops / median(times) / 1e9;
}

// Model FLOPs of one step (forward + backward): 6 per parameter per token for the products, plus
// causal attention's 6·L·C·T per token (QK^T and AV over half the T×T scores; with grouped kv
// heads the queries still span C channels). An untied input embedding is a lookup, not a product,
// so its V·C parameters are left out (a tied one is counted once, as the head's product).
double model_flops_per_step(const nn::GPTConfig& cfg, size_t parameters, size_t B, size_t T) {
  double matmul_params = static_cast<double>(parameters);
  if (!cfg.arch.tie_embeddings)
    matmul_params -= static_cast<double>(cfg.vocab_size) * static_cast<double>(cfg.channels);
  const double tokens = static_cast<double>(B * T);
  return 6.0 * matmul_params * tokens +
         6.0 * static_cast<double>(cfg.num_layers * cfg.channels) * static_cast<double>(T) * tokens;
}

// A fresh model with its parameters and AdamW on `alloc`, stepped `steps` times at (B, T) after
// one warm-up step that is not timed, computing in `compute` (a 16-bit one with the parameters'
// working copy of that type, which the update rewrites).
struct SteppedModel {
  std::vector<double> times;  // seconds of each timed step
  size_t parameters = 0;
  size_t activation_bytes = 0;
  size_t peak_in_use = 0;  // alloc's tracked peak
};

SteppedModel step_model(Device& dev, DeviceAllocator& alloc, const nn::GPTConfig& cfg, size_t B,
                        size_t T, int64_t steps, DType compute) {
  nn::GPT model(cfg, alloc);
  model.set_compute(compute);
  nn::LocalParams params(model.layout(), alloc, compute);
  std::vector<float> host(model.layout().total_numel());         // (total_numel)
  nn::init_gpt2_params(model.layout(), cfg, 1337, host.data());  // Llama's norms too (weights 1)
  dev.copy(params.params(), host.data(), host.size() * sizeof(float), CopyKind::host_to_device,
           dev.default_stream());
  params.round_working();
  train::OptimizerConfig oc;
  train::AdamWOptimizer opt(oc, model.layout(), alloc);
  std::vector<int32_t> x(B * T), y(B * T);  // (B, T)
  Rng rng(7);
  for (size_t i = 0; i < B * T; ++i) {
    x[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
    y[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
  }
  SteppedModel out;
  for (int64_t i = 0; i <= steps; ++i) {  // the first step warms caches and is not counted
    Timer t;
    params.zero_grads();
    model.forward_backward(params, x.data(), y.data(), B, T, 1.0f);
    opt.step(params, 1e-4, 1.0);
    dev.default_stream().synchronize();
    if (i > 0) out.times.push_back(t.seconds());
  }
  out.parameters = model.layout().parameter_count();
  out.activation_bytes = model.activation_bytes();
  out.peak_in_use = alloc.stats().peak_in_use;
  return out;
}

// --batch 0: the largest micro-batch whose step fits the budget, from a step at one sequence.
BatchFit fit_batch(Device& dev, size_t reserved_now, const nn::GPTConfig& cfg, size_t T,
                   size_t device_mem, DType compute) {
  const size_t budget = step_budget(dev, device_mem, reserved_now);
  // (0 only on a GPU whose memory the driver already holds, less our margin: an allocator of
  // budget 0 would take the whole device instead.)
  TZ_CHECK(budget > 0,
           "bench train --batch 0: no room for a step on " + dev.name() + ": the driver reports " +
               format_bytes(static_cast<size_t>(std::max<int64_t>(dev.driver_used_bytes(), 0))) +
               " of its " + format_bytes(dev.total_memory()) +
               " in use outside our allocators, and 512 MiB or 3% are kept free",
           "free the GPU (another process holds it), or give --device-mem explicitly");
  size_t peak_at_one = 0;
  try {
    DeviceAllocator probe(dev, budget);
    peak_at_one = step_model(dev, probe, cfg, 1, T, 0, compute).peak_in_use;
  } catch (const OutOfMemory& e) {
    TZ_THROW("bench train --batch 0: a step of one sequence of " + std::to_string(T) +
                 " tokens does not fit " + format_bytes(budget) + " (" + e.what() + ")",
             "give more --device-mem, a shorter --seq or a smaller --model");
  }
  const BatchFit fit = largest_fitting_batch(cfg, T, peak_at_one, budget, size_t{1} << 16, compute);
  TZ_CHECK(fit.batch > 0,
           "bench train --batch 0: a step of one sequence of " + std::to_string(T) +
               " tokens is predicted to take " + format_bytes(fit.next_peak) + ", over " +
               format_bytes(budget),
           "give more --device-mem, a shorter --seq or a smaller --model");
  return fit;
}

// --compute-dtype against the products' precision (BenchTrainStepOptions).
DType step_compute(const BenchTrainStepOptions& f, bool native16, const std::string& precision) {
  const DType precision16 = precision == "fp16" ? DType::f16 : DType::bf16;  // if native16
  if (f.compute_dtype == "fp32") return DType::f32;
  if (f.compute_dtype == "auto") return native16 ? precision16 : DType::f32;
  const DType asked = dtype_from_name(f.compute_dtype);
  // (Against the precision asked: the CPU reports fp32 for all, and runs 16-bit compute widened.)
  TZ_CHECK(f.matmul_precision == f.compute_dtype,
           "bench train --compute-dtype " + f.compute_dtype + " with --matmul-precision " +
               f.matmul_precision,
           "16-bit compute runs the products in its own type: give --matmul-precision " +
               f.compute_dtype + " too");
  return asked;
}

}  // namespace

BenchTrainStepResult bench_train_step(const BenchTrainStepOptions& f) {
  TZ_CHECK(f.batch >= 0 && f.seq > 0 && f.device_mem >= 0,
           "bench train: --batch " + std::to_string(f.batch) + ", --seq " + std::to_string(f.seq) +
               ", --device-mem " + std::to_string(f.device_mem),
           "give a positive --seq, and --batch and --device-mem of 0 or more (--batch 0: the "
           "largest that fits)");
  std::unique_ptr<Device> dev = make_device(f.device, static_cast<int>(f.threads));
  // Before the baseline, so the GEMM rate and the step use the same arithmetic.
  dev->kernels().set_matmul_precision(kernels::matmul_precision_from_name(f.matmul_precision));
  const std::string precision = kernels::matmul_precision_name(dev->kernels().matmul_precision());
  // The baseline's name says its arithmetic: "sgemm" for fp32 as before, else e.g. "gemm_bf16".
  std::string baseline_name = precision == "fp32" ? "sgemm" : "gemm_" + precision;
  DeviceAllocator alloc(*dev, 0);
  const SgemmRate sg = sgemm_rate(*dev, alloc, static_cast<int>(f.threads));
  // With 16-bit products on a GPU the baseline is the chip's native 16-bit GEMM (operands in
  // 16 bits, as a peer's are), so that the ratio is the MFU; our products' own rate (fp32
  // operands rounded inside cuBLASLt) is printed beside it.
  const bool native16 =
      dev->kind() == DeviceKind::cuda && (precision == "bf16" || precision == "fp16");
  const double gemm16 =
      native16 ? gemm_16bit_rate(*dev, alloc, precision == "bf16" ? DType::bf16 : DType::f16) : 0.0;
  const double sgemm = native16 ? gemm16 : sg.best();
  alloc.release_cached();

  nn::GPTConfig cfg = nn::GPTConfig::preset(f.model);
  cfg.classifier_chunk_tokens = static_cast<size_t>(f.classifier_chunk);
  const auto T = static_cast<size_t>(f.seq);
  const DType compute = step_compute(f, native16, precision);
  BatchFit fit;
  if (f.batch == 0)
    fit =
        fit_batch(*dev, alloc.stats().reserved, cfg, T, static_cast<size_t>(f.device_mem), compute);
  size_t B = f.batch == 0 ? fit.batch : static_cast<size_t>(f.batch);
  // With 16-bit products, what 16-bit operands would buy this model's own products.
  std::vector<ModelProduct> products;
  if (native16) {
    products = model_products(cfg, B, T, nn::ActivationDims::of(cfg, B, T).logits_rows);
    time_model_products(*dev, alloc, precision == "bf16" ? DType::bf16 : DType::f16, products);
    alloc.release_cached();
  }
  // The step on an allocator of its own, so that its peak is the step's alone. On a GPU the
  // driver may still refuse the predicted batch (its rounding is not tracked): a smaller one runs.
  const size_t step_budget_bytes = f.batch == 0 ? fit.budget : static_cast<size_t>(f.device_mem);
  SteppedModel run;
  int retries = 0;
  for (;;) {
    try {
      DeviceAllocator step_alloc(*dev, step_budget_bytes);
      run = step_model(*dev, step_alloc, cfg, B, T, f.steps, compute);
      break;
    } catch (const OutOfMemory& e) {  // any other Error is not the batch's size: it stands
      if (f.batch != 0 || B <= 1 || retries == 4) throw;
      std::fprintf(stderr, "bench train: micro-batch %zu did not fit (%s); trying a smaller one\n",
                   B, e.what());
      B -= std::max<size_t>(1, B / 16);
      ++retries;
    }
  }
  const double step_s = median(run.times);
  const double tokens = static_cast<double>(B * T);
  const double flops = model_flops_per_step(cfg, run.parameters, B, T);
  const double N = static_cast<double>(run.parameters);
  const double rate = flops / step_s / 1e9;
  std::fprintf(stderr,
               "bench train: %s (%.1fM params), batch %zu x %zu, fp32 parameters, %s products, "
               "%s activations, %s\n",
               f.model.c_str(), N / 1e6, B, T, precision.c_str(), dtype_name(compute),
               dev->name().c_str());
  std::fprintf(stderr, "  %-32s %12s\n", "measure", "value");
  if (sg.openblas_threads > 0)
    std::fprintf(stderr, "  %-32s %9.1f GF/s\n", "sgemm 2048^3, OpenBLAS threads",
                 sg.openblas_threads);
  std::fprintf(stderr, "  %-32s %9.1f GF/s\n", (baseline_name + " 2048^3, backend matmul").c_str(),
               sg.backend_matmul);
  if (native16) {
    baseline_name = "gemm_" + precision + "_native";
    std::fprintf(stderr, "  %-32s %9.1f GF/s\n",
                 (baseline_name + " 8192^3 (16-bit operands)").c_str(), gemm16);
  } else {
    std::fprintf(stderr, "  %-32s %9.1f GF/s\n", "baseline (the better)", sgemm);
  }
  for (const ModelProduct& p : products) {
    std::fprintf(stderr, "  %-32s %9.1f / %.1f GF/s\n",
                 (p.name + " " + std::to_string(p.m) + "x" + std::to_string(p.n) + "x" +
                  std::to_string(p.k) + ", fp32 / 16-bit operands")
                     .c_str(),
                 product_gflops(p, p.fp32_operands_s), product_gflops(p, p.native_s));
  }
  if (!products.empty())
    std::fprintf(stderr, "  %-32s %9.3f\n", "products, 16-bit operands speedup",
                 native_speedup(products));
  if (f.batch == 0)  // after a retry the predicted peaks are those of the batch predicted
    std::fprintf(stderr,
                 "  %-32s %9zu (of %s: B %zu predicted at peak %s, %s measured at B %zu; %zu: "
                 "%s)\n",
                 "micro-batch, largest that fits", B, format_bytes(fit.budget).c_str(), fit.batch,
                 format_bytes(fit.predicted_peak).c_str(), format_bytes(run.peak_in_use).c_str(), B,
                 fit.batch + 1, fit.next_peak ? format_bytes(fit.next_peak).c_str() : "not tried");
  std::fprintf(stderr, "  %-32s %9.1f ms\n", "train step (median)", step_s * 1e3);
  std::fprintf(stderr, "  %-32s %9.1f GF/s\n", "train step rate", rate);
  std::fprintf(stderr, "  %-32s %9.1f tok/s\n", "throughput", tokens / step_s);
  std::fprintf(stderr, "  %-32s %9.3f\n", native16 ? "MFU (goal >= 0.45)" : "ratio (goal >= 0.60)",
               rate / sgemm);
  nlohmann::ordered_json j = bench_result("train.step", round_to(rate, 3), "GFLOP/s", baseline_name,
                                          round_to(sgemm, 3), rate / sgemm);
  j["matmul_precision"] = precision;
  j["compute_dtype"] = dtype_name(compute);
  if (native16) {
    j["mfu"] = round_to(rate / sgemm, 4);
    j["gemm_fp32_operands_gflops"] = round_to(sg.backend_matmul, 3);
    nlohmann::ordered_json shapes = nlohmann::ordered_json::array();
    for (const ModelProduct& p : products) {
      shapes.push_back({{"name", p.name},
                        {"m", p.m},
                        {"n", p.n},
                        {"k", p.k},
                        {"per_step", p.per_step},
                        {"fp32_operands_gflops", round_to(product_gflops(p, p.fp32_operands_s), 3)},
                        {"native_gflops", round_to(product_gflops(p, p.native_s), 3)}});
    }
    j["products"] = shapes;
    j["products_native_speedup"] = round_to(native_speedup(products), 4);
  }
  j["logits_rows"] = nn::ActivationDims::of(cfg, B, T).logits_rows;
  j["activation_bytes"] = run.activation_bytes;
  j["peak_bytes"] = run.peak_in_use;
  if (f.batch == 0)
    j["batch_fit"] = {{"budget_bytes", fit.budget},
                      {"predicted_batch", fit.batch},
                      {"peak_at_one_bytes", fit.peak_at_one},
                      {"predicted_peak_bytes", fit.predicted_peak},
                      {"next_batch_peak_bytes", fit.next_peak},
                      {"retries", retries}};
  j["step_ms"] = round_to(step_s * 1e3, 2);
  j["model"] = f.model;
  j["batch"] = B;
  j["seq"] = T;
  j["device"] = dev->name();
  BenchTrainStepResult r;
  r.sgemm_openblas_gflops = sg.openblas_threads;
  r.sgemm_backend_gflops = sg.backend_matmul;
  r.sgemm_gflops = sgemm;
  r.matmul_precision = precision;
  r.compute_dtype = dtype_name(compute);
  r.step_s = step_s;
  r.gflops = rate;
  r.tokens_per_s = tokens / step_s;
  r.parameters = run.parameters;
  r.device = dev->name();
  r.batch = B;
  r.peak_bytes = run.peak_in_use;
  r.fit_budget = fit.budget;
  r.fit_predicted_peak = fit.predicted_peak;
  r.fit_next_peak = fit.next_peak;
  r.fit_retries = retries;
  r.report.emit(j);
  return r;
}

}  // namespace tierzero::bench
