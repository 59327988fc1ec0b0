// Stage 02: tiling. Stage 01's threads each read 2·K floats from global memory and reuse none of
// them; here a block stages tiles of A and B on the chip and every thread reuses them.
//
// All global loads use __ldcg (L2 only), as in stage 01, so the measured SM<->L2 traffic is the
// traffic the algorithm asks for. The CPU versions, with the same tiles, are in algorithm.cpp.
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <string>

#include "algorithm.hpp"
#include "check.hpp"
#include "kernels.cuh"

namespace matmul {

// Variant 1, shared-memory tiling. A block of T×T threads (T = 32) owns a T×T tile of C. For each
// step of T along K it loads a T×T tile of A and one of B into shared memory (one float per
// thread, coalesced), synchronises, and each thread does T multiply-adds from shared memory.
// What changed from stage 01: each float loaded from global memory is used by T threads.
// IO: A is read once per block column, B once per block row: 4·(M·K·⌈N/T⌉ + K·N·⌈M/T⌉) bytes,
// T = 32 times less than the naive kernel's 8·M·N·K logical bytes.
__global__ void smem_tiled(const float* __restrict__ A, const float* __restrict__ B,
                           float* __restrict__ C, int M, int N, int K) {
  constexpr int T = kTile;
  __shared__ float As[T][T];  // As[i][k]: the A tile
  __shared__ float Bs[T][T];  // Bs[k][j]: the B tile
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int i = blockIdx.y * T + ty;
  const int j = blockIdx.x * T + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += T) {
    // Outside the matrices the tiles hold zeros, which add nothing to acc.
    As[ty][tx] = (i < M && k0 + tx < K) ? __ldcg(&A[size_t(i) * K + k0 + tx]) : 0.0f;
    Bs[ty][tx] = (k0 + ty < K && j < N) ? __ldcg(&B[size_t(k0 + ty) * N + j]) : 0.0f;
    __syncthreads();  // the tiles are complete
#pragma unroll
    for (int k = 0; k < T; ++k) acc += As[ty][k] * Bs[k][tx];  // As: broadcast; Bs: 32 banks
    __syncthreads();  // everyone is done with the tiles before they are overwritten
  }
  if (i < M && j < N) C[size_t(i) * N + j] = acc;
}

namespace {

constexpr int kThreads = (kBM / kTM) * (kBN / kTN);  // register_blocked's block: 256 threads

// Which 4 elements of a tile (COLS columns, row-major) thread t moves per step: their row (x) and
// column (y). With kVec, 4 adjacent elements of one row, one 16-byte load. Without, elements t,
// t+256, t+512 and t+768 of the tile: four 4-byte loads, in each of which a warp's 32 lanes read 32
// consecutive floats (coalesced either way).
template <bool kVec, int COLS>
__device__ int2 slice_position(int t, int q) {
  if (kVec) return make_int2(t / (COLS / 4), (t % (COLS / 4)) * 4 + q);
  return make_int2((t + kThreads * q) / COLS, (t + kThreads * q) % COLS);
}

// Thread t's 4 elements of the ROWS×COLS tile at (row0, col0) of a rows×cols matrix; zeros outside
// it. kVec needs cols % 4 == 0, so that the four are all inside or all outside.
template <bool kVec, int COLS>
__device__ void load_slice(float (&v)[4], const float* __restrict__ P, int row0, int col0, int rows,
                           int cols, int t) {
  if constexpr (kVec) {
    const int2 at = slice_position<true, COLS>(t, 0);
    const int r = row0 + at.x, c = col0 + at.y;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < rows && c < cols) x = __ldcg(reinterpret_cast<const float4*>(P + size_t(r) * cols + c));
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int2 at = slice_position<false, COLS>(t, q);
      const int r = row0 + at.x, c = col0 + at.y;
      v[q] = (r < rows && c < cols) ? __ldcg(P + size_t(r) * cols + c) : 0.0f;
    }
  }
}

