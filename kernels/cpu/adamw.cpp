// AdamW on the CPU, PyTorch semantics (torch.optim.AdamW): decoupled weight decay first, then the
// bias-corrected Adam step, optionally writing the bf16 working copy of the new params in the
// same pass. The device tier on the CPU backend and the host/NVMe optimizer offload both run it,
// and on host shards it is bound by memory bandwidth, so it reads and writes each stream once.
// This file owns the per-call scalars, the choice of instruction-set path (once per process: the
// best the CPU has, lowered by TIERZERO_CPU_ISA) and the split into one contiguous block per
// OpenMP thread. The element formula and the vector bodies are in adamw_paths.hpp and
// adamw_simd.cpp; every path gives bitwise the same result.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "adamw_paths.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

namespace {

using adamw_detail::Scalars;
using adamw_detail::Streams;

Scalars make_scalars(const AdamWParams& p) {
  TZ_CHECK(p.step >= 1, "adamw: step is " + std::to_string(p.step) + ", must be >= 1",
           "the step count is 1-based (it drives the bias correction)");
  // Scalars in double, as PyTorch computes them from Python floats, then rounded once.
  const double lr = static_cast<double>(p.lr);
  const double t = static_cast<double>(p.step);
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(p.beta1), t);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(p.beta2), t);
  Scalars c;
  c.decay = static_cast<float>(1.0 - lr * static_cast<double>(p.weight_decay));
  c.step_size = static_cast<float>(lr / bias_correction1);
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  c.b1 = p.beta1;
  c.b2 = p.beta2;
  c.one_minus_b1 = static_cast<float>(1.0 - static_cast<double>(p.beta1));
  c.one_minus_b2 = static_cast<float>(1.0 - static_cast<double>(p.beta2));
  c.eps = p.eps;
  c.grad_scale = p.grad_scale;
  return c;
}

CpuIsa best_supported_isa() {
  if (cpu_isa_supported(CpuIsa::avx512)) return CpuIsa::avx512;
  if (cpu_isa_supported(CpuIsa::avx2)) return CpuIsa::avx2;
  return CpuIsa::scalar;
}

// The best path, lowered (never raised) by TIERZERO_CPU_ISA; tests and benchmarks use it to run
// a slower path on a machine that has a faster one.
CpuIsa choose_isa() {
  const CpuIsa best = best_supported_isa();
  const char* env = std::getenv("TIERZERO_CPU_ISA");
  if (env == nullptr || *env == '\0') return best;
  const std::string want = env;
  CpuIsa asked;
  if (want == "scalar")
    asked = CpuIsa::scalar;
  else if (want == "avx2")
    asked = CpuIsa::avx2;
  else if (want == "avx512")
    asked = CpuIsa::avx512;
  else
    TZ_THROW("TIERZERO_CPU_ISA is '" + want + "'", "use scalar, avx2 or avx512, or unset it");
  if (static_cast<int>(asked) > static_cast<int>(best)) {
    log::warn(std::string("TIERZERO_CPU_ISA=") + want + " but this CPU only runs " +
              cpu_isa_name(best) + "; using " + cpu_isa_name(best));
    return best;
  }
  return asked;
}

CpuIsa chosen_isa() {
  static const CpuIsa isa = choose_isa();
  return isa;
}

void run(CpuIsa isa, const Streams& s, const Scalars& c, size_t n) {
  void (*body)(const Streams&, const Scalars&, size_t, size_t) = adamw_detail::update_range;
  if (isa == CpuIsa::avx512) body = adamw_detail::update_range_avx512;
  if (isa == CpuIsa::avx2) body = adamw_detail::update_range_avx2;
  // One contiguous block per thread (what a static schedule does), cut at multiples of 16
  // elements so that no two threads write the same 64-byte line of aligned data. Below about
  // 32K elements the threads' start-up costs more than the work.
  constexpr size_t kLine = 16;
  constexpr size_t kParallelMin = size_t{1} << 15;
#pragma omp parallel if (n >= kParallelMin)
  {
    const auto threads = static_cast<size_t>(omp_get_num_threads());
    const auto t = static_cast<size_t>(omp_get_thread_num());
    const size_t block = (n + threads - 1) / threads;
    const size_t block_lines = (block + kLine - 1) / kLine * kLine;
    const size_t begin = std::min(n, t * block_lines);
    const size_t end = std::min(n, begin + block_lines);
    if (begin < end) body(s, c, begin, end);
  }
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::scalar:
      return "scalar";
    case CpuIsa::avx2:
      return "avx2";
    case CpuIsa::avx512:
      return "avx512";
  }
  return "?";
}

bool cpu_isa_supported(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::scalar:
      return true;
    case CpuIsa::avx2:
      return __builtin_cpu_supports("avx2") != 0;
    case CpuIsa::avx512:
      return __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512bw") != 0;
  }
  return false;
}

const char* adamw_isa() {
  return cpu_isa_name(chosen_isa());
}

void adamw_update_with_copy_on(CpuIsa isa,
                               float* param,        // (n)
                               float* m,            // (n)
                               float* v,            // (n)
                               const float* grad,   // (n)
                               uint16_t* bf16_out,  // (n), or null
                               size_t n, const AdamWParams& p) {
  TZ_CHECK(cpu_isa_supported(isa),
           std::string("adamw: this CPU cannot run the ") + cpu_isa_name(isa) + " path",
           "ask for a path cpu_isa_supported() accepts");
  run(isa, Streams{param, m, v, grad, bf16_out}, make_scalars(p), n);
}

void adamw_update_with_copy(float* param,        // (n)
                            float* m,            // (n)
                            float* v,            // (n)
                            const float* grad,   // (n)
                            uint16_t* bf16_out,  // (n), or null
                            size_t n, const AdamWParams& p) {
  const Scalars c = make_scalars(p);  // checks the step first, whatever the path
  run(chosen_isa(), Streams{param, m, v, grad, bf16_out}, c, n);
}

void adamw_update(float* param,       // (n)
                  float* m,           // (n)
                  float* v,           // (n)
                  const float* grad,  // (n)
                  size_t n, const AdamWParams& p) {
  adamw_update_with_copy(param, m, v, grad, nullptr, n, p);
}

}  // namespace tierzero::kernels::cpu
