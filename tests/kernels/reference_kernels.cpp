// Double-precision reference kernels (see reference_kernels.hpp). Each backward pass is derived
// independently of the CPU backend's arrangement (e.g. attention uses the full softmax Jacobian).
#include "reference_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tierzero::test::ref {

void encoder_forward(double* out, const int32_t* tokens, const double* wte, const double* wpe,
                     size_t B, size_t T, size_t C) {
  for (size_t b = 0; b < B; ++b)
    for (size_t t = 0; t < T; ++t)
      for (size_t c = 0; c < C; ++c)
        out[(b * T + t) * C + c] =
            wte[static_cast<size_t>(tokens[b * T + t]) * C + c] + wpe[t * C + c];
}

void encoder_backward(double* dwte, double* dwpe, const double* dout, const int32_t* tokens,
                      size_t B, size_t T, size_t C) {
  for (size_t b = 0; b < B; ++b)
    for (size_t t = 0; t < T; ++t)
      for (size_t c = 0; c < C; ++c) {
        const double d = dout[(b * T + t) * C + c];
        dwte[static_cast<size_t>(tokens[b * T + t]) * C + c] += d;
        dwpe[t * C + c] += d;
      }
}

void layernorm_forward(double* out, double* mean, double* rstd, const double* inp,
                       const double* weight, const double* bias, size_t N, size_t C) {
  for (size_t n = 0; n < N; ++n) {
    const double* x = inp + n * C;
    double m = 0.0;
    for (size_t c = 0; c < C; ++c) m += x[c];
    m /= static_cast<double>(C);
    double var = 0.0;
    for (size_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= static_cast<double>(C);
    const double s = 1.0 / std::sqrt(var + 1e-5);
    for (size_t c = 0; c < C; ++c) out[n * C + c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                        const double* inp, const double* weight, size_t N, size_t C) {
  const double Cd = static_cast<double>(C);
  std::vector<double> norm(C), dnorm(C);
  for (size_t n = 0; n < N; ++n) {
    const double* x = inp + n * C;
    const double* dy = dout + n * C;
    double m = 0.0;
    for (size_t c = 0; c < C; ++c) m += x[c];
    m /= Cd;
    double var = 0.0;
    for (size_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= Cd;
    const double s = 1.0 / std::sqrt(var + 1e-5);
    for (size_t c = 0; c < C; ++c) {
      norm[c] = (x[c] - m) * s;
      dnorm[c] = dy[c] * weight[c];
      dweight[c] += dy[c] * norm[c];
      dbias[c] += dy[c];
    }
    // d norm_j / d x_i = s (delta_ij - 1/C - norm_i norm_j / C)
    for (size_t i = 0; i < C; ++i) {
      double g = 0.0;
      for (size_t j = 0; j < C; ++j) {
        const double jac = s * ((i == j ? 1.0 : 0.0) - 1.0 / Cd - norm[i] * norm[j] / Cd);
        g += dnorm[j] * jac;
      }
      dinp[n * C + i] += g;
    }
  }
}

void matmul_forward(double* out, const double* inp, const double* weight, const double* bias,
                    size_t N, size_t IC, size_t OC) {
  for (size_t n = 0; n < N; ++n)
    for (size_t o = 0; o < OC; ++o) {
      double acc = bias ? bias[o] : 0.0;
      for (size_t i = 0; i < IC; ++i) acc += inp[n * IC + i] * weight[o * IC + i];
      out[n * OC + o] = acc;
    }
}

void matmul_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                     const double* inp, const double* weight, size_t N, size_t IC, size_t OC) {
  for (size_t n = 0; n < N; ++n)
    for (size_t o = 0; o < OC; ++o) {
      const double d = dout[n * OC + o];
      for (size_t i = 0; i < IC; ++i) {
        dinp[n * IC + i] += d * weight[o * IC + i];
        dweight[o * IC + i] += d * inp[n * IC + i];
      }
      if (dbias) dbias[o] += d;
    }
}

void attention_forward(double* out, double* att, const double* qkv, size_t B, size_t T, size_t C,
                       size_t NH) {
  const size_t hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  for (size_t b = 0; b < B; ++b)
    for (size_t h = 0; h < NH; ++h)
      for (size_t t = 0; t < T; ++t) {
        const double* q = qkv + (b * T + t) * 3 * C + h * hs;
        double* a = att + ((b * NH + h) * T + t) * T;
        double mx = -1e300;
        for (size_t u = 0; u <= t; ++u) {
          const double* k = qkv + (b * T + u) * 3 * C + C + h * hs;
          double dot = 0.0;
          for (size_t i = 0; i < hs; ++i) dot += q[i] * k[i];
          a[u] = dot * scale;
          mx = std::max(mx, a[u]);
        }
        double sum = 0.0;
        for (size_t u = 0; u <= t; ++u) sum += std::exp(a[u] - mx);
        for (size_t u = 0; u < T; ++u) a[u] = u <= t ? std::exp(a[u] - mx) / sum : 0.0;
        for (size_t i = 0; i < hs; ++i) {
          double acc = 0.0;
          for (size_t u = 0; u <= t; ++u)
            acc += a[u] * qkv[(b * T + u) * 3 * C + 2 * C + h * hs + i];
          out[(b * T + t) * C + h * hs + i] = acc;
        }
      }
}

void attention_backward(double* dqkv, const double* dout, const double* qkv, size_t B, size_t T,
                        size_t C, size_t NH) {
  const size_t hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> att(B * NH * T * T), out(B * T * C);
  attention_forward(out.data(), att.data(), qkv, B, T, C, NH);
  std::vector<double> datt(T), dpre(T);
  for (size_t b = 0; b < B; ++b)
    for (size_t h = 0; h < NH; ++h)
      for (size_t t = 0; t < T; ++t) {
        const double* a = att.data() + ((b * NH + h) * T + t) * T;
        const double* dy = dout + (b * T + t) * C + h * hs;
        for (size_t u = 0; u <= t; ++u) {
          double dot = 0.0;
          for (size_t i = 0; i < hs; ++i) {
            dot += dy[i] * qkv[(b * T + u) * 3 * C + 2 * C + h * hs + i];
            dqkv[(b * T + u) * 3 * C + 2 * C + h * hs + i] += a[u] * dy[i];
          }
          datt[u] = dot;
        }
        // Full softmax Jacobian: d a_u / d pre_w = a_u (delta_uw - a_w)
        for (size_t w = 0; w <= t; ++w) {
          double g = 0.0;
          for (size_t u = 0; u <= t; ++u) g += datt[u] * a[u] * ((u == w ? 1.0 : 0.0) - a[w]);
          dpre[w] = g;
        }
        for (size_t u = 0; u <= t; ++u)
          for (size_t i = 0; i < hs; ++i) {
            const size_t qi = (b * T + t) * 3 * C + h * hs + i;
            const size_t ki = (b * T + u) * 3 * C + C + h * hs + i;
            dqkv[qi] += dpre[u] * scale * qkv[ki];
            dqkv[ki] += dpre[u] * scale * qkv[qi];
          }
      }
}

namespace {
constexpr double kGeluScale = 0.79788456080286535588;  // sqrt(2 / pi)
}

void gelu_forward(double* out, const double* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double x = inp[i];
    out[i] = 0.5 * x * (1.0 + std::tanh(kGeluScale * (x + 0.044715 * x * x * x)));
  }
}

void gelu_backward(double* dinp, const double* inp, const double* dout, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double x = inp[i];
    const double u = kGeluScale * (x + 0.044715 * x * x * x);
    const double du = kGeluScale * (1.0 + 3.0 * 0.044715 * x * x);
    const double sech = 1.0 / std::cosh(u);
    const double grad = 0.5 * (1.0 + std::tanh(u)) + 0.5 * x * sech * sech * du;
    dinp[i] += grad * dout[i];
  }
}

void softmax_xent(double* losses, double* dlogits, const double* logits, const int32_t* targets,
                  double dloss, size_t N, size_t V, size_t Vp) {
  for (size_t n = 0; n < N; ++n) {
    const double* x = logits + n * Vp;
    double mx = -1e300;
    for (size_t i = 0; i < V; ++i) mx = std::max(mx, x[i]);
    double sum = 0.0;
    for (size_t i = 0; i < V; ++i) sum += std::exp(x[i] - mx);
    const size_t tgt = static_cast<size_t>(targets[n]);
    losses[n] = -(x[tgt] - mx - std::log(sum));
    if (!dlogits) continue;
    for (size_t i = 0; i < Vp; ++i) {
      const double p = i < V ? std::exp(x[i] - mx) / sum : 0.0;
      const double onehot = i == tgt ? 1.0 : 0.0;
      dlogits[n * Vp + i] = i < V ? dloss * (p - onehot) : 0.0;
    }
  }
}

void adamw_update(double* param, double* m, double* v, const double* grad, size_t n,
                  const AdamW& p) {
  const double bc1 = 1.0 - std::pow(p.beta1, static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, static_cast<double>(p.step));
  for (size_t i = 0; i < n; ++i) {
    const double g = grad[i] * p.grad_scale;
    param[i] -= p.lr * p.weight_decay * param[i];
    m[i] = p.beta1 * m[i] + (1.0 - p.beta1) * g;
    v[i] = p.beta2 * v[i] + (1.0 - p.beta2) * g * g;
    const double mhat = m[i] / bc1;
    const double vhat = v[i] / bc2;
    param[i] -= p.lr * mhat / (std::sqrt(vhat) + p.eps);
  }
}

}  // namespace tierzero::test::ref