// Stores 4 adjacent results of row r, columns c..c+3: one 16-byte store with kVec (cols % 4 == 0),
// otherwise four 4-byte stores, each of which a warp spreads over 16-byte strides.
template <bool kVec>
__device__ void store4(float* __restrict__ P, int r, int c, int cols, float4 v) {
  float* p = P + size_t(r) * cols + c;
  if (kVec) {
    if (c < cols) *reinterpret_cast<float4*>(p) = v;
  } else {
    if (c + 0 < cols) p[0] = v.x;
    if (c + 1 < cols) p[1] = v.y;
    if (c + 2 < cols) p[2] = v.z;
    if (c + 3 < cols) p[3] = v.w;
  }
}

}  // namespace

// Variant 2, register blocking. A block of 256 threads owns a BM×BN = 128×128 tile of C, and each
// thread an 8×8 sub-tile that stays in registers for the whole K loop. Per step of k, a thread
// reads 8 values of A and 8 of B from shared memory (four 16-byte loads) and does 64
// multiply-adds with them: the shared-memory traffic per FMA falls 8x, and the FMA units, not
// shared memory, set the pace.
// Also: the A tile is stored transposed (As[k][m]) so that a thread's 8 values of A are
// contiguous; the next tiles are loaded from global memory into registers while the current ones
// are used (double-buffered shared memory, one barrier per step); 16-byte global loads and stores
// when K and N are multiples of 4. Otherwise (kVec false) 4-byte loads, still coalesced, and 4-byte
// stores; that path needs 167 registers, so it runs one block per SM instead of two.
// IO: 4·(M·K·⌈N/128⌉ + K·N·⌈M/128⌉) bytes read: 4x less than variant 1, 80x less than the
// coalesced naive kernel. (Without 16-byte stores, C's sectors are written four times.)
// kBatch (stage 05): blockIdx.z picks one of a batch of products stored one after another, seen as
// one tall matrix each: product z uses rows z·M.. of A and C and rows z·K.. of B. (Moving the
// pointers instead would keep three 64-bit pointers in registers, and the kernel would spill.)
template <bool kVec, bool kBatch = false>
__global__ void __launch_bounds__(kThreads, kVec ? 2 : 1)
    register_blocked(const float* __restrict__ A, const float* __restrict__ B,
                     float* __restrict__ C, int M, int N, int K) {
  constexpr int BM = kBM, BN = kBN, BK = kBK, TM = kTM, TN = kTN;
  static_assert(TM == 8 && TN == 8, "a thread's sub-tile is two 4-wide halves in each direction");
  static_assert(BM * BK == 4 * kThreads && BK * BN == 4 * kThreads,
                "per step, each thread moves 4 floats of A and 4 of B");
  // +4 floats of padding per row of As makes the transposing stores conflict-free.
  __shared__ __align__(16) float As[2][BK][BM + 4];
  __shared__ __align__(16) float Bs[2][BK][BN];

  const int tid = threadIdx.x;
  const int tx = tid % (BN / TN), ty = tid / (BN / TN);  // 16 × 16 threads
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int z = kBatch ? blockIdx.z : 0;
  const int a_rows = (z + 1) * M, b_rows = (z + 1) * K;  // where this product's A (C) and B end

  float a_next[4], b_next[4];  // this thread's slices of the next tiles of A and B
  auto load_tiles = [&](int k0) {  // global -> registers
    load_slice<kVec, BK>(a_next, A, z * M + m0, k0, a_rows, K, tid);
    load_slice<kVec, BN>(b_next, B, z * K + k0, n0, b_rows, N, tid);
  };
  auto store_tiles = [&](int buf) {  // registers -> shared memory, A transposed
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int2 a = slice_position<kVec, BK>(tid, q);
      As[buf][a.y][a.x] = a_next[q];
      if (!kVec) {
        const int2 b = slice_position<false, BN>(tid, q);
        Bs[buf][b.x][b.y] = b_next[q];
      }
    }
    if (kVec) {  // 4 adjacent floats of a row of Bs: one 16-byte store
      const int2 b = slice_position<true, BN>(tid, 0);
      *reinterpret_cast<float4*>(&Bs[buf][b.x][b.y]) =
          make_float4(b_next[0], b_next[1], b_next[2], b_next[3]);
    }
  };

  // This thread's rows of C are ty*4 + {0..3} and BM/2 + ty*4 + {0..3}; its columns likewise with
  // tx. Two halves 64 apart (not 8 adjacent) keep a warp's shared-memory loads conflict-free.
  float acc[TM][TN] = {};
  load_tiles(0);
  store_tiles(0);
  __syncthreads();
  int buf = 0;
  for (int k0 = 0; k0 < K; k0 += BK) {
    const bool more = k0 + BK < K;
    if (more) load_tiles(k0 + BK);  // in flight while we compute on the current tiles
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float4 a_lo = *reinterpret_cast<const float4*>(&As[buf][k][ty * 4]);
      const float4 a_hi = *reinterpret_cast<const float4*>(&As[buf][k][BM / 2 + ty * 4]);
      const float4 b_lo = *reinterpret_cast<const float4*>(&Bs[buf][k][tx * 4]);
      const float4 b_hi = *reinterpret_cast<const float4*>(&Bs[buf][k][BN / 2 + tx * 4]);
      const float a[TM] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w, a_hi.x, a_hi.y, a_hi.z, a_hi.w};
      const float b[TN] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w, b_hi.x, b_hi.y, b_hi.z, b_hi.w};
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    // The other buffer was last read before the previous barrier, so it is free to overwrite.
    if (more) store_tiles(buf ^ 1);
    __syncthreads();
    buf ^= 1;
  }

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int row = z * M + m0 + (i < 4 ? ty * 4 + i : BM / 2 + ty * 4 + (i - 4));
    if (row >= a_rows) continue;
    store4<kVec>(C, row, n0 + tx * 4, N, make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
    store4<kVec>(C, row, n0 + BN / 2 + tx * 4, N,
                 make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]));
  }
}

