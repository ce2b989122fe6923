// CudaKernels: the CUDA backend of tierzero::kernels::Kernels, and make_cuda_kernels().
// It owns the cuBLASLt handle and runs the matmuls through cuBLASLt (row-major problems mapped
// onto cuBLASLt's column-major view); every other op is forwarded to the launchers in the topic
// files (elementwise.cu, layernorm.cu, flash_attention.cu, softmax_xent.cu, llama.cu; the
// vocabulary-parallel forms next to their whole-vocabulary kernels). All work is issued on the
// stream given to set_stream(), on the device the object was made for, whatever device is current
// in the calling thread.
#include <cublasLt.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/cuda_common.cuh"
#include "tierzero/core/log.hpp"
#include "tierzero/kernels/cuda_kernels.hpp"

namespace tierzero::kernels {

namespace {

// The workspace the caller hands over is split in three: a small slot for the partial sums that
// sum_squares copies back to the host, the scratch of the deterministic gradient sums, then the
// cuBLASLt workspace. All are used only by work on this object's stream, in stream order, so they
// never need to be duplicated, and nothing is allocated during a step.
constexpr size_t kMaxReductionPartials = 1024;
constexpr size_t kReductionScratchBytes = 64 * 1024;  // >= partials, keeps what follows aligned
static_assert(kMaxReductionPartials * sizeof(double) <= kReductionScratchBytes);
// The deterministic sums' scratch (cuda_common.cuh): column sums keep slices x columns partials,
// 1 Mi floats here, which leaves N / 256 slices (the most they use) up to C = 4096 with N = 65536,
// and fewer, longer slices past that, while the column tiles alone then fill the GPU; the
// embedding gradient sorts up to 131072 positions at a time in it (2 MiB of keys and positions,
// CUB's temporary storage in the rest).
constexpr size_t kDeterministicScratchBytes = 4ull * 1024 * 1024;
// cuBLASLt's own guidance for Hopper is 32 MiB; smaller GPUs simply use less of it.
constexpr size_t kCublasLtWorkspaceBytes = 32ull * 1024 * 1024;
constexpr size_t kWorkspaceAlignment = 256;

// The largest power of two (up to 256, cuBLASLt's default assumption) dividing the address, so
// the heuristic only proposes algorithms whose alignment requirements the buffer meets: callers
// pass pointers into arenas (e.g. one layer's slice of a stacked weight) with any alignment, and
// a 16-bit operand at an odd element is only 2-byte aligned.
uint32_t pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (address % alignment != 0) alignment /= 2;
  return alignment;
}

// cuBLASLt's compute type for a MatmulPrecision. The fast types keep A, B, C and D in fp32
// (CUDA_R_32F) with an fp32 scale type, and let the tensor cores take the operands rounded to
// TF32, bf16 or fp16 (cublas_api.h: "allows down-converting inputs"; FAST_16BF and FAST_16F may
// also pick TF32), always accumulating in fp32.
cublasComputeType_t compute_type(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::fp32:
      return CUBLAS_COMPUTE_32F;
    case MatmulPrecision::tf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case MatmulPrecision::bf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case MatmulPrecision::fp16:
      return CUBLAS_COMPUTE_32F_FAST_16F;
  }
  return CUBLAS_COMPUTE_32F;
}

// cuBLASLt's name for a DType (the 16-bit linears' operands and results).
cudaDataType_t cuda_data_type(DType type) {
  switch (type) {
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

bool aligned_16_bytes(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// RAII owners for cuBLASLt descriptors, so an error thrown midway leaks nothing.
struct MatmulDesc {
  cublasLtMatmulDesc_t handle = nullptr;
  explicit MatmulDesc(cublasComputeType_t compute) {
    TZ_CUBLAS_CHECK(cublasLtMatmulDescCreate(&handle, compute, CUDA_R_32F));
  }
  ~MatmulDesc() { (void)cublasLtMatmulDescDestroy(handle); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
};

struct MatrixLayout {
  cublasLtMatrixLayout_t handle = nullptr;
  MatrixLayout(uint64_t rows, uint64_t cols, int64_t ld, cudaDataType_t type = CUDA_R_32F) {
    TZ_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&handle, type, rows, cols, ld));
  }
  ~MatrixLayout() { (void)cublasLtMatrixLayoutDestroy(handle); }
  MatrixLayout(const MatrixLayout&) = delete;
  MatrixLayout& operator=(const MatrixLayout&) = delete;
};

struct MatmulPreference {
  cublasLtMatmulPreference_t handle = nullptr;
  MatmulPreference() { TZ_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&handle)); }
  ~MatmulPreference() { (void)cublasLtMatmulPreferenceDestroy(handle); }
  MatmulPreference(const MatmulPreference&) = delete;
  MatmulPreference& operator=(const MatmulPreference&) = delete;
};

// What cuBLASLt applies to a product before storing it (its epilogue), for lt_matmul: nothing,
// the bias, GELU after the bias keeping GELU's input in aux, or GELU's gradient read from aux.
struct LtEpilogue {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // (m) of D's type, with the *BIAS kinds
  const void* aux = nullptr;   // (aux_ld, n) column-major of D's type: written by GELU_AUX*,
                               // read by DGELU
  int64_t aux_ld = 0;          // a multiple of 8, >= m (cuBLASLt's rule for GELU's aux)

  static LtEpilogue with_bias(const void* bias) {
    return bias != nullptr ? LtEpilogue{CUBLASLT_EPILOGUE_BIAS, bias} : LtEpilogue{};
  }
  bool fused() const { return kind != CUBLASLT_EPILOGUE_DEFAULT; }
};

