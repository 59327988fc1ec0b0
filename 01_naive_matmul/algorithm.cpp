#include "algorithm.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace matmul {

const char* name(Naive layout) {
  return layout == Naive::coalesced ? "coalesced" : "uncoalesced";
}

course::IoCount naive_counted(Naive layout, const float* A, const float* B, float* C, int M, int N,
                              int K) {
  course::Hbm hbm;
  const auto gA = hbm.wrap(A, std::size_t(M) * K);
  const auto gB = hbm.wrap(B, std::size_t(K) * N);
  const auto gC = hbm.wrap(C, std::size_t(M) * N);
  // A warp is 32 consecutive lanes along j (coalesced) or along i (uncoalesced); `outer` is the
  // other index, fixed for the warp.
  const bool along_j = layout == Naive::coalesced;
  const int outer_count = along_j ? M : N;
  const int lane_count = along_j ? N : M;
  std::size_t ia[32], ib[32], ic[32];
  float a[32], b[32], acc[32];
  for (int outer = 0; outer < outer_count; ++outer) {
    for (int first = 0; first < lane_count; first += course::kWarpSize) {
      const int lanes = std::min(course::kWarpSize, lane_count - first);
      std::fill(acc, acc + lanes, 0.0f);
      for (int k = 0; k < K; ++k) {
        for (int l = 0; l < lanes; ++l) {
          const std::size_t i = along_j ? outer : first + l;
          const std::size_t j = along_j ? first + l : outer;
          ia[l] = i * K + k;
          ib[l] = std::size_t(k) * N + j;
        }
        gA.warp_load(ia, lanes, a);
        gB.warp_load(ib, lanes, b);
        for (int l = 0; l < lanes; ++l) acc[l] = std::fma(a[l], b[l], acc[l]);
      }
      for (int l = 0; l < lanes; ++l) {
        const std::size_t i = along_j ? outer : first + l;
        const std::size_t j = along_j ? first + l : outer;
        ic[l] = i * N + j;
      }
      gC.warp_store(ic, lanes, acc);
    }
  }
  return hbm.count();
}

double naive_model_bytes(Naive layout, int M, int N, int K) {
  const double mnk = double(M) * N * K, mn = double(M) * N;
  if (layout == Naive::coalesced) return 5.0 * mnk + 4.0 * mn;
  return 33.0 * mnk + 32.0 * mn;
}

bool naive_model_exact(Naive layout, int M, int N, int K) {
  if (layout == Naive::coalesced) return N % 32 == 0;
  return M % 32 == 0 && K % 8 == 0 && N % 8 == 0;
}

double logical_bytes(int M, int N, int K) {
  return 4.0 * (2.0 * double(M) * N * K + double(M) * N);
}

}  // namespace matmul
