// The 16-bit linears, Kernels::matmul16_forward / matmul16_backward / matmul16_gelu_forward /
// matmul16_backward_gelu, on every backend, against the double reference of their operands'
// rounded values, for bf16 and fp16 operands and each result type (fp32, or the operands' type),
// at shapes that are and are not multiples of a tile, with and without a bias, and empty ones.
// On the CPU they must also give the bits of the fp32 kernels on the widened operands with the
// results rounded once (the reference form of 16-bit training); on CUDA they run cuBLASLt on the
// 16-bit operands (with its epilogues where it has them).
//
// Tolerances (of |ref| + rms of the products' magnitudes, as test_matmul_precision.cpp): the
// operands are exact in the reference, so an fp32 result carries only fp32 accumulation, 1e-5; a
// 16-bit result adds its rounding (at most 2^-8 of |ref| in bf16, 2^-11 in fp16) and, where CUDA
// has no epilogue for a shape, a second one before the bias or GELU: 2^-7 and 2^-10. GELU from
// cuBLASLt's epilogue (a tanh whose accuracy it does not document): 2e-3 at least on CUDA, as
// test_matmul_gelu.cpp. Every result that is overwritten starts as NaN.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernel_test_support.hpp"
#include "reference_kernels.hpp"
#include "tierzero/core/dtype.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::test {
namespace {

using kernels::GradWrite;

class Matmul16Test : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(Matmul16Test);

struct Shape {
  size_t N, IC, OC;
  bool bias;
};
const Shape kShapes[] = {{7, 48, 13, true},     {37, 96, 200, false},  {64, 768, 3072, true},
                         {64, 3072, 768, true}, {50, 300, 1001, true}, {33, 136, 64, false},
                         {5, 1, 8, true},       {3, 0, 8, true},       {4, 8, 0, false}};
const DType kTypes[] = {DType::bf16, DType::f16};

std::string name(const std::string& what, DType type, DType result, const Shape& s) {
  return what + " " + dtype_name(type) + "->" + dtype_name(result) + " N" + std::to_string(s.N) +
         " IC" + std::to_string(s.IC) + " OC" + std::to_string(s.OC) +
         (s.bias ? " bias" : " nobias");
}

double result_tolerance(DType result) {
  switch (result) {
    case DType::bf16:
      return 1.0 / 128;
    case DType::f16:
      return 1.0 / 1024;
    default:
      return 1e-5;
  }
}

TEST_P(Matmul16Test, ForwardMatchesTheReferenceOfRoundedOperands) {
  uint32_t seed = 1600;
  for (DType type : kTypes)
    for (DType out_type : {DType::f32, type})
      for (const Shape& s : kShapes) {
        const Rounded inp = rounded(random_normal(s.N * s.IC, seed++), type);      // (N, IC)
        const Rounded weight = rounded(random_normal(s.OC * s.IC, seed++), type);  // (OC, IC)
        const Rounded bias = rounded(random_normal(s.OC, seed++, 4.0f), type);     // (OC)
        auto d_inp = to_device(inp.bits);
        auto d_weight = to_device(weight.bits);
        auto d_bias = to_device(bias.bits);
        auto d_out = to_device(poison(s.N * s.OC));  // (N, OC) out_type
        kernels().matmul16_forward(d_out->get(), out_type, d_inp->get(), d_weight->get(),
                                   s.bias ? d_bias->get() : nullptr, type, s.N, s.IC, s.OC);
        const std::vector<float> raw = d_out->download();
        const std::vector<float> got = result_values(raw, out_type, s.N * s.OC);

        std::vector<double> out(s.N * s.OC), magnitude(s.N * s.OC);
        const std::vector<double> bias_d = widen(bias.values);
        ref::matmul_forward(out.data(), widen(inp.values).data(), widen(weight.values).data(),
                            s.bias ? bias_d.data() : nullptr, s.N, s.IC, s.OC);
        ref::matmul_forward(magnitude.data(), absolute(widen(inp.values)).data(),
                            absolute(widen(weight.values)).data(),
                            s.bias ? absolute(bias_d).data() : nullptr, s.N, s.IC, s.OC);
        expect_close(name("matmul16_forward", type, out_type, s), got, out,
                     result_tolerance(out_type), rms(magnitude));

        if (!is_cpu()) continue;
        // The fp32 kernel on the widened operands, rounded once.
        auto d_inp32 = to_device(inp.values), d_weight32 = to_device(weight.values);
        auto d_bias32 = to_device(bias.values);
        auto d_out32 = empty<float>(s.N * s.OC);
        auto d_rounded = to_device(poison(s.N * s.OC));
        kernels().matmul_forward(d_out32->get(), d_inp32->get(), d_weight32->get(),
                                 s.bias ? d_bias32->get() : nullptr, s.N, s.IC, s.OC);
        kernels().convert_from_f32(d_rounded->get(), out_type, d_out32->get(), s.N * s.OC);
        EXPECT_TRUE(same_bits(raw, d_rounded->download()))
            << name("forward bits", type, out_type, s);
      }
}

TEST_P(Matmul16Test, BackwardMatchesTheReferenceOfRoundedOperands) {
  struct Write {
    bool sixteen;  // dinp of the operands' type, else fp32
    GradWrite how;
  };
  uint32_t seed = 1700;
  for (DType type : kTypes)
    for (Write w : {Write{false, GradWrite::accumulate}, Write{false, GradWrite::overwrite},
                    Write{true, GradWrite::overwrite}})
      for (const Shape& s : kShapes) {
        const DType dinp_type = w.sixteen ? type : DType::f32;
        const bool accumulate = w.how == GradWrite::accumulate;
        const Rounded dout = rounded(random_normal(s.N * s.OC, seed++), type);     // (N, OC)
        const Rounded inp = rounded(random_normal(s.N * s.IC, seed++), type);      // (N, IC)
        const Rounded weight = rounded(random_normal(s.OC * s.IC, seed++), type);  // (OC, IC)
        const std::vector<float> dinp0 =
            accumulate ? random_normal(s.N * s.IC, seed++) : poison(s.N * s.IC);  // (N, IC)
        const std::vector<float> dweight0 = random_normal(s.OC * s.IC, seed++);   // (OC, IC)
        const std::vector<float> dbias0 = random_normal(s.OC, seed++);            // (OC)
        auto d_dout = to_device(dout.bits), d_inp = to_device(inp.bits);
        auto d_weight = to_device(weight.bits);
        auto d_dinp = to_device(dinp0), d_dweight = to_device(dweight0);
        auto d_dbias = to_device(dbias0);
        kernels().matmul16_backward(d_dinp->get(), dinp_type, d_dweight->get(),
                                    s.bias ? d_dbias->get() : nullptr, d_dout->get(), d_inp->get(),
                                    d_weight->get(), type, s.N, s.IC, s.OC, w.how);

        std::vector<double> dinp(s.N * s.IC, 0.0), dweight(s.OC * s.IC, 0.0), dbias(s.OC, 0.0);
        ref::matmul_backward(dinp.data(), dweight.data(), dbias.data(), widen(dout.values).data(),
                             widen(inp.values).data(), widen(weight.values).data(), s.N, s.IC,
                             s.OC);
        std::vector<double> dinp_mag(s.N * s.IC, 0.0), dweight_mag(s.OC * s.IC, 0.0);
        ref::matmul_backward(dinp_mag.data(), dweight_mag.data(), nullptr,
                             absolute(widen(dout.values)).data(),
                             absolute(widen(inp.values)).data(),
                             absolute(widen(weight.values)).data(), s.N, s.IC, s.OC);
        const std::string how = accumulate ? " +=" : " =";
        const std::vector<float> raw_dinp = d_dinp->download();
        expect_close(name("matmul16_backward dinp" + how, type, dinp_type, s),
                     result_values(raw_dinp, dinp_type, s.N * s.IC),
                     accumulate ? plus(dinp0, dinp) : dinp, result_tolerance(dinp_type),
                     rms(dinp_mag));
        const std::vector<float> got_dweight = d_dweight->download();
        expect_close(name("matmul16_backward dweight", type, DType::f32, s), got_dweight,
                     plus(dweight0, dweight), 1e-5, rms(dweight_mag));
        if (s.bias) {
          expect_close(name("matmul16_backward dbias", type, DType::f32, s), d_dbias->download(),
                       plus(dbias0, dbias), 1e-5);
        }

        if (!is_cpu()) continue;
        // matmul_backward on the widened operands, the input gradient rounded once.
        auto d_dout32 = to_device(dout.values), d_inp32 = to_device(inp.values);
        auto d_weight32 = to_device(weight.values);
        auto d_dinp32 = to_device(accumulate ? dinp0 : poison(s.N * s.IC));
        auto d_dweight32 = to_device(dweight0);
        kernels().matmul_backward(d_dinp32->get(), d_dweight32->get(), nullptr, d_dout32->get(),
                                  d_inp32->get(), d_weight32->get(), s.N, s.IC, s.OC, w.how);
        auto d_rounded = to_device(poison(s.N * s.IC));
        kernels().convert_from_f32(d_rounded->get(), dinp_type, d_dinp32->get(), s.N * s.IC);
        EXPECT_TRUE(same_bits(raw_dinp, d_rounded->download()))
            << name("dinp bits" + how, type, dinp_type, s);
        EXPECT_TRUE(same_bits(got_dweight, d_dweight32->download()))
            << name("dweight bits", type, DType::f32, s);
      }
}

TEST_P(Matmul16Test, GeluForwardMatchesTheReferenceOfRoundedOperands) {
  uint32_t seed = 1800;
  for (DType type : kTypes)
    for (const Shape& s : kShapes) {
      const double tol = result_tolerance(type);
      const double gelu_tol = is_cpu() ? tol : std::max(tol, 2e-3);
      const Rounded inp = rounded(random_normal(s.N * s.IC, seed++, 0.05f), type);  // (N, IC)
      const Rounded weight = rounded(random_normal(s.OC * s.IC, seed++), type);     // (OC, IC)
      const Rounded bias = rounded(random_normal(s.OC, seed++, 0.5f), type);        // (OC)
      auto d_inp = to_device(inp.bits), d_weight = to_device(weight.bits);
      auto d_bias = to_device(bias.bits);
      auto d_pre = to_device(poison(s.N * s.OC)), d_out = to_device(poison(s.N * s.OC));
      kernels().matmul16_gelu_forward(d_out->get(), d_pre->get(), d_inp->get(), d_weight->get(),
                                      s.bias ? d_bias->get() : nullptr, type, s.N, s.IC, s.OC);

      std::vector<double> pre(s.N * s.OC), out(s.N * s.OC), magnitude(s.N * s.OC);
      const std::vector<double> bias_d = widen(bias.values);
      ref::matmul_forward(pre.data(), widen(inp.values).data(), widen(weight.values).data(),
                          s.bias ? bias_d.data() : nullptr, s.N, s.IC, s.OC);
      ref::gelu_forward(out.data(), pre.data(), out.size());
      ref::matmul_forward(magnitude.data(), absolute(widen(inp.values)).data(),
                          absolute(widen(weight.values)).data(),
                          s.bias ? absolute(bias_d).data() : nullptr, s.N, s.IC, s.OC);
      const std::vector<float> raw_pre = d_pre->download(), raw_out = d_out->download();
      expect_close(name("matmul16_gelu_forward pre", type, type, s),
                   result_values(raw_pre, type, pre.size()), pre, tol, rms(magnitude));
      expect_close(name("matmul16_gelu_forward out", type, type, s),
                   result_values(raw_out, type, out.size()), out, gelu_tol, rms(magnitude));

      if (!is_cpu()) continue;
      // The fp32 fused call on the widened operands, each output rounded once.
      auto d_inp32 = to_device(inp.values), d_weight32 = to_device(weight.values);
      auto d_bias32 = to_device(bias.values);
      auto d_pre32 = empty<float>(s.N * s.OC), d_out32 = empty<float>(s.N * s.OC);
      kernels().matmul_gelu_forward(d_out32->get(), d_pre32->get(), d_inp32->get(),
                                    d_weight32->get(), s.bias ? d_bias32->get() : nullptr, s.N,
                                    s.IC, s.OC);
      auto d_pre_r = to_device(poison(s.N * s.OC)), d_out_r = to_device(poison(s.N * s.OC));
      kernels().convert_from_f32(d_pre_r->get(), type, d_pre32->get(), s.N * s.OC);
      kernels().convert_from_f32(d_out_r->get(), type, d_out32->get(), s.N * s.OC);
      EXPECT_TRUE(same_bits(raw_pre, d_pre_r->download())) << name("pre bits", type, type, s);
      EXPECT_TRUE(same_bits(raw_out, d_out_r->download())) << name("out bits", type, type, s);
    }
}

TEST_P(Matmul16Test, BackwardGeluMatchesTheReferenceOfRoundedOperands) {
  uint32_t seed = 1900;
  for (DType type : kTypes)
    for (const Shape& s : kShapes) {
      const double tol = result_tolerance(type);
      const double gelu_tol = is_cpu() ? tol : std::max(tol, 2e-3);
      // (N, IC) the forward's pre-activations and gelu of them (this product's input), rounded.
      const Rounded pre = rounded(random_normal(s.N * s.IC, seed++, 1.5f), type);
      std::vector<double> act_d(pre.values.size());
      ref::gelu_forward(act_d.data(), widen(pre.values).data(), act_d.size());
      const Rounded act = rounded(narrow(act_d), type);
      const Rounded weight = rounded(random_normal(s.OC * s.IC, seed++), type);  // (OC, IC)
      const Rounded dout = rounded(random_normal(s.N * s.OC, seed++), type);     // (N, OC)
      const std::vector<float> dweight0 = random_normal(s.OC * s.IC, seed++);    // (OC, IC)
      const std::vector<float> dbias0 = random_normal(s.OC, seed++);             // (OC)
      auto d_pre = to_device(pre.bits), d_act = to_device(act.bits);
      auto d_weight = to_device(weight.bits), d_dout = to_device(dout.bits);
      auto d_dpre = to_device(poison(s.N * s.IC));
      auto d_dweight = to_device(dweight0), d_dbias = to_device(dbias0);
      kernels().matmul16_backward_gelu(
          d_dpre->get(), d_dweight->get(), s.bias ? d_dbias->get() : nullptr, d_dout->get(),
          d_act->get(), d_pre->get(), d_weight->get(), type, s.N, s.IC, s.OC);

      std::vector<double> dact(s.N * s.IC, 0.0), dweight(s.OC * s.IC, 0.0), dbias(s.OC, 0.0);
      ref::matmul_backward(dact.data(), dweight.data(), dbias.data(), widen(dout.values).data(),
                           widen(act.values).data(), widen(weight.values).data(), s.N, s.IC, s.OC);
      std::vector<double> dpre(s.N * s.IC, 0.0);
      ref::gelu_backward(dpre.data(), widen(pre.values).data(), dact.data(), dpre.size());
      std::vector<double> dact_mag(s.N * s.IC, 0.0), dweight_mag(s.OC * s.IC, 0.0);
      ref::matmul_backward(dact_mag.data(), dweight_mag.data(), nullptr,
                           absolute(widen(dout.values)).data(), absolute(widen(act.values)).data(),
                           absolute(widen(weight.values)).data(), s.N, s.IC, s.OC);
      const std::vector<float> raw_dpre = d_dpre->download();
      expect_close(name("matmul16_backward_gelu dpre", type, type, s),
                   result_values(raw_dpre, type, dpre.size()), dpre, gelu_tol, rms(dact_mag));
      const std::vector<float> got_dweight = d_dweight->download();
      expect_close(name("matmul16_backward_gelu dweight", type, DType::f32, s), got_dweight,
                   plus(dweight0, dweight), 1e-5, rms(dweight_mag));
      if (s.bias) {
        expect_close(name("matmul16_backward_gelu dbias", type, DType::f32, s), d_dbias->download(),
                     plus(dbias0, dbias), 1e-5);
      }

      if (!is_cpu()) continue;
      // The fp32 fused call on the widened operands, dpre rounded once.
      auto d_pre32 = to_device(pre.values), d_act32 = to_device(act.values);
      auto d_weight32 = to_device(weight.values), d_dout32 = to_device(dout.values);
      auto d_dpre32 = empty<float>(s.N * s.IC);
      auto d_dweight32 = to_device(dweight0);
      kernels().matmul_backward_gelu(d_dpre32->get(), d_dweight32->get(), nullptr, d_dout32->get(),
                                     d_act32->get(), d_pre32->get(), d_weight32->get(), s.N, s.IC,
                                     s.OC);
      auto d_rounded = to_device(poison(s.N * s.IC));
      kernels().convert_from_f32(d_rounded->get(), type, d_dpre32->get(), s.N * s.IC);
      EXPECT_TRUE(same_bits(raw_dpre, d_rounded->download())) << name("dpre bits", type, type, s);
      EXPECT_TRUE(same_bits(got_dweight, d_dweight32->download()))
          << name("dweight bits", type, DType::f32, s);
    }
}

// Operands, bias and result one 16-bit element past an aligned address (a tensor's slice of an
// arena may sit anywhere): only 2-byte aligned, which cuBLASLt must be told (it may then decline
// the bias epilogue, and the bias kernel adds it), with the values of the aligned call.
TEST_P(Matmul16Test, OperandsAtOddElements) {
  const Shape s{37, 96, 200, true};
  uint32_t seed = 1950;
  // Each array one element in: element 0 is padding.
  const auto shifted = [](const std::vector<uint16_t>& x) {
    std::vector<uint16_t> r(x.size() + 1, 0);
    std::copy(x.begin(), x.end(), r.begin() + 1);
    return r;
  };
  for (DType type : kTypes)
    for (DType out_type : {DType::f32, type}) {
      const Rounded inp = rounded(random_normal(s.N * s.IC, seed++), type);      // (N, IC)
      const Rounded weight = rounded(random_normal(s.OC * s.IC, seed++), type);  // (OC, IC)
      const Rounded bias = rounded(random_normal(s.OC, seed++, 4.0f), type);     // (OC)
      auto d_inp = to_device(shifted(inp.bits)), d_weight = to_device(shifted(weight.bits));
      auto d_bias = to_device(shifted(bias.bits));
      const size_t out_elems = s.N * s.OC;
      // An fp32 result one float in (4-byte aligned), a 16-bit one one element in.
      auto d_out = to_device(poison(out_elems + 1));
      auto* out = reinterpret_cast<unsigned char*>(d_out->get()) + dtype_size(out_type);
      kernels().matmul16_forward(out, out_type, d_inp->get() + 1, d_weight->get() + 1,
                                 d_bias->get() + 1, type, s.N, s.IC, s.OC);
      const std::vector<float> raw = d_out->download();
      std::vector<float> got(out_elems);  // (N, OC) widened
      if (out_type == DType::f32) {
        std::copy(raw.begin() + 1, raw.end(), got.begin());
      } else {
        convert_to_f32(got.data(), reinterpret_cast<const uint16_t*>(raw.data()) + 1, out_type,
                       out_elems);
      }
      std::vector<double> ref(out_elems), magnitude(out_elems);
      const std::vector<double> bias_d = widen(bias.values);
      ref::matmul_forward(ref.data(), widen(inp.values).data(), widen(weight.values).data(),
                          bias_d.data(), s.N, s.IC, s.OC);
      ref::matmul_forward(magnitude.data(), absolute(widen(inp.values)).data(),
                          absolute(widen(weight.values)).data(), absolute(bias_d).data(), s.N, s.IC,
                          s.OC);
      expect_close(name("matmul16_forward at odd elements", type, out_type, s), got, ref,
                   result_tolerance(out_type), rms(magnitude));
      // The backward's products from odd elements too: dinp 16-bit, dweight fp32.
      const Rounded dout = rounded(random_normal(out_elems, seed++), type);  // (N, OC)
      auto d_dout = to_device(shifted(dout.bits));
      auto d_dinp = to_device(poison(s.N * s.IC + 1));
      auto d_dweight = to_device(std::vector<float>(s.OC * s.IC, 0.0f));
      auto* dinp = reinterpret_cast<unsigned char*>(d_dinp->get()) + dtype_size(type);
      kernels().matmul16_backward(dinp, type, d_dweight->get(), nullptr, d_dout->get() + 1,
                                  d_inp->get() + 1, d_weight->get() + 1, type, s.N, s.IC, s.OC,
                                  GradWrite::overwrite);
      std::vector<double> ref_dinp(s.N * s.IC, 0.0), ref_dweight(s.OC * s.IC, 0.0);
      ref::matmul_backward(ref_dinp.data(), ref_dweight.data(), nullptr, widen(dout.values).data(),
                           widen(inp.values).data(), widen(weight.values).data(), s.N, s.IC, s.OC);
      const std::vector<float> raw_dinp = d_dinp->download();
      std::vector<float> got_dinp(s.N * s.IC);  // (N, IC) widened
      convert_to_f32(got_dinp.data(), reinterpret_cast<const uint16_t*>(raw_dinp.data()) + 1, type,
                     got_dinp.size());
      expect_close(name("matmul16_backward dinp at odd elements", type, type, s), got_dinp,
                   ref_dinp, result_tolerance(type));
      expect_close(name("matmul16_backward dweight at odd elements", type, DType::f32, s),
                   d_dweight->download(), ref_dweight, 1e-5);
    }
}

// A wrong type is the caller's mistake, said with the op's name before anything runs.
TEST_P(Matmul16Test, RefusesOtherTypesAndAccumulated16BitGradients) {
  auto d_x = to_device(poison(64));
  auto d_g = to_device(std::vector<float>(64, 0.0f));
  void* x = d_x->get();
  const auto message_of = [](const auto& call) -> std::string {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::string fp32_operands = message_of(
      [&] { kernels().matmul16_forward(x, DType::f32, x, x, nullptr, DType::f32, 2, 2, 2); });
  EXPECT_NE(fp32_operands.find("matmul16_forward: operands of type fp32"), std::string::npos)
      << fp32_operands;
  const std::string mixed = message_of(
      [&] { kernels().matmul16_forward(x, DType::f16, x, x, nullptr, DType::bf16, 2, 2, 2); });
  EXPECT_NE(mixed.find("a result of type fp16 from bf16 operands"), std::string::npos) << mixed;
  const std::string accumulated = message_of([&] {
    kernels().matmul16_backward(x, DType::bf16, d_g->get(), nullptr, x, x, x, DType::bf16, 2, 2, 2,
                                GradWrite::accumulate);
  });
  EXPECT_NE(accumulated.find("matmul16_backward: a bf16 gradient asked to accumulate"),
            std::string::npos)
      << accumulated;
  const std::string gelu = message_of([&] {
    kernels().matmul16_backward_gelu(x, d_g->get(), nullptr, x, x, x, x, DType::f32, 2, 2, 2);
  });
  EXPECT_NE(gelu.find("matmul16_backward_gelu: operands of type fp32"), std::string::npos) << gelu;
  // Nothing was written: the refusals come before any work.
  EXPECT_TRUE(same_bits(d_g->download(), std::vector<float>(64, 0.0f)));
}

}  // namespace
}  // namespace tierzero::test
