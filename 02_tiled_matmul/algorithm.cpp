#include "algorithm.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace matmul {

namespace {

using Global = course::GlobalArray<const float>;

// Loads the ROWS×COLS tile at (row0, col0) of a rows×cols matrix the way a kernel's warps do: one
// request per `width` consecutive elements of the tile (numbered row-major), of which those inside
// the matrix are read. Elements outside are zero.
void load_tile(const Global& g, int row0, int col0, int rows, int cols, int ROWS, int COLS,
               int width, std::vector<float>& tile) {
  tile.assign(std::size_t(ROWS) * COLS, 0.0f);
  std::vector<std::size_t> index, where;
  std::vector<float> values(width);
  for (int e0 = 0; e0 < ROWS * COLS; e0 += width) {
    index.clear();
    where.clear();
    for (int e = e0; e < e0 + width; ++e) {
      const int r = row0 + e / COLS, c = col0 + e % COLS;
      if (r < rows && c < cols) {
        index.push_back(std::size_t(r) * cols + c);
        where.push_back(e);
      }
    }
    if (index.empty()) continue;
    g.warp_load(index.data(), int(index.size()), values.data());
    for (std::size_t j = 0; j < where.size(); ++j) tile[where[j]] = values[j];
  }
}

// c_tile (BM×BN) += a_tile (BM×BK) · b_tile (BK×BN), each element accumulated in k order.
void multiply_add(const std::vector<float>& a_tile, const std::vector<float>& b_tile,
                  std::vector<float>& c_tile, int BM, int BN, int BK) {
  for (int r = 0; r < BM; ++r)
    for (int c = 0; c < BN; ++c)
      for (int k = 0; k < BK; ++k)
        c_tile[r * BN + c] = std::fma(a_tile[r * BK + k], b_tile[k * BN + c], c_tile[r * BN + c]);
}

}  // namespace

// smem_tiled: blocks of 32×32 threads; warp ty loads row ty of each 32×32 tile (32 consecutive
// floats) and stores row ty of the block's tile of C.
course::IoCount tiled_counted(const float* A, const float* B, float* C, int M, int N, int K) {
  constexpr int T = kTile;
  course::Hbm hbm;
  const auto gA = hbm.wrap(A, std::size_t(M) * K);
  const auto gB = hbm.wrap(B, std::size_t(K) * N);
  const auto gC = hbm.wrap(C, std::size_t(M) * N);
  std::vector<float> a_tile, b_tile, c_tile(T * T);
  for (int m0 = 0; m0 < M; m0 += T) {
    for (int n0 = 0; n0 < N; n0 += T) {
      std::fill(c_tile.begin(), c_tile.end(), 0.0f);
      for (int k0 = 0; k0 < K; k0 += T) {
        load_tile(gA, m0, k0, M, K, T, T, course::kWarpSize, a_tile);
        load_tile(gB, k0, n0, K, N, T, T, course::kWarpSize, b_tile);
        multiply_add(a_tile, b_tile, c_tile, T, T, T);
      }
      for (int r = 0; r < std::min(T, M - m0); ++r) {
        gC.store(std::size_t(m0 + r) * N + n0, std::min(T, N - n0), &c_tile[r * T]);
      }
    }
  }
  return hbm.count();
}

// register_blocked: blocks of 256 threads; per step each thread moves 4 floats of each tile, so a
// warp's request is 128 consecutive tile elements (16-byte loads) or 32 (4-byte loads). Thread
// (tx, ty) of the 16×16 grid stores rows ty*4+{0..3} and 64+ty*4+{0..3}, columns tx*4+{0..3} and
// 64+tx*4+{0..3}; a warp is two values of ty.
course::IoCount register_blocked_counted(const float* A, const float* B, float* C, int M, int N,
                                         int K) {
  constexpr int BM = kBM, BN = kBN, BK = kBK, kThreads = (kBM / kTM) * (kBN / kTN);
  const bool vec = register_blocked_vectorized(N, K);
  const int width = vec ? 4 * course::kWarpSize : course::kWarpSize;
  course::Hbm hbm;
  const auto gA = hbm.wrap(A, std::size_t(M) * K);
  const auto gB = hbm.wrap(B, std::size_t(K) * N);
  const auto gC = hbm.wrap(C, std::size_t(M) * N);
  std::vector<float> a_tile, b_tile, c_tile(std::size_t(BM) * BN);
  std::vector<std::size_t> index;
  std::vector<float> values;
  for (int m0 = 0; m0 < M; m0 += BM) {
    for (int n0 = 0; n0 < N; n0 += BN) {
      std::fill(c_tile.begin(), c_tile.end(), 0.0f);
      for (int k0 = 0; k0 < K; k0 += BK) {
        load_tile(gA, m0, k0, M, K, BM, BK, width, a_tile);
        load_tile(gB, k0, n0, K, N, BK, BN, width, b_tile);
        multiply_add(a_tile, b_tile, c_tile, BM, BN, BK);
      }
      // The epilogue: for each of the thread's 8 rows and 2 column halves, one 16-byte store, or
      // four 4-byte stores (q), per warp.
      for (int w = 0; w < kThreads / course::kWarpSize; ++w) {
        for (int i = 0; i < kTM; ++i) {
          for (int half = 0; half < 2; ++half) {
            for (int q = 0; q < (vec ? 1 : 4); ++q) {
              index.clear();
              values.clear();
              for (int lane = 0; lane < course::kWarpSize; ++lane) {
                const int tx = lane % 16, ty = 2 * w + lane / 16;
                const int r = (i < 4 ? ty * 4 + i : BM / 2 + ty * 4 + (i - 4));
                const int c = half * (BN / 2) + tx * 4;
                for (int d = vec ? 0 : q; d < (vec ? 4 : q + 1); ++d) {
                  if (m0 + r < M && n0 + c + d < N) {
                    index.push_back(std::size_t(m0 + r) * N + n0 + c + d);
                    values.push_back(c_tile[std::size_t(r) * BN + c + d]);
                  }
                }
              }
              if (!index.empty()) gC.warp_store(index.data(), int(index.size()), values.data());
            }
          }
        }
      }
    }
  }
  return hbm.count();
}

double tiled_model_bytes(int M, int N, int K, int BM, int BN) {
  const double block_rows = std::ceil(double(M) / BM), block_cols = std::ceil(double(N) / BN);
  return 4.0 * (double(M) * K * block_cols + double(K) * N * block_rows) + 4.0 * double(M) * N;
}

bool tiled_model_exact(int, int N, int K) { return K % 8 == 0 && N % 8 == 0; }

}  // namespace matmul