namespace {
dim3 grid_for(int M, int N, int BM, int BN, int batch = 1) {
  course::require(M >= 1 && N >= 1 && batch >= 1 && batch <= 65535,
                  "matmul needs M, N >= 1 and 1 to 65535 products in a batch");
  const dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM, batch);
  course::require(grid.y <= 65535u, "M too large for this kernel's grid (at most " +
                                        std::to_string(65535 * BM) + ")");
  return grid;
}

void cublas_check(cublasStatus_t status, const char* expression) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLAS error ") + cublasGetStatusName(status) + " in " +
                             expression);
  }
}
}  // namespace

void launch_smem_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
  course::require(K <= INT_MAX - kTile, "K too large for the kernel's loop counter");
  smem_tiled<<<grid_for(M, N, kTile, kTile), dim3(kTile, kTile)>>>(A, B, C, M, N, K);
  CUDA_CHECK_LAUNCH();
}

void launch_register_blocked_batched(const float* A, const float* B, float* C, int M, int N, int K,
                                     int batch) {
  course::require(K >= 1 && K <= INT_MAX - kBK, "K out of range for the kernel's loop counter");
  course::require(double(batch) * std::max(M, K) + std::max(kBM, kBK) <= INT_MAX,
                  "batch too large: batch·M and batch·K must stay below 2^31");
  const dim3 grid = grid_for(M, N, kBM, kBN, batch), block(kThreads);
  const bool vec = register_blocked_vectorized(N, K);
  if (batch == 1) {
    vec ? register_blocked<true><<<grid, block>>>(A, B, C, M, N, K)
        : register_blocked<false><<<grid, block>>>(A, B, C, M, N, K);
  } else {
    vec ? register_blocked<true, true><<<grid, block>>>(A, B, C, M, N, K)
        : register_blocked<false, true><<<grid, block>>>(A, B, C, M, N, K);
  }
  CUDA_CHECK_LAUNCH();
}

void launch_register_blocked(const float* A, const float* B, float* C, int M, int N, int K) {
  launch_register_blocked_batched(A, B, C, M, N, K, 1);
}

void launch_cublas(const float* A, const float* B, float* C, int M, int N, int K) {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    cublas_check(cublasCreate(&h), "cublasCreate");
    cublas_check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");  // no TF32
    return h;
  }();
  // cuBLAS is column-major: a row-major C = A·B is the column-major Cᵀ = Bᵀ·Aᵀ.
  const float alpha = 1.0f, beta = 0.0f;
  cublas_check(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, N, A, K, &beta,
                           C, N),
               "cublasSgemm");
}

}  // namespace matmul
