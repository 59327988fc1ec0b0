// Standard attention, forward and backward, in fp16 and bf16 as a framework runs it: the
// products by cuBLAS (tensor cores, fp32 accumulation), and P = softmax(S) kept in global memory
// between the two passes (N² values of the dtype per head). Two small row kernels of our own do
// the softmax and its backward; every other step is one cuBLAS call over all heads.
// In fp32 it is built from the course's own kernels instead, as stage 05 built the forward: the
// forward is stage 05's (stage 02's matmul, stage 03's softmax), and the backward stage 02's
// matmul, with transposes where a product needs Pᵀ, Vᵀ or dSᵀ (stage 02 multiplies row-major
// A·B only), and the softmax backward row kernel (algorithm.hpp: standard_backward_counted).
//
//   forward:   S = scale·Q·Kᵀ (cuBLAS) → P = softmax(S), in place (causal: 0 above the diagonal)
//              → O = P·V (cuBLAS); P stays for the backward pass
//   backward:  dV = Pᵀ·dO,  dP = dO·Vᵀ (cuBLAS) → dS = P ∘ (dP − rowsum(P ∘ dP)), in place
//              → dQ = scale·dS·K,  dK = scale·dSᵀ·Q (cuBLAS)
//
// IO (standard_backward_model_bytes): each step reads its inputs and writes its output once at
// least, so the N² tensors dominate: the backward reads P twice, writes dP, reads it back as dS
// twice: Θ(N²) bytes per head, against FlashAttention's Θ(N²·d/Bc) with no N² tensor at all.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "../02_tiled_matmul/kernels.cuh"
#include "../05_flash_v1/kernels.cuh"
#include "check.hpp"
#include "kernels.cuh"

namespace attention {
namespace {

void cublas_check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS error ") + cublasGetStatusName(status) + " in " + what);
}

cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t x = nullptr;
    cublas_check(cublasCreate(&x), "cublasCreate");
    return x;
  }();
  return h;
}

// Row-major C (M × N) = alpha·op(A)·op(B) for every head, A and B of the dtype, C of the dtype,
// sums in fp32. cuBLAS is column-major: a row-major X is a column-major Xᵀ, so this asks for
// Cᵀ = op(B)ᵀ·op(A)ᵀ. lda, ldb: the row lengths of A and B as stored.
void gemm(course::Dtype t, bool transA, bool transB, int M, int N, int K, float alpha, const void* A, int lda,
          const void* B, int ldb, void* C, int heads, long long strideA, long long strideB) {
  const cudaDataType_t type = t == course::Dtype::fp16 ? CUDA_R_16F : CUDA_R_16BF;
  const float beta = 0.0f;
  cublas_check(cublasGemmStridedBatchedEx(handle(), transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                                          transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, type, ldb, strideB,
                                          A, type, lda, strideA, &beta, C, type, N, (long long)M * N, heads,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx");
}

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__half x) { return __half2float(x); }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ T from_float(float x);
template <>
__device__ float from_float<float>(float x) { return x; }
template <>
__device__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

constexpr int kRowThreads = 256;

// (m, l) of an online softmax merged with another's (stage 04).
__device__ inline void merge(float& m, float& l, float m2, float l2) {
  const float mx = fmaxf(m, m2);
  l = (m == -INFINITY ? 0.0f : l * __expf(m - mx)) + (m2 == -INFINITY ? 0.0f : l2 * __expf(m2 - mx));
  m = mx;
}

// The sum over a block: every thread gets the total.
__device__ float block_sum(float x, float* scratch) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  const int warp = threadIdx.x / 32;
  __syncthreads();  // scratch is free (a previous call may still be reading it)
  if (threadIdx.x % 32 == 0) scratch[warp] = x;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kRowThreads / 32; ++w) total += scratch[w];
  return total;
}

// P = softmax(S) for one row a block, in place. The row goes through shared memory (as stored:
// N values of the dtype) so that S is read once and P written once. Causal: row i's keys j > i
// are 0. IO: e·N read, e·N written per row.
template <class T>
__global__ void __launch_bounds__(kRowThreads) softmax_rows(T* S, int N, bool causal) {
  extern __shared__ __align__(16) unsigned char raw[];
  T* row_s = reinterpret_cast<T*>(raw);
  __shared__ float scratch[2][kRowThreads / 32];
  T* row = S + size_t(blockIdx.x) * N;
  const int i = blockIdx.x % N, visible = causal ? i + 1 : N;
  float m = -INFINITY, l = 0.0f;
  for (int j = threadIdx.x; j < N; j += kRowThreads) {
    const T x = row[j];
    row_s[j] = x;
    if (j < visible) merge(m, l, to_float(x), 1.0f);
  }
  for (int o = 16; o > 0; o /= 2) merge(m, l, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, l, o));
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) scratch[0][warp] = m, scratch[1][warp] = l;
  __syncthreads();
  m = -INFINITY, l = 0.0f;
  for (int w = 0; w < kRowThreads / 32; ++w) merge(m, l, scratch[0][w], scratch[1][w]);
  const float inv = 1.0f / l;
  for (int j = threadIdx.x; j < N; j += kRowThreads)
    row[j] = from_float<T>(j < visible ? __expf(to_float(row_s[j]) - m) * inv : 0.0f);
}

