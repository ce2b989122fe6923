// Fused softmax + cross-entropy on CUDA, forward only or forward + backward. The (N, Vp) logits
// are the largest activation in GPT-2, so the backward writes its gradient over the logits in
// place; one block per row reads the whole row (max, sum of exponentials, target logit) before
// any thread writes, which is what makes dlogits == logits safe.
#include <math_constants.h>

#include "cuda/cuda_common.cuh"

namespace tierzero::kernels::cuda_impl {

namespace {

constexpr int kSoftmaxBlockSize = 512;  // rows are long (V = 50257): more loads in flight

__global__ void __launch_bounds__(kSoftmaxBlockSize)
    softmax_xent_kernel(float* dlogits,          // (N, Vp) nullable; may alias logits
                        float* losses,           // (N)
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
  float* dx = dlogits + row * Vp;  // (Vp)
  const float inv_sum = 1.0f / sum;
  const size_t target_index = target_valid ? static_cast<size_t>(target) : Vp;
  // Each thread reads and writes only its own columns from here on.
  for (size_t i = threadIdx.x; i < Vp; i += blockDim.x) {
    if (i < V) {
      const float p = expf(x[i] - max_logit) * inv_sum;
      dx[i] = dloss * (p - (i == target_index ? 1.0f : 0.0f));
    } else {
      dx[i] = 0.0f;
    }
  }
}

}  // namespace

void launch_softmax_xent(cudaStream_t stream, float* dlogits, float* losses, const float* logits,
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

}  // namespace tierzero::kernels::cuda_impl
