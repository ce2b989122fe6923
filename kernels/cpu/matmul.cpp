// Linear layer (out = inp @ weight^T + bias), forward and backward, on the CPU.
// Every product goes to OpenBLAS cblas_sgemm; beta = 1 makes the backward products accumulate in
// place, as the Kernels contract asks, without a temporary. Only the bias gradient (a column sum)
// is computed here.
//
// Threading: OpenBLAS (Debian's pthread build) runs its own thread pool, whose workers spin for a
// long time after each call, while OpenMP's workers spin between the other kernels' parallel
// regions. On a machine with few cores the two pools then steal each other's cores and a training
// step ran at about half speed. So OpenBLAS is kept at one thread and each product is split into
// one block of output columns or rows per OpenMP thread: a single pool does all the work.
#include <cblas.h>
#include <omp.h>

#include <climits>
#include <cstring>
#include <string>

#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

namespace {

// OpenBLAS takes int dimensions (blasint is 32-bit in the Debian build).
blasint to_blas(size_t v, const char* name) {
  TZ_CHECK(v <= static_cast<size_t>(INT_MAX),
           std::string("matmul: dimension ") + name + " = " + std::to_string(v) +
               " exceeds OpenBLAS's 32-bit limit",
           "split the matmul into smaller calls");
  return static_cast<blasint>(v);
}

// Below this many multiply-adds a product runs on the calling thread: starting the team would
// cost more than it saves.
constexpr size_t kMinParallelMacs = size_t{1} << 20;
// Block edges are multiples of this, so that every block keeps OpenBLAS's kernels on full tiles.
constexpr size_t kBlockAlign = 32;

struct Operand {
  const float* data;
  bool transposed;  // stored as the transpose of its role in the product
  size_t ld;        // leading dimension as stored
};

// c (M, N) = a (M, K) @ b (K, N) + beta * c, row-major, with a and b possibly stored transposed.
// The larger output dimension is split among the OpenMP threads, so the operand read once per
// thread is the smaller one.
void gemm(size_t M, size_t N, size_t K, Operand a, Operand b, float beta, float* c, size_t ldc) {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  const blasint k = to_blas(K, "K");
  const blasint lda = to_blas(a.ld, "lda");
  const blasint ldb = to_blas(b.ld, "ldb");
  const blasint ldcb = to_blas(ldc, "ldc");
  const CBLAS_TRANSPOSE ta = a.transposed ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = b.transposed ? CblasTrans : CblasNoTrans;
  const blasint m_all = to_blas(M, "M");
  const blasint n_all = to_blas(N, "N");

  const size_t threads = static_cast<size_t>(omp_get_max_threads());
  if (threads == 1 || omp_in_parallel() || M * N * K < kMinParallelMacs) {
    cblas_sgemm(CblasRowMajor, ta, tb, m_all, n_all, k, 1.0f, a.data, lda, b.data, ldb, beta, c,
                ldcb);
    return;
  }
  const bool split_rows = M >= N;
  const size_t extent = split_rows ? M : N;
  size_t block = (extent + threads - 1) / threads;
  block = (block + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
  const size_t blocks = (extent + block - 1) / block;
  const int team = static_cast<int>(blocks);  // one block per thread
#pragma omp parallel for schedule(static, 1) num_threads(team)
  for (size_t i = 0; i < blocks; ++i) {
    const size_t begin = i * block;
    const size_t count = extent - begin < block ? extent - begin : block;
    if (split_rows) {
      // Rows begin..begin+count of c come from the same rows of a (columns if a is transposed).
      const float* a_part = a.transposed ? a.data + begin : a.data + begin * a.ld;
      cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(count), n_all, k, 1.0f, a_part, lda,
                  b.data, ldb, beta, c + begin * ldc, ldcb);
    } else {
      // Columns begin..begin+count of c come from the same columns of b (rows if transposed).
      const float* b_part = b.transposed ? b.data + begin * b.ld : b.data + begin;
      cblas_sgemm(CblasRowMajor, ta, tb, m_all, static_cast<blasint>(count), k, 1.0f, a.data, lda,
                  b_part, ldb, beta, c + begin, ldcb);
    }
  }
}

}  // namespace

void matmul_forward(float* out,           // (N, OC)
                    const float* inp,     // (N, IC)
                    const float* weight,  // (OC, IC)
                    const float* bias,    // (OC) nullable
                    size_t N, size_t IC, size_t OC) {
  if (N == 0 || OC == 0) return;
  // Seeding out with the bias and using beta = 1 costs no extra pass: with beta = 0 OpenBLAS
  // zeroes out itself before accumulating into it.
  float beta = 0.0f;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < N; ++r) {
      float* out_row = out + r * OC;  // (OC)
#pragma omp simd
      for (size_t o = 0; o < OC; ++o) out_row[o] = bias[o];
    }
    beta = 1.0f;
  }
  if (IC == 0) {
    // OpenBLAS rejects a zero leading dimension; an empty product is zero.
    if (!bias) {
#pragma omp parallel for simd schedule(static)
      for (size_t i = 0; i < N * OC; ++i) out[i] = 0.0f;
    }
    return;
  }
  // out (N, OC) = inp (N, IC) @ weight^T (IC, OC)
  gemm(N, OC, IC, {inp, false, IC}, {weight, true, IC}, beta, out, OC);
}

void matmul_backward(float* dinp,          // (N, IC) += or =
                     float* dweight,       // (OC, IC) +=
                     float* dbias,         // (OC) += nullable
                     const float* dout,    // (N, OC)
                     const float* inp,     // (N, IC)
                     const float* weight,  // (OC, IC)
                     size_t N, size_t IC, size_t OC, GradWrite dinp_write) {
  const bool overwrite = dinp_write == GradWrite::overwrite;
  if (N == 0) return;
  if (OC == 0) {  // an empty product: an overwritten dinp is zero
    if (overwrite && dinp != nullptr && IC > 0) std::memset(dinp, 0, N * IC * sizeof(float));
    return;
  }
  if (IC > 0) {
    // dinp (N, IC) += dout (N, OC) @ weight (OC, IC); beta 0 (overwrite): BLAS does not read it
    if (dinp != nullptr)
      gemm(N, IC, OC, {dout, false, OC}, {weight, false, IC}, overwrite ? 0.0f : 1.0f, dinp, IC);
    // dweight (OC, IC) += dout^T (OC, N) @ inp (N, IC)
    if (dweight != nullptr) gemm(OC, IC, N, {dout, true, OC}, {inp, false, IC}, 1.0f, dweight, IC);
  }
  if (!dbias) return;
  // Column sums in slices of columns, so that each thread reads its slice of every row of dout
  // once and the inner loop runs along contiguous memory.
  constexpr size_t kSlice = 128;
  const size_t slices = (OC + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (size_t s = 0; s < slices; ++s) {
    const size_t o0 = s * kSlice;
    const size_t width = OC - o0 < kSlice ? OC - o0 : kSlice;
    float acc[kSlice] = {};  // (width) column sums of this slice
    for (size_t r = 0; r < N; ++r) {
      const float* dout_row = dout + r * OC + o0;  // (width)
#pragma omp simd
      for (size_t o = 0; o < width; ++o) acc[o] += dout_row[o];
    }
#pragma omp simd
    for (size_t o = 0; o < width; ++o) dbias[o0 + o] += acc[o];
  }
}

}  // namespace tierzero::kernels::cpu