// dS = scale·P ∘ (dP − D) with D = rowsum(P ∘ dP), one row a block, written over dP (scale = 1
// but in fp32, where it saves a pass). P and dP go through shared memory, so each is read once.
// IO: 2e·N read, e·N written per row (rows off the sector grid: the sectors two warps share are
// read once, the second request served by L1; each warp's store covers its own partial sectors).
template <class T>
__global__ void __launch_bounds__(kRowThreads) softmax_backward_rows(const T* P, T* dP, int N, float scale) {
  extern __shared__ __align__(16) unsigned char raw[];
  T* p_s = reinterpret_cast<T*>(raw);
  T* dp_s = p_s + N;
  __shared__ float scratch[kRowThreads / 32];
  const T* p = P + size_t(blockIdx.x) * N;
  T* dp = dP + size_t(blockIdx.x) * N;
  float D = 0.0f;
  for (int j = threadIdx.x; j < N; j += kRowThreads) {
    const T a = p[j], b = dp[j];
    p_s[j] = a, dp_s[j] = b;
    D += to_float(a) * to_float(b);
  }
  D = block_sum(D, scratch);
  for (int j = threadIdx.x; j < N; j += kRowThreads)
    dp[j] = from_float<T>(scale * to_float(p_s[j]) * (to_float(dp_s[j]) - D));
}

// Y = Xᵀ for each of `batch` R × C matrices (row-major, one after another), 32 × 32 tiles through
// shared memory padded by a column, as stage 05's transpose of K but for any R and C: a warp reads
// 32 (or what is left of) consecutive floats of a row of X and writes 32 of a row of Y.
// IO: X read once, Y written once.
__global__ void transpose(const float* __restrict__ X, float* __restrict__ Y, int R, int C) {
  constexpr int T = kTransposeTile;
  __shared__ float tile[T][T + 1];
  const size_t m = size_t(blockIdx.z) * R * C;
  const int r0 = blockIdx.y * T, c0 = blockIdx.x * T, tx = threadIdx.x;
  for (int r = threadIdx.y; r < T && r0 + r < R; r += blockDim.y)
    if (c0 + tx < C) tile[r][tx] = X[m + size_t(r0 + r) * C + c0 + tx];
  __syncthreads();
  for (int c = threadIdx.y; c < T && c0 + c < C; c += blockDim.y)
    if (r0 + tx < R) Y[m + size_t(c0 + c) * R + r0 + tx] = tile[tx][c];
}

void launch_transpose(const float* X, float* Y, int R, int C, int batch) {
  const dim3 grid((C + kTransposeTile - 1) / kTransposeTile, (R + kTransposeTile - 1) / kTransposeTile, batch);
  transpose<<<grid, dim3(kTransposeTile, 8)>>>(X, Y, R, C);
  CUDA_CHECK_LAUNCH();
}

// The rows (and the kernels' 64 bytes of static scratch) must fit in a block's shared memory.
template <class T>
void row_kernels_fit(int N, int values) {
  int device = 0, limit = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  course::require(std::size_t(values) * N * sizeof(T) + 64 <= std::size_t(limit),
                  "standard attention: a row of N = " + std::to_string(N) +
                      " does not fit in shared memory for its softmax kernels");
}

template <class F>
void with_type(course::Dtype t, F f) {
  if (t == course::Dtype::fp16) f(__half{});
  else if (t == course::Dtype::bf16) f(__nv_bfloat16{});
  else throw course::UsageError("standard attention (cuBLAS) takes fp16 or bf16, not " + std::string(course::name(t)));
}

void require_workspace(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  course::require(s.N > 0 && s.heads() > 0, "standard attention: empty shape " + s.text());
  if (t == course::Dtype::fp32)
    course::require(a.work != nullptr && a.T != nullptr,
                    "standard attention in fp32 needs stage 05's workspace and the N² buffer T");
  else
    course::require(a.P != nullptr && a.dS != nullptr, "standard attention needs its N² workspaces P and dS");
}