// Everything cuBLASLt's heuristic sees of one product: its question, for the algorithm cache.
struct LtKey {
  cublasOperation_t op_a, op_b;
  size_t m, n, k, lda, ldb, ldd;
  uint32_t align_a, align_b, align_d;
  cublasLtEpilogue_t epilogue;
  uint32_t align_bias, align_aux;
  int64_t aux_ld;
  cublasComputeType_t compute;
  cudaDataType_t operands, result;
  uint64_t workspace;
  bool operator==(const LtKey&) const = default;
};
struct LtKeyHash {
  size_t operator()(const LtKey& key) const {
    const uint64_t fields[] = {static_cast<uint64_t>(key.op_a),
                               static_cast<uint64_t>(key.op_b),
                               key.m,
                               key.n,
                               key.k,
                               key.lda,
                               key.ldb,
                               key.ldd,
                               key.align_a,
                               key.align_b,
                               key.align_d,
                               static_cast<uint64_t>(key.epilogue),
                               key.align_bias,
                               key.align_aux,
                               static_cast<uint64_t>(key.aux_ld),
                               static_cast<uint64_t>(key.compute),
                               static_cast<uint64_t>(key.operands),
                               static_cast<uint64_t>(key.result),
                               key.workspace};
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (uint64_t v : fields) h = (h ^ v) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

class CudaKernels final : public Kernels {
 public:
  explicit CudaKernels(int device) : device_(device), host_partials_(kMaxReductionPartials) {
    CudaDeviceGuard guard(device_);
    int major = 0;
    TZ_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
    bf16_tensor_cores_ = major >= 8;
    TZ_CUBLAS_CHECK(cublasLtCreate(&lt_));
  }

  ~CudaKernels() override {
    // The handle was created on device_; destroy it there too. CudaDeviceGuard may throw, which
    // a destructor must not, so the switch is done by hand and failures are only cleared.
    int previous = device_;
    const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                          cudaSetDevice(device_) == cudaSuccess;
    const cublasStatus_t status = cublasLtDestroy(lt_);
    if (switched) (void)cudaSetDevice(previous);
    (void)cudaGetLastError();
    if (status != CUBLAS_STATUS_SUCCESS) {
      log::warn(std::string("cublasLtDestroy failed: ") + cuda_detail::cublas_status_name(status));
    }
  }

  CudaKernels(const CudaKernels&) = delete;
  CudaKernels& operator=(const CudaKernels&) = delete;

  const char* backend_name() const override { return "cuda"; }

  void set_stream(void* native_stream) override {
    stream_ = static_cast<cudaStream_t>(native_stream);
  }
  void* stream() const override { return stream_; }

  size_t workspace_bytes() const override {
    return kReductionScratchBytes + kDeterministicScratchBytes + kCublasLtWorkspaceBytes;
  }

  void set_workspace(void* workspace, size_t bytes) override {
    if (workspace == nullptr || bytes == 0) {
      reduction_scratch_ = nullptr;
      deterministic_scratch_ = {};
      lt_workspace_ = nullptr;
      lt_workspace_bytes_ = 0;
      return;
    }
    constexpr size_t kLeading = kReductionScratchBytes + kDeterministicScratchBytes;
    TZ_CHECK(bytes >= kLeading,
             "CUDA kernels workspace too small: " + std::to_string(bytes) +
                 " bytes, need at least " + std::to_string(kLeading),
             "allocate workspace_bytes() bytes for set_workspace()");
    TZ_CHECK(reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlignment == 0,
             "CUDA kernels workspace is not 256-byte aligned",
             "pass memory straight from the device allocator");
    reduction_scratch_ = static_cast<double*>(workspace);
    deterministic_scratch_.data = static_cast<char*>(workspace) + kReductionScratchBytes;
    deterministic_scratch_.bytes = kDeterministicScratchBytes;
    lt_workspace_ = static_cast<char*>(workspace) + kLeading;
    lt_workspace_bytes_ = bytes - kLeading;
  }

  void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       size_t B, size_t T, size_t C) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_encoder_forward(stream_, out, tokens, wte, wpe, B, T, C);
  }

  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        size_t B, size_t T, size_t C) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_encoder_backward(stream_, deterministic_scratch_, dwte, dwpe, dout, tokens, B,
                                       T, C);
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, size_t N, size_t C) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_layernorm_forward(stream_, out, mean, rstd, inp, weight, bias, N, C);
  }

  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, size_t N, size_t C) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_layernorm_backward(stream_, deterministic_scratch_, dinp, dweight, dbias,
                                         dout, inp, weight, mean, rstd, N, C);
  }
  void fused_residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd,
                                        const float* a, const float* b, const float* weight,
                                        const float* bias, size_t N, size_t C) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_fused_residual_layernorm_forward(stream_, residual, out, mean, rstd, a, b,
                                                       weight, bias, N, C);
  }

  // The 16-bit norms: the fp32 kernels instantiated for 16-bit parameters and outputs.
  void layernorm16_forward(void* out, float* mean, float* rstd, const float* inp,
                           const void* weight, const void* bias, DType type, size_t N,
                           size_t C) override {
    check_16bit_types("layernorm16_forward", type, type);
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_layernorm16_forward(stream_, out, mean, rstd, inp, weight, bias, type, N, C);
  }
  void fused_residual_layernorm16_forward(float* residual, void* out, float* mean, float* rstd,
                                          const float* a, const float* b, const void* weight,
                                          const void* bias, DType type, size_t N,
                                          size_t C) override {
    check_16bit_types("fused_residual_layernorm16_forward", type, type);
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_fused_residual_layernorm16_forward(stream_, residual, out, mean, rstd, a, b,
                                                         weight, bias, type, N, C);
  }
  void layernorm16_backward(float* dinp, void* dinp16, float* dweight, float* dbias,
                            const float* dout, const float* inp, const void* weight,
                            const float* mean, const float* rstd, DType type, size_t N,
                            size_t C) override {
    check_16bit_types("layernorm16_backward", type, type);
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_layernorm16_backward(stream_, deterministic_scratch_, dinp, dinp16, dweight,
                                           dbias, dout, inp, weight, mean, rstd, type, N, C);
  }
  void rmsnorm16_forward(void* out, float* rstd, const float* inp, const void* weight, DType type,
                         size_t N, size_t C, float eps) override {
    check_16bit_types("rmsnorm16_forward", type, type);
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_rmsnorm16_forward(stream_, out, rstd, inp, weight, type, N, C, eps);
  }
  void fused_residual_rmsnorm16_forward(float* residual, void* out, float* rstd, const float* a,
                                        const float* b, const void* weight, DType type, size_t N,
                                        size_t C, float eps) override {
    check_16bit_types("fused_residual_rmsnorm16_forward", type, type);
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_fused_residual_rmsnorm16_forward(stream_, residual, out, rstd, a, b, weight,
                                                       type, N, C, eps);
  }
  void rmsnorm16_backward(float* dinp, void* dinp16, float* dweight, const float* dout,
                          const float* inp, const void* weight, const float* rstd, DType type,
                          size_t N, size_t C) override {
    check_16bit_types("rmsnorm16_backward", type, type);
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_rmsnorm16_backward(stream_, deterministic_scratch_, dinp, dinp16, dweight,
                                         dout, inp, weight, rstd, type, N, C);
  }

  void set_matmul_precision(MatmulPrecision precision) override { precision_ = precision; }
  MatmulPrecision matmul_precision() const override { return precision_; }

  // Row-major X (r, c) is column-major X^T (c, r), so each row-major product below is written as
  // the column-major product of the transposes; see the comment on each call.
  void matmul_forward(float* out,           // (N, OC)
                      const float* inp,     // (N, IC)
                      const float* weight,  // (OC, IC)
                      const float* bias,    // (OC) nullable
                      size_t N, size_t IC, size_t OC) override {
    if (N == 0 || OC == 0) return;
    CudaDeviceGuard guard(device_);
    if (IC == 0) {
      // An empty product is zero, so out = bias (or 0), as on the CPU backend; cuBLASLt is not
      // asked for a k = 0 product.
      TZ_CUDA_CHECK(cudaMemsetAsync(out, 0, N * OC * sizeof(float), stream_));
      if (bias != nullptr) cuda_impl::launch_add_bias(stream_, out, bias, N, OC);
      return;
    }
    // out^T (OC, N) = W (OC, IC) · inp^T (IC, N); W is stored as column-major (IC, OC), hence
    // op(A) = transpose. The bias epilogue adds bias[o] to row o of out^T, i.e. column o of out.
    // cuBLASLt's bias epilogue wants a 16-byte aligned vector; a bias slice at another offset,
    // or a problem for which cuBLASLt has no algorithm with the epilogue, gets its bias from a
    // separate kernel instead.
    bool bias_done = false;
    if (bias != nullptr && reinterpret_cast<uintptr_t>(bias) % 16 == 0) {
      bias_done = lt_matmul(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight, IC, inp, IC, out, OC, 0.0f,
                            LtEpilogue::with_bias(bias));
    }
    if (!bias_done) {
      lt_matmul(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight, IC, inp, IC, out, OC, 0.0f);
      if (bias != nullptr) cuda_impl::launch_add_bias(stream_, out, bias, N, OC);
    }
  }

  void matmul_backward(float* dinp,          // (N, IC) += or =
                       float* dweight,       // (OC, IC) +=
                       float* dbias,         // (OC) += nullable
                       const float* dout,    // (N, OC)
                       const float* inp,     // (N, IC)
                       const float* weight,  // (OC, IC)
                       size_t N, size_t IC, size_t OC, GradWrite dinp_write) override {
    if (N == 0) return;
    CudaDeviceGuard guard(device_);
    backward_products(dinp, DType::f32, dweight, dout, inp, weight, DType::f32, N, IC, OC,
                      dinp_write);
    if (dbias != nullptr)
      cuda_impl::launch_bias_backward(stream_, deterministic_scratch_, dbias, dout, N, OC);
  }

  // c^T (n, m) = b (n, k) · a^T (k, m), as matmul_forward's product, with 16-bit operands.
  void gemm_16bit(float* c, const void* a, const void* b, DType type, size_t m, size_t n,
                  size_t k) override {
    TZ_CHECK(type == DType::bf16 || type == DType::f16,
             std::string("gemm_16bit: operands of type ") + dtype_name(type),
             "pass bf16 or fp16 operands");
    if (m == 0 || n == 0) return;
    CudaDeviceGuard guard(device_);
    if (k == 0) {
      TZ_CUDA_CHECK(cudaMemsetAsync(c, 0, m * n * sizeof(float), stream_));
      return;
    }
    lt_matmul(CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, b, k, a, k, c, n, 0.0f, LtEpilogue{},
              type == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F);
  }

  // out^T = gelu(W · inp^T + bias) with pre^T = W · inp^T + bias as GELU_AUX_BIAS's aux: pre is
  // column-major (OC, N) with ld OC, i.e. row-major (N, OC). cuBLASLt wants the aux's ld a
  // multiple of 8 and a 16-byte aligned bias; otherwise, or without such an algorithm, the two
  // ops run one after the other.
  void matmul_gelu_forward(float* out, float* pre, const float* inp, const float* weight,
                           const float* bias, size_t N, size_t IC, size_t OC) override {
    if (N == 0 || OC == 0) return;
    CudaDeviceGuard guard(device_);
    const bool bias_aligned = bias == nullptr || reinterpret_cast<uintptr_t>(bias) % 16 == 0;
    if (IC > 0 && OC % 8 == 0 && bias_aligned) {
      const LtEpilogue gelu{
          bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, bias, pre,
          static_cast<int64_t>(OC)};
      if (lt_matmul(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight, IC, inp, IC, out, OC, 0.0f, gelu))
        return;
    }
    matmul_forward(pre, inp, weight, bias, N, IC, OC);
    cuda_impl::launch_gelu_forward(stream_, out, pre, N * OC);
  }

  // dpre^T (IC, N) = gelu'(pre^T) * (W^T · dout^T): matmul_backward's dinp product with beta 0
  // and the DGELU epilogue reading pre (row-major (N, IC), column-major ld IC) as its aux.
  void matmul_backward_gelu(float* dpre, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* pre, const float* weight, size_t N,
                            size_t IC, size_t OC) override {
    if (N == 0) return;
    CudaDeviceGuard guard(device_);
    if (OC == 0 || IC == 0) {  // dout @ W is empty: zero, and so is gelu' times it
      if (IC > 0) TZ_CUDA_CHECK(cudaMemsetAsync(dpre, 0, N * IC * sizeof(float), stream_));
      matmul_backward(nullptr, dweight, dbias, dout, inp, weight, N, IC, OC,
                      GradWrite::accumulate);  // dbias still +=
      return;
    }
    const LtEpilogue dgelu{CUBLASLT_EPILOGUE_DGELU, nullptr, pre, static_cast<int64_t>(IC)};
    const bool fused = IC % 8 == 0 && lt_matmul(CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, weight, IC,
                                                dout, OC, dpre, IC, 0.0f, dgelu);
    if (!fused) {
      lt_matmul(CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, weight, IC, dout, OC, dpre, IC, 0.0f);
      cuda_impl::launch_gelu_backward_in_place(stream_, dpre, pre, N * IC);
    }
    matmul_backward(nullptr, dweight, dbias, dout, inp, weight, N, IC, OC, GradWrite::accumulate);
  }

  // The 16-bit linears: matmul_forward's and matmul_backward's products with both operands
  // 16-bit, natively (CUBLAS_COMPUTE_32F, whatever precision_ says), and D fp32 or 16-bit. The
  // bias (of the operands' type) goes to the epilogue when D has its type, which is the bias type
  // cuBLASLt wants; with an fp32 D, or no such algorithm, a kernel adds it after the product.
  void matmul16_forward(void* out, DType out_type, const void* inp, const void* weight,
                        const void* bias, DType type, size_t N, size_t IC, size_t OC) override {
    check_16bit_types("matmul16_forward", type, out_type);
    if (N == 0 || OC == 0) return;
    CudaDeviceGuard guard(device_);
    if (IC > 0) {
      const cudaDataType_t operands = cuda_data_type(type), result = cuda_data_type(out_type);
      if (bias != nullptr && out_type == type && aligned_16_bytes(bias) &&
          lt_matmul(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight, IC, inp, IC, out, OC, 0.0f,
                    LtEpilogue::with_bias(bias), operands, result))
        return;
      lt_matmul(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight, IC, inp, IC, out, OC, 0.0f, {},
                operands, result);
    } else {  // an empty product is zero, as on the CPU: out = the bias or 0
      TZ_CUDA_CHECK(cudaMemsetAsync(out, 0, N * OC * dtype_size(out_type), stream_));
    }
    if (bias != nullptr) cuda_impl::launch_add_bias(stream_, out, out_type, bias, type, N, OC);
  }

  void matmul16_backward(void* dinp, DType dinp_type, float* dweight, float* dbias,
                         const void* dout, const void* inp, const void* weight, DType type,
                         size_t N, size_t IC, size_t OC, GradWrite dinp_write) override {
    check_16bit_types("matmul16_backward", type, dinp_type, dinp_write);
    if (N == 0) return;
    CudaDeviceGuard guard(device_);
    backward_products(dinp, dinp_type, dweight, dout, inp, weight, type, N, IC, OC, dinp_write);
    if (dbias != nullptr)
      cuda_impl::launch_bias_backward(stream_, deterministic_scratch_, dbias, dout, type, N, OC);
  }

  // matmul_gelu_forward's epilogue with 16-bit D and aux (the aux takes D's type); without such
  // an algorithm, the product with its bias into pre, then GELU of the rounded pre.
  void matmul16_gelu_forward(void* out, void* pre, const void* inp, const void* weight,
                             const void* bias, DType type, size_t N, size_t IC,
                             size_t OC) override {
    check_16bit_types("matmul16_gelu_forward", type, type);
    if (N == 0 || OC == 0) return;
    CudaDeviceGuard guard(device_);
    const cudaDataType_t t = cuda_data_type(type);
    if (IC > 0 && OC % 8 == 0 && (bias == nullptr || aligned_16_bytes(bias))) {
      const LtEpilogue gelu{
          bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, bias, pre,
          static_cast<int64_t>(OC)};
      if (lt_matmul(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight, IC, inp, IC, out, OC, 0.0f, gelu,
                    t, t))
        return;
    }
    matmul16_forward(pre, type, inp, weight, bias, type, N, IC, OC);
    cuda_impl::launch_gelu_forward(stream_, out, pre, type, N * OC);
  }

  // matmul_backward_gelu's DGELU epilogue with a 16-bit D and aux; without it, the product
  // rounded into dpre, then GELU's gradient applied to it.
  void matmul16_backward_gelu(void* dpre, float* dweight, float* dbias, const void* dout,
                              const void* inp, const void* pre, const void* weight, DType type,
                              size_t N, size_t IC, size_t OC) override {
    check_16bit_types("matmul16_backward_gelu", type, type);
    if (N == 0) return;
    CudaDeviceGuard guard(device_);
    if (OC > 0 && IC > 0) {
      const cudaDataType_t t = cuda_data_type(type);
      const LtEpilogue dgelu{CUBLASLT_EPILOGUE_DGELU, nullptr, pre, static_cast<int64_t>(IC)};
      const bool fused = IC % 8 == 0 && lt_matmul(CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, weight, IC,
                                                  dout, OC, dpre, IC, 0.0f, dgelu, t, t);
      if (!fused) {
        lt_matmul(CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, weight, IC, dout, OC, dpre, IC, 0.0f, {}, t,
                  t);
        cuda_impl::launch_gelu_backward_in_place(stream_, dpre, pre, type, N * IC);
      }
    } else if (IC > 0) {  // dout @ W is empty: zero, and so is gelu' times it
      TZ_CUDA_CHECK(cudaMemsetAsync(dpre, 0, N * IC * dtype_size(type), stream_));
    }
    matmul16_backward(nullptr, type, dweight, dbias, dout, inp, weight, type, N, IC, OC,
                      GradWrite::overwrite);
  }

  // The fused kernels keep one logsumexp per query row and recompute the rest in the backward:
  // nothing of size T^2, no scratch. With 16-bit products (bf16 or fp16 precision) they run on
  // the tensor cores in bf16 (flash_attention_tc.cu), else in fp32 on the CUDA cores
  // (flash_attention.cu, the reference; tf32 keeps it too).
  size_t attention_saved_floats(const AttentionShape& s) const override {
    return s.B * s.n_head * s.T;
  }
  size_t attention_scratch_floats(const AttentionShape&) const override { return 0; }
  void attention_forward(float* out, float* saved, const float* qkv,
                         const AttentionShape& s) override {
    CudaDeviceGuard guard(device_);
    if (attention_on_tensor_cores())
      cuda_impl::launch_flash_attention_tc_forward(stream_, out, saved, qkv, s);
    else
      cuda_impl::launch_flash_attention_forward(stream_, out, saved, qkv, s);
  }
  void attention_backward(float* dqkv, float*, const float* dout, const float* out,
                          const float* qkv, const float* saved, const AttentionShape& s) override {
    CudaDeviceGuard guard(device_);
    if (attention_on_tensor_cores())
      cuda_impl::launch_flash_attention_tc_backward(stream_, dqkv, dout, out, qkv, saved, s);
    else
      cuda_impl::launch_flash_attention_backward(stream_, dqkv, dout, out, qkv, saved, s);
  }

  // The 16-bit attention: the same kernels reading and writing `type`, chosen as attention_forward
  // chooses (the tensor cores at a 16-bit precision, which 16-bit training sets; the CUDA-core
  // kernels at fp32, so a test reaches their 16-bit instances too).
  void attention16_forward(void* out, float* saved, const void* qkv, DType type,
                           const AttentionShape& s) override {
    check_16bit_types("attention16_forward", type, type);
    CudaDeviceGuard guard(device_);
    if (attention_on_tensor_cores())
      cuda_impl::launch_flash_attention16_tc_forward(stream_, out, saved, qkv, type, s);
    else
      cuda_impl::launch_flash_attention16_forward(stream_, out, saved, qkv, type, s);
  }
  void attention16_backward(void* dqkv, float*, const void* dout, const void* out, const void* qkv,
                            const float* saved, DType type, const AttentionShape& s) override {
    check_16bit_types("attention16_backward", type, type);
    CudaDeviceGuard guard(device_);
    if (attention_on_tensor_cores())
      cuda_impl::launch_flash_attention16_tc_backward(stream_, dqkv, dout, out, qkv, saved, type,
                                                      s);
    else
      cuda_impl::launch_flash_attention16_backward(stream_, dqkv, dout, out, qkv, saved, type, s);
  }

  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, size_t N,
                       size_t C, float eps) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_rmsnorm_forward(stream_, out, rstd, inp, weight, N, C, eps);
  }
  void fused_residual_rmsnorm_forward(float* residual, float* out, float* rstd, const float* a,
                                      const float* b, const float* weight, size_t N, size_t C,
                                      float eps) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_fused_residual_rmsnorm_forward(stream_, residual, out, rstd, a, b, weight, N,
                                                     C, eps);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                        const float* weight, const float* rstd, size_t N, size_t C) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_rmsnorm_backward(stream_, deterministic_scratch_, dinp, dweight, dout, inp,
                                       weight, rstd, N, C);
  }
  void rope_forward(float* x, size_t B, size_t T, size_t blocks, size_t block_heads,
                    size_t rotated_heads, size_t hs, size_t pos0, const RopeParams& p) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_rope(stream_, x, B, T, blocks, block_heads, rotated_heads, hs, pos0, p,
                           false);
  }
  void rope_backward(float* dx, size_t B, size_t T, size_t blocks, size_t block_heads,
                     size_t rotated_heads, size_t hs, size_t pos0, const RopeParams& p) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_rope(stream_, dx, B, T, blocks, block_heads, rotated_heads, hs, pos0, p,
                           true);
  }
  void rope16_forward(void* x, DType type, size_t B, size_t T, size_t blocks, size_t block_heads,
                      size_t rotated_heads, size_t hs, size_t pos0, const RopeParams& p) override {
    check_16bit_types("rope16_forward", type, type);
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_rope16(stream_, x, type, B, T, blocks, block_heads, rotated_heads, hs, pos0,
                             p, false);
  }
  void rope16_backward(void* dx, DType type, size_t B, size_t T, size_t blocks, size_t block_heads,
                       size_t rotated_heads, size_t hs, size_t pos0, const RopeParams& p) override {
    check_16bit_types("rope16_backward", type, type);
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_rope16(stream_, dx, type, B, T, blocks, block_heads, rotated_heads, hs, pos0,
                             p, true);
  }
  void swiglu16_forward(void* out, const void* inp, DType type, size_t N, size_t H) override {
    check_16bit_types("swiglu16_forward", type, type);
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_swiglu16_forward(stream_, out, inp, type, N, H);
  }
  void swiglu16_backward(void* dinp, const void* inp, const void* dout, DType type, size_t N,
                         size_t H) override {
    check_16bit_types("swiglu16_backward", type, type);
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_swiglu16_backward(stream_, dinp, inp, dout, type, N, H);
  }
  void swiglu_forward(float* out, const float* inp, size_t N, size_t H) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_swiglu_forward(stream_, out, inp, N, H);
  }
  void swiglu_backward(float* dinp, const float* inp, const float* dout, size_t N,
                       size_t H) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_swiglu_backward(stream_, dinp, inp, dout, N, H);
  }
  void gqa_attention_forward(float* out, float* att, const float* qkv, size_t B, size_t T,
                             size_t NH, size_t KVH, size_t hs) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_gqa_attention_forward(stream_, out, att, qkv, B, T, NH, KVH, hs);
  }
  void gqa_attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                              const float* att, size_t B, size_t T, size_t NH, size_t KVH,
                              size_t hs) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_gqa_attention_backward(stream_, dqkv, datt, dout, qkv, att, B, T, NH, KVH,
                                             hs);
  }

  void gelu_forward(float* out, const float* inp, size_t n) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_gelu_forward(stream_, out, inp, n);
  }

  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_gelu_backward(stream_, dinp, inp, dout, n);
  }

  void residual_forward(float* out, const float* a, const float* b, size_t n) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_residual_forward(stream_, out, a, b, n);
  }

  void residual_backward(float* da, float* db, const float* dout, size_t n) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_residual_backward(stream_, da, db, dout, n);
  }

  void softmax_xent_forward(float* losses, const float* logits, const int32_t* targets, size_t N,
                            size_t V, size_t Vp) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_softmax_xent(stream_, nullptr, losses, logits, targets, 0.0f, N, V, Vp);
  }

  void softmax_xent_forward_backward(float* dlogits, float* losses, const float* logits,
                                     const int32_t* targets, float dloss, size_t N, size_t V,
                                     size_t Vp) override {
    TZ_CHECK(dlogits != nullptr, "softmax_xent_forward_backward: dlogits is null",
             "pass the logits buffer itself to compute the gradient in place");
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_softmax_xent(stream_, dlogits, losses, logits, targets, dloss, N, V, Vp);
  }

  void encoder_forward_vocab_range(float* out, const int32_t* tokens, const float* wte_local,
                                   const float* wpe, size_t vocab_start, size_t vocab_count,
                                   size_t B, size_t T, size_t C) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_encoder_forward_vocab_range(stream_, out, tokens, wte_local, wpe, vocab_start,
                                                  vocab_count, B, T, C);
  }

  void encoder_backward_vocab_range(float* dwte_local, float* dwpe, const float* dout,
                                    const int32_t* tokens, size_t vocab_start, size_t vocab_count,
                                    size_t B, size_t T, size_t C) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_encoder_backward_vocab_range(stream_, deterministic_scratch_, dwte_local,
                                                   dwpe, dout, tokens, vocab_start, vocab_count, B,
                                                   T, C);
  }

  void vocab_xent_partials(float* partials, const float* logits, const int32_t* targets, size_t N,
                           size_t Vl, size_t vocab_start, size_t V) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_vocab_xent_partials(stream_, partials, logits, targets, N, Vl, vocab_start,
                                          V);
  }

  void vocab_xent_finish(float* dlogits, float* losses, const float* logits,
                         const float* all_partials, size_t ranks, const int32_t* targets,
                         float dloss, size_t N, size_t Vl, size_t vocab_start, size_t V) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_vocab_xent_finish(stream_, dlogits, losses, logits, all_partials, ranks,
                                        targets, dloss, N, Vl, vocab_start, V);
  }

  void encoder16_forward(float* out, const int32_t* tokens, const void* wte_local, const void* wpe,
                         DType type, size_t vocab_start, size_t vocab_count, size_t B, size_t T,
                         size_t C) override {
    check_16bit_types("encoder16_forward", type, type);
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_encoder16_forward(stream_, out, tokens, wte_local, wpe, type, vocab_start,
                                        vocab_count, B, T, C);
  }
  void softmax_xent16_forward_backward(void* dlogits, float* losses, const float* logits,
                                       const int32_t* targets, DType type, float dloss, size_t N,
                                       size_t V, size_t Vp) override {
    check_16bit_types("softmax_xent16_forward_backward", type, type);
    check_16bit_gradient_buffer("softmax_xent16_forward_backward", dlogits, logits, N * Vp);
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_softmax_xent16(stream_, dlogits, type, losses, logits, targets, dloss, N, V,
                                     Vp);
  }
  void vocab_xent16_finish(void* dlogits, float* losses, const float* logits,
                           const float* all_partials, size_t ranks, const int32_t* targets,
                           DType type, float dloss, size_t N, size_t Vl, size_t vocab_start,
                           size_t V) override {
    check_16bit_types("vocab_xent16_finish", type, type);
    check_16bit_gradient_buffer("vocab_xent16_finish", dlogits, logits, N * Vl);
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_vocab_xent16_finish(stream_, dlogits, type, losses, logits, all_partials,
                                          ranks, targets, dloss, N, Vl, vocab_start, V);
  }

  void adamw_update(float* param, float* m, float* v, const float* grad, size_t n,
                    const AdamWParams& p) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_adamw(stream_, param, m, v, grad, n, p);
  }
  void adamw_update_segments(float* param, float* m, float* v, const float* grad, void* copy,
                             DType copy_type, const AdamWSegment* segments, size_t num_segments,
                             const AdamWParams& p) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_adamw_segments(stream_, param, m, v, grad, copy, copy_type, segments,
                                     num_segments, p);
  }

  double sum_squares(const float* x, size_t n) override {
    if (n == 0) return 0.0;
    TZ_CHECK(reduction_scratch_ != nullptr, "CUDA sum_squares needs the kernels workspace",
             "call set_workspace() with workspace_bytes() bytes of device memory first");
    CudaDeviceGuard guard(device_);
    const size_t count = cuda_impl::launch_sum_squares_partials(stream_, reduction_scratch_,
                                                                kMaxReductionPartials, x, n);
    TZ_CUDA_CHECK(cudaMemcpyAsync(host_partials_.data(), reduction_scratch_, count * sizeof(double),
                                  cudaMemcpyDeviceToHost, stream_));
    TZ_CUDA_CHECK(cudaStreamSynchronize(stream_));
    // Summing the per-block partials on the host in a fixed order makes the result
    // deterministic run to run.
    double total = 0.0;
    for (size_t i = 0; i < count; ++i) total += host_partials_[i];
    return total;
  }

  void sum_squares_to(double* result, const float* x, size_t n) override {
    TZ_CHECK(reduction_scratch_ != nullptr, "CUDA sum_squares_to needs the kernels workspace",
             "call set_workspace() with workspace_bytes() bytes of device memory first");
    CudaDeviceGuard guard(device_);
    const size_t count = cuda_impl::launch_sum_squares_partials(stream_, reduction_scratch_,
                                                                kMaxReductionPartials, x, n);
    // The partials summed in sum_squares' host order, so both give the same bits; the scratch is
    // free again for the next launch on this stream once this kernel has read it.
    cuda_impl::launch_sum_partials_in_order(stream_, result, reduction_scratch_, count);
  }

  void scale(float* x, size_t n, float s) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_scale(stream_, x, n, s);
  }

  void transpose_blocks(void* out, const void* in, size_t X, size_t Y, size_t row_bytes) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_transpose_blocks(stream_, out, in, X, Y, row_bytes);
  }

  void convert_from_f32(void* dst, DType dst_type, const float* src, size_t n) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_convert_from_f32(stream_, dst, dst_type, src, n);
  }
  void convert_to_f32(float* dst, const void* src, DType src_type, size_t n) override {
    CudaDeviceGuard guard(device_);
    cuda_impl::launch_convert_to_f32(stream_, dst, src, src_type, n);
  }

 private:
  // The heuristic reads the bias and aux pointers' alignment, so they are set before the query.
  static void set_epilogue(MatmulDesc& desc, const LtEpilogue& e) {
    const uint32_t kind = e.kind;
    TZ_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.handle, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                   &kind, sizeof(kind)));
    if (e.bias != nullptr) {
      TZ_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.handle, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &e.bias, sizeof(e.bias)));
    }
    if (e.aux != nullptr) {
      TZ_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          desc.handle, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof(e.aux)));
      TZ_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          desc.handle, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &e.aux_ld, sizeof(e.aux_ld)));
    }
  }

  // The two products of a linear's backward (matmul_backward, matmul16_backward), with operands
  // of one type (fp32 at precision_, or 16-bit natively) and dinp of dinp_type.
  void backward_products(void* dinp, DType dinp_type, float* dweight, const void* dout,
                         const void* inp, const void* weight, DType operand_type, size_t N,
                         size_t IC, size_t OC, GradWrite dinp_write) {
    const bool overwrite = dinp_write == GradWrite::overwrite;
    if (OC == 0) {  // an empty product: an overwritten dinp is zero
      if (overwrite && dinp != nullptr && IC > 0)
        TZ_CUDA_CHECK(cudaMemsetAsync(dinp, 0, N * IC * dtype_size(dinp_type), stream_));
      return;
    }
    if (IC == 0) return;
    const cudaDataType_t operands = cuda_data_type(operand_type);
    // dinp (N, IC) += dout (N, OC) · W (OC, IC):
    // dinp^T (IC, N) += W^T (IC, OC) · dout^T (OC, N), W^T being W's storage as column-major.
    // Overwritten: beta 0, so cuBLASLt does not read it.
    if (dinp != nullptr) {
      lt_matmul(CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, weight, IC, dout, OC, dinp, IC,
                overwrite ? 0.0f : 1.0f, {}, operands, cuda_data_type(dinp_type));
    }
    // dW (OC, IC) += dout^T (OC, N) · inp (N, IC):
    // dW^T (IC, OC) += inp^T (IC, N) · dout (N, OC), dout being the transpose of its storage.
    if (dweight != nullptr) {
      lt_matmul(CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, IC, dout, OC, dweight, IC, 1.0f, {},
                operands);
    }
  }

  // D (m, n) = epilogue(op(A) · op(B) + beta · D), all column-major (the epilogue: the bias
  // broadcast over columns, GELU, GELU's gradient; see LtEpilogue). A is stored (m, k) when op_a
  // is N and (k, m) when it is T; B likewise (k, n) or (n, k). A and B are fp32, computed at
  // precision_, or both of a 16-bit `operands` type, computed natively (fp32 accumulation); D is
  // fp32, or of the operands' 16-bit type (`result`), rounded from the fp32 sum. With an
  // epilogue, returns false without doing anything when cuBLASLt has no algorithm for it (the
  // caller then does without); otherwise runs the product and returns true, or throws when there
  // is no algorithm at all.
  bool lt_matmul(cublasOperation_t op_a, cublasOperation_t op_b, size_t m, size_t n, size_t k,
                 const void* A, size_t lda, const void* B, size_t ldb, void* D, size_t ldd,
                 float beta, const LtEpilogue& epilogue = {}, cudaDataType_t operands = CUDA_R_32F,
                 cudaDataType_t result = CUDA_R_32F) {
    const bool a_transposed = op_a == CUBLAS_OP_T;
    const bool b_transposed = op_b == CUBLAS_OP_T;
    MatrixLayout a_layout(a_transposed ? k : m, a_transposed ? m : k, static_cast<int64_t>(lda),
                          operands);
    MatrixLayout b_layout(b_transposed ? n : k, b_transposed ? k : n, static_cast<int64_t>(ldb),
                          operands);
    // C and D are the same buffer with the same layout: cuBLASLt supports that in place.
    MatrixLayout d_layout(m, n, static_cast<int64_t>(ldd), result);

    MatmulPreference preference;
    const uint64_t max_workspace = lt_workspace_bytes_;
    TZ_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference.handle,
                                                         CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &max_workspace, sizeof(max_workspace)));
    const uint32_t align_a = pointer_alignment(A);
    const uint32_t align_b = pointer_alignment(B);
    const uint32_t align_d = pointer_alignment(D);
    TZ_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        preference.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    TZ_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        preference.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    TZ_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        preference.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d)));
    TZ_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        preference.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));

    // fp32 (the default) is exact fp32 arithmetic, no TF32, so the CUDA backend matches the fp32
    // reference path; the other precisions run on tensor cores (compute_type above). A faster
    // precision permits rather than requires: a product without such an algorithm (and without a
    // bias epilogue, whose caller retries without it first) runs in exact fp32, with a warning.
    // (16-bit operands: their own arithmetic, fp32 accumulation.)
    const cublasComputeType_t fast =
        operands == CUDA_R_32F ? compute_type(precision_) : CUBLAS_COMPUTE_32F;
    const cublasComputeType_t tries[] = {fast, CUBLAS_COMPUTE_32F};
    const int n_tries = fast != CUBLAS_COMPUTE_32F && !epilogue.fused() ? 2 : 1;
    for (int t = 0; t < n_tries; ++t) {
      MatmulDesc desc(tries[t]);
      const int32_t trans_a = op_a;
      const int32_t trans_b = op_b;
      TZ_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.handle, CUBLASLT_MATMUL_DESC_TRANSA,
                                                     &trans_a, sizeof(trans_a)));
      TZ_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.handle, CUBLASLT_MATMUL_DESC_TRANSB,
                                                     &trans_b, sizeof(trans_b)));
      if (epilogue.fused()) set_epilogue(desc, epilogue);
      // The heuristic's answer depends only on what the key holds, and a step asks the same few
      // dozen questions every micro-batch: each is asked once (tens of microseconds of host time,
      // on the thread that must stay ahead of the GPU).
      const LtKey key{op_a,
                      op_b,
                      m,
                      n,
                      k,
                      lda,
                      ldb,
                      ldd,
                      align_a,
                      align_b,
                      align_d,
                      epilogue.kind,
                      pointer_alignment(epilogue.bias),
                      pointer_alignment(epilogue.aux),
                      epilogue.aux_ld,
                      tries[t],
                      operands,
                      result,
                      max_workspace};
      auto cached = algorithms_.find(key);
      if (cached == algorithms_.end()) {
        cublasLtMatmulHeuristicResult_t heuristic{};
        int found = 0;
        const cublasStatus_t heuristic_status = cublasLtMatmulAlgoGetHeuristic(
            lt_, desc.handle, a_layout.handle, b_layout.handle, d_layout.handle, d_layout.handle,
            preference.handle, 1, &heuristic, &found);
        // CUBLAS_STATUS_NOT_SUPPORTED is how the heuristic says "no algorithm for this
        // configuration": report it with the shapes below rather than as a bare status.
        if (heuristic_status != CUBLAS_STATUS_NOT_SUPPORTED) TZ_CUBLAS_CHECK(heuristic_status);
        const bool have_algorithm = heuristic_status == CUBLAS_STATUS_SUCCESS && found > 0 &&
                                    heuristic.state == CUBLAS_STATUS_SUCCESS;
        std::optional<cublasLtMatmulAlgo_t> answer;
        if (have_algorithm) answer = heuristic.algo;
        cached = algorithms_.emplace(key, answer).first;
      }
      if (!cached->second) continue;
      if (t > 0 && !fallback_warned_) {
        log::warn(std::string("cuBLASLt has no ") + matmul_precision_name(precision_) +
                  " algorithm for matmul m=" + std::to_string(m) + " n=" + std::to_string(n) +
                  " k=" + std::to_string(k) + "; such products run in exact fp32 (said once)");
        fallback_warned_ = true;
      }
      const float alpha = 1.0f;
      TZ_CUBLAS_CHECK(cublasLtMatmul(lt_, desc.handle, &alpha, A, a_layout.handle, B,
                                     b_layout.handle, &beta, D, d_layout.handle, D, d_layout.handle,
                                     &*cached->second, lt_workspace_, lt_workspace_bytes_,
                                     stream_));
      return true;
    }
    if (epilogue.fused()) return false;
    const std::string arithmetic =
        operands == CUDA_R_32F
            ? std::string(matmul_precision_name(precision_))
            : std::string(operands == CUDA_R_16BF ? "bf16" : "fp16") + "-operand (" +
                  (result == CUDA_R_32F ? "fp32" : "16-bit") + " result)";
    TZ_THROW(std::string("cuBLASLt has no ") + arithmetic +
                 " algorithm for matmul m=" + std::to_string(m) + " n=" + std::to_string(n) +
                 " k=" + std::to_string(k) + " (alignment A=" + std::to_string(align_a) +
                 " B=" + std::to_string(align_b) + " D=" + std::to_string(align_d) +
                 ", workspace " + std::to_string(max_workspace) + " bytes)",
             "check that set_workspace() was given workspace_bytes() bytes; rerun with "
             "CUBLASLT_LOG_LEVEL=5 for cuBLASLt's reasons");
  }

  // 16-bit compute on a GPU with bf16 tensor cores (sm_80 and later; older ones keep fp32).
  bool attention_on_tensor_cores() const {
    return bf16_tensor_cores_ &&
           (precision_ == MatmulPrecision::bf16 || precision_ == MatmulPrecision::fp16);
  }

  int device_;
  MatmulPrecision precision_ = MatmulPrecision::fp32;
  bool bf16_tensor_cores_ = false;  // compute capability 8.0 or more
  bool fallback_warned_ = false;    // the fp32 fallback of a faster precision was logged
  // cuBLASLt's answer to each product's question (lt_matmul), or none where it had no algorithm.
  std::unordered_map<LtKey, std::optional<cublasLtMatmulAlgo_t>, LtKeyHash> algorithms_;
  cublasLtHandle_t lt_ = nullptr;
  cudaStream_t stream_ = nullptr;
  double* reduction_scratch_ = nullptr;  // (kMaxReductionPartials) device, inside the workspace
  // (kDeterministicScratchBytes) device, inside the workspace; empty until set_workspace().
  cuda_impl::DeterministicScratch deterministic_scratch_;
  void* lt_workspace_ = nullptr;  // (lt_workspace_bytes_) device, inside the workspace
  size_t lt_workspace_bytes_ = 0;
  std::vector<double> host_partials_;  // (kMaxReductionPartials) host copy for sum_squares
};

}  // namespace

std::unique_ptr<Kernels> make_cuda_kernels(int device_index) {
  int count = 0;
  TZ_CUDA_CHECK(cudaGetDeviceCount(&count));
  TZ_CHECK(device_index >= 0 && device_index < count,
           "CUDA device " + std::to_string(device_index) + " does not exist (" +
               std::to_string(count) + " visible)",
           "check the device index against nvidia-smi and CUDA_VISIBLE_DEVICES");
  return std::make_unique<CudaKernels>(device_index);
}

}  // namespace tierzero::kernels
