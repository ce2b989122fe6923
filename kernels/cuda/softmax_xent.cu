// Fused softmax + cross-entropy on CUDA, forward only or forward + backward, over the whole
// vocabulary or (vocabulary-parallel, two passes) over one rank's columns. The (N, Vp) logits
// are the largest activation in GPT-2, so the backward writes its gradient over the logits in
// place; one block per row reads the whole row (max, sum of exponentials, target logit) before
// any thread writes, which is what makes dlogits == logits safe. 16-bit training writes the
// gradient in 16 bits (D, a storage16.cuh type) into a buffer of its own.
#include <math_constants.h>

#include <string>

#include "cuda/cuda_common.cuh"
#include "cuda/storage16.cuh"

namespace tierzero::kernels::cuda_impl {

namespace {

constexpr int kSoftmaxBlockSize = 512;  // rows are long (V = 50257): more loads in flight

template <typename D>
__global__ void __launch_bounds__(kSoftmaxBlockSize)
    softmax_xent_kernel(D* dlogits,     // (N, Vp) nullable; may alias the logits when D is float
                        float* losses,  // (N)
                        const float* logits,     // (N, Vp)
                        const int32_t* targets,  // (N)
                        float dloss, size_t V, size_t Vp) {
  __shared__ float scratch[kWarpSize];
  const size_t row = blockIdx.x;
  const float* x = logits + row * Vp;  // (Vp)

  float max_logit = -CUDART_INF_F;
  for (size_t i = threadIdx.x; i < V; i += blockDim.x) max_logit = fmaxf(max_logit, x[i]);
  max_logit = block_max(max_logit, scratch);

  float sum = 0.0f;
  for (size_t i = threadIdx.x; i < V; i += blockDim.x) sum += expf(x[i] - max_logit);
  sum = block_sum(sum, scratch);

  // An out-of-range target (the caller validates, so this is a bug upstream) gives a NaN loss
  // instead of a read outside the row.
  const int32_t target = targets[row];
  const bool target_valid = target >= 0 && static_cast<size_t>(target) < V;
  if (threadIdx.x == 0) {
    const float target_logit = target_valid ? x[target] : CUDART_NAN_F;
    // target - max first (as the CPU backend does): exact or singly rounded, so large logits do
    // not cost the loss its precision.
    losses[row] = logf(sum) - (target_logit - max_logit);
  }
  if (dlogits == nullptr) return;  // block-uniform

  // In place: thread 0 must have read x[target] before any thread overwrites it.
  __syncthreads();
  D* dx = dlogits + row * Vp;  // (Vp)
  const float inv_sum = 1.0f / sum;
  const size_t target_index = target_valid ? static_cast<size_t>(target) : Vp;
  // Each thread reads and writes only its own columns from here on.
  for (size_t i = threadIdx.x; i < Vp; i += blockDim.x) {
    if (i < V) {
      const float p = expf(x[i] - max_logit) * inv_sum;
      dx[i] = from_f32<D>(dloss * (p - (i == target_index ? 1.0f : 0.0f)));
    } else {
      dx[i] = from_f32<D>(0.0f);
    }
  }
}

// ---- vocabulary-parallel form: this rank holds the logit columns vocab_start..vocab_start+Vl,
// of which the first `real` are real vocabulary and the rest padding. Pass 1 reduces each row of
// this rank's columns to {max, sum of exp(logit - max), target logit or 0}; the caller all-gathers
// these in rank order; pass 2 combines them into the loss and the gradient of these columns.

__global__ void __launch_bounds__(kSoftmaxBlockSize)
    vocab_xent_partials_kernel(float* partials,         // (N, 3)
                               const float* logits,     // (N, Vl)
                               const int32_t* targets,  // (N)
                               size_t Vl, size_t real, size_t vocab_start, size_t V) {
  __shared__ float scratch[kWarpSize];
  const size_t row = blockIdx.x;
  const float* x = logits + row * Vl;  // (Vl)

  float max_logit = -CUDART_INF_F;  // stays -inf without real columns
  for (size_t i = threadIdx.x; i < real; i += blockDim.x) max_logit = fmaxf(max_logit, x[i]);
  max_logit = block_max(max_logit, scratch);

  float sum = 0.0f;  // stays 0 without real columns
  for (size_t i = threadIdx.x; i < real; i += blockDim.x) sum += expf(x[i] - max_logit);
  sum = block_sum(sum, scratch);

  if (threadIdx.x == 0) {
    // An out-of-range target (the caller validates, so this is a bug upstream) gives every rank
    // a NaN target logit and so a NaN loss, as softmax_xent_kernel does.
    const int32_t target = targets[row];
    float target_logit = CUDART_NAN_F;
    if (target >= 0 && static_cast<size_t>(target) < V) {
      const size_t column = static_cast<size_t>(target) - vocab_start;  // wraps when below
      target_logit = column < Vl ? x[column] : 0.0f;
    }
    float* p = partials + row * 3;  // (3)
    p[0] = max_logit;
    p[1] = sum;
    p[2] = target_logit;
  }
}

template <typename D>
__global__ void __launch_bounds__(kSoftmaxBlockSize)
    vocab_xent_finish_kernel(D* dlogits,  // (N, Vl) nullable; may alias the logits when D is float
                             float* losses,                         // (N)
                             const float* logits,                   // (N, Vl)
                             const float* all_partials,             // (ranks, N, 3)
                             size_t ranks, const int32_t* targets,  // (N)
                             float dloss, size_t N, size_t Vl, size_t real, size_t vocab_start,
                             size_t V) {
  __shared__ float shared_max;
  __shared__ float shared_inv_sum;
  // This row's partials, one rank per thread, then combined by thread 0 from shared memory (the
  // launcher checks ranks <= kSoftmaxBlockSize). (Thread 0 reading them from global memory in a
  // loop over the ranks read past the partials on an H200 at 4 ranks, compute-sanitizer showed.)
  __shared__ float row_max[kSoftmaxBlockSize];
  __shared__ float row_sum[kSoftmaxBlockSize];
  __shared__ float row_target[kSoftmaxBlockSize];
  const size_t row = blockIdx.x;
  const auto rank_count = static_cast<unsigned>(ranks);
  if (threadIdx.x < rank_count) {
    const float* p = all_partials + (static_cast<size_t>(threadIdx.x) * N + row) * 3;  // (3)
    row_max[threadIdx.x] = p[0];
    row_sum[threadIdx.x] = p[1];
    row_target[threadIdx.x] = p[2];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float max_logit = -CUDART_INF_F;
    for (unsigned r = 0; r < rank_count; ++r) max_logit = fmaxf(max_logit, row_max[r]);
    float sum = 0.0f;
    float target_logit = 0.0f;  // exactly one rank holds the target, the others add 0
    for (unsigned r = 0; r < rank_count; ++r) {
      // A rank without real columns (m = -inf, s = 0) adds nothing.
      if (row_sum[r] > 0.0f) sum += row_sum[r] * expf(row_max[r] - max_logit);
      target_logit += row_target[r];
    }
    // target - max first, as softmax_xent_kernel does.
    losses[row] = logf(sum) - (target_logit - max_logit);
    shared_max = max_logit;
    shared_inv_sum = 1.0f / sum;
  }
  if (dlogits == nullptr) return;  // block-uniform
  __syncthreads();
  const float max_logit = shared_max;
  const float inv_sum = shared_inv_sum;
  const int32_t target = targets[row];
  const size_t target_column = target >= 0 && static_cast<size_t>(target) < V
                                   ? static_cast<size_t>(target) - vocab_start  // wraps when below
                                   : Vl;
  const float* x = logits + row * Vl;  // (Vl)
  D* dx = dlogits + row * Vl;          // (Vl), possibly the same memory as x
  // Each thread reads and writes only its own columns, so in place is safe.
  for (size_t i = threadIdx.x; i < Vl; i += blockDim.x) {
    if (i < real) {
      const float p = expf(x[i] - max_logit) * inv_sum;
      dx[i] = from_f32<D>(dloss * (p - (i == target_column ? 1.0f : 0.0f)));
    } else {
      dx[i] = from_f32<D>(0.0f);
    }
  }
}

// How many of a rank's Vl columns, starting at global column vocab_start, are real (< V).
size_t real_columns(size_t Vl, size_t vocab_start, size_t V) {
  if (vocab_start >= V) return 0;
  return V - vocab_start < Vl ? V - vocab_start : Vl;
}

void check_vocab_xent_args(const char* what, size_t N, size_t V) {
  TZ_CHECK(V > 0, std::string(what) + ": the real vocabulary size V is 0",
           "pass the real (unpadded) vocabulary size");
  TZ_CHECK(N <= kMaxGridX,
           std::string(what) + ": too many rows for one launch: " + std::to_string(N),
           "split the batch into smaller micro-batches");
}

template <typename D>
void softmax_xent(cudaStream_t stream, D* dlogits, float* losses, const float* logits,
                  const int32_t* targets, float dloss, size_t N, size_t V, size_t Vp) {
  TZ_CHECK(
      V > 0 && V <= Vp,
      "softmax_xent: need 0 < V <= Vp, got V=" + std::to_string(V) + " Vp=" + std::to_string(Vp),
      "Vp is the padded vocabulary size and must be at least the real vocabulary size V");
  if (N == 0) return;
  TZ_CHECK(N <= kMaxGridX, "softmax_xent: too many rows for one launch: " + std::to_string(N),
           "split the batch into smaller micro-batches");
  softmax_xent_kernel<<<static_cast<unsigned>(N), kSoftmaxBlockSize, 0, stream>>>(
      dlogits, losses, logits, targets, dloss, V, Vp);
  TZ_CUDA_CHECK_LAUNCH();
}

template <typename D>
void vocab_xent_finish(cudaStream_t stream, D* dlogits, float* losses, const float* logits,
                       const float* all_partials, size_t ranks, const int32_t* targets, float dloss,
                       size_t N, size_t Vl, size_t vocab_start, size_t V) {
  check_vocab_xent_args("vocab_xent_finish", N, V);
  TZ_CHECK(ranks > 0, "vocab_xent_finish: no partials (ranks is 0)",
           "pass every rank's partials, all-gathered in rank order");
  TZ_CHECK(ranks <= static_cast<size_t>(kSoftmaxBlockSize),
           "vocab_xent_finish: " + std::to_string(ranks) + " vocabulary ranks, more than " +
               std::to_string(kSoftmaxBlockSize) + " the kernel combines",
           "use at most that many tensor-parallel ranks");
  if (N == 0) return;
  vocab_xent_finish_kernel<<<static_cast<unsigned>(N), kSoftmaxBlockSize, 0, stream>>>(
      dlogits, losses, logits, all_partials, ranks, targets, dloss, N, Vl,
      real_columns(Vl, vocab_start, V), vocab_start, V);
  TZ_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_softmax_xent(cudaStream_t stream, float* dlogits, float* losses, const float* logits,
                         const int32_t* targets, float dloss, size_t N, size_t V, size_t Vp) {
  softmax_xent(stream, dlogits, losses, logits, targets, dloss, N, V, Vp);
}

void launch_softmax_xent16(cudaStream_t stream, void* dlogits, DType type, float* losses,
                           const float* logits, const int32_t* targets, float dloss, size_t N,
                           size_t V, size_t Vp) {
  with_16bit_type(type, [&](auto d) {
    softmax_xent(stream, static_cast<decltype(d)*>(dlogits), losses, logits, targets, dloss, N, V,
                 Vp);
  });
}

void launch_vocab_xent_partials(cudaStream_t stream, float* partials, const float* logits,
                                const int32_t* targets, size_t N, size_t Vl, size_t vocab_start,
                                size_t V) {
  check_vocab_xent_args("vocab_xent_partials", N, V);
  if (N == 0) return;
  vocab_xent_partials_kernel<<<static_cast<unsigned>(N), kSoftmaxBlockSize, 0, stream>>>(
      partials, logits, targets, Vl, real_columns(Vl, vocab_start, V), vocab_start, V);
  TZ_CUDA_CHECK_LAUNCH();
}

void launch_vocab_xent_finish(cudaStream_t stream, float* dlogits, float* losses,
                              const float* logits, const float* all_partials, size_t ranks,
                              const int32_t* targets, float dloss, size_t N, size_t Vl,
                              size_t vocab_start, size_t V) {
  vocab_xent_finish(stream, dlogits, losses, logits, all_partials, ranks, targets, dloss, N, Vl,
                    vocab_start, V);
}

void launch_vocab_xent16_finish(cudaStream_t stream, void* dlogits, DType type, float* losses,
                                const float* logits, const float* all_partials, size_t ranks,
                                const int32_t* targets, float dloss, size_t N, size_t Vl,
                                size_t vocab_start, size_t V) {
  with_16bit_type(type, [&](auto d) {
    vocab_xent_finish(stream, static_cast<decltype(d)*>(dlogits), losses, logits, all_partials,
                      ranks, targets, dloss, N, Vl, vocab_start, V);
  });
}

}  // namespace tierzero::kernels::cuda_impl