// The fp32 backward, stage 02's matmul (batched over heads) with our transposes. In stage 05's
// workspace: Kt (now Vᵀ), S (now dP, then dS), P.
void standard_backward_fp32(const Shape& s, const BackwardArgs& a) {
  require_supported(s);
  const int N = s.N, d = s.d, heads = s.heads();
  row_kernels_fit<float>(N, 2);
  const auto* Q = static_cast<const float*>(a.Q);
  const auto* K = static_cast<const float*>(a.K);
  const auto* V = static_cast<const float*>(a.V);
  const auto* dO = static_cast<const float*>(a.dO);
  float* Vt = a.work;
  float* dS = Vt + s.elements();
  const float* P = dS + std::size_t(heads) * N * N;
  launch_transpose(P, a.T, N, N, heads);                                                        // T = Pᵀ
  matmul::launch_register_blocked_batched(a.T, dO, static_cast<float*>(a.dV), N, d, N, heads);  // dV = Pᵀ·dO
  launch_transpose(V, Vt, N, d, heads);                                                         // Vt = Vᵀ
  matmul::launch_register_blocked_batched(dO, Vt, dS, N, N, d, heads);                          // dP = dO·Vᵀ
  const int bytes = int(2 * N * sizeof(float));
  CUDA_CHECK(cudaFuncSetAttribute(softmax_backward_rows<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  softmax_backward_rows<float><<<heads * N, kRowThreads, bytes>>>(P, dS, N, 1.0f / std::sqrt(float(d)));
  CUDA_CHECK_LAUNCH();                                                                          // dS, scaled
  matmul::launch_register_blocked_batched(dS, K, static_cast<float*>(a.dQ), N, d, N, heads);    // dQ = dS·K
  launch_transpose(dS, a.T, N, N, heads);                                                       // T = dSᵀ
  matmul::launch_register_blocked_batched(a.T, Q, static_cast<float*>(a.dK), N, d, N, heads);   // dK = dSᵀ·Q
}

}  // namespace

void launch_standard_forward(const Shape& s, course::Dtype t, const BackwardArgs& a, void* O) {
  require_workspace(s, t, a);
  if (t == course::Dtype::fp32)
    return launch_standard(s, static_cast<const float*>(a.Q), static_cast<const float*>(a.K),
                           static_cast<const float*>(a.V), static_cast<float*>(O), a.work);  // stage 05
  with_type(t, [&](auto tag) {
    using T = decltype(tag);
    const int N = s.N, d = s.d;
    const long long nd = (long long)N * d;
    row_kernels_fit<T>(N, 1);
    const float scale = 1.0f / std::sqrt(float(d));
    gemm(t, false, true, N, N, d, scale, a.Q, d, a.K, d, a.P, s.heads(), nd, nd);  // S = scale·Q·Kᵀ
    const int bytes = int(N * sizeof(T));
    CUDA_CHECK(cudaFuncSetAttribute(softmax_rows<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    softmax_rows<T><<<s.heads() * N, kRowThreads, bytes>>>(static_cast<T*>(a.P), N, s.causal);
    CUDA_CHECK_LAUNCH();
    gemm(t, false, false, N, d, N, 1.0f, a.P, N, a.V, d, O, s.heads(), (long long)N * N, nd);  // O = P·V
  });
}

void launch_standard_backward(const Shape& s, course::Dtype t, const BackwardArgs& a) {
  require_workspace(s, t, a);
  if (t == course::Dtype::fp32) return standard_backward_fp32(s, a);
  with_type(t, [&](auto tag) {
    using T = decltype(tag);
    const int N = s.N, d = s.d;
    const long long nd = (long long)N * d, nn = (long long)N * N;
    row_kernels_fit<T>(N, 2);
    const float scale = 1.0f / std::sqrt(float(d));
    gemm(t, true, false, N, d, N, 1.0f, a.P, N, a.dO, d, a.dV, s.heads(), nn, nd);   // dV = Pᵀ·dO
    gemm(t, false, true, N, N, d, 1.0f, a.dO, d, a.V, d, a.dS, s.heads(), nd, nd);   // dP = dO·Vᵀ
    const int bytes = int(2 * N * sizeof(T));
    CUDA_CHECK(cudaFuncSetAttribute(softmax_backward_rows<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    softmax_backward_rows<T><<<s.heads() * N, kRowThreads, bytes>>>(static_cast<const T*>(a.P), static_cast<T*>(a.dS), N, 1.0f);
    CUDA_CHECK_LAUNCH();
    gemm(t, false, false, N, d, N, scale, a.dS, N, a.K, d, a.dQ, s.heads(), nn, nd);  // dQ = scale·dS·K
    gemm(t, true, false, N, d, N, scale, a.dS, N, a.Q, d, a.dK, s.heads(), nn, nd);   // dK = scale·dSᵀ·Q
  });
}

}  // namespace attention
