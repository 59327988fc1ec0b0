#include "algorithm.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace matmul {

namespace {

// The tiled algorithm for a BM×BN block tile and a BK-deep step. Each request is one row segment
// of a tile, as the kernels' warps load them: A tile rows of BK floats, B tile rows of BN floats.
course::IoCount blocked_counted(const float* A, const float* B, float* C, int M, int N, int K,
                                int BM, int BN, int BK) {
  course::Hbm hbm;
  const auto gA = hbm.wrap(A, std::size_t(M) * K);
  const auto gB = hbm.wrap(B, std::size_t(K) * N);
  const auto gC = hbm.wrap(C, std::size_t(M) * N);
  std::vector<float> a_tile(std::size_t(BM) * BK), b_tile(std::size_t(BK) * BN),
      c_tile(std::size_t(BM) * BN);
  for (int m0 = 0; m0 < M; m0 += BM) {
    for (int n0 = 0; n0 < N; n0 += BN) {
      const int rows = std::min(BM, M - m0), cols = std::min(BN, N - n0);
      std::fill(c_tile.begin(), c_tile.end(), 0.0f);
      for (int k0 = 0; k0 < K; k0 += BK) {
        const int depth = std::min(BK, K - k0);
        for (int r = 0; r < rows; ++r) gA.load(std::size_t(m0 + r) * K + k0, depth, &a_tile[r * BK]);
        for (int k = 0; k < depth; ++k) gB.load(std::size_t(k0 + k) * N + n0, cols, &b_tile[k * BN]);
        // on chip: the tile product, each C element accumulated in k order as in the kernels
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < cols; ++c)
            for (int k = 0; k < depth; ++k)
              c_tile[r * BN + c] = std::fma(a_tile[r * BK + k], b_tile[k * BN + c], c_tile[r * BN + c]);
      }
      for (int r = 0; r < rows; ++r) gC.store(std::size_t(m0 + r) * N + n0, cols, &c_tile[r * BN]);
    }
  }
  return hbm.count();
}

}  // namespace

course::IoCount tiled_counted(const float* A, const float* B, float* C, int M, int N, int K) {
  return blocked_counted(A, B, C, M, N, K, kTile, kTile, kTile);
}

course::IoCount register_blocked_counted(const float* A, const float* B, float* C, int M, int N,
                                         int K) {
  return blocked_counted(A, B, C, M, N, K, kBM, kBN, kBK);
}

double tiled_model_bytes(int M, int N, int K, int BM, int BN) {
  const double block_rows = std::ceil(double(M) / BM), block_cols = std::ceil(double(N) / BN);
  return 4.0 * (double(M) * K * block_cols + double(K) * N * block_rows) + 4.0 * double(M) * N;
}

bool tiled_model_exact(int, int N, int K) { return K % 8 == 0 && N % 8 == 0; }

}  // namespace matmul
