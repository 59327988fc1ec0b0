#include "reference.hpp"

#include <Eigen/Dense>

namespace matmul {

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMajorD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::vector<double> reference(const float* A, const float* B, int M, int N, int K) {
  const Eigen::Map<const RowMajorF> a(A, M, K);
  const Eigen::Map<const RowMajorF> b(B, K, N);
  std::vector<double> c(std::size_t(M) * std::size_t(N));
  Eigen::Map<RowMajorD>(c.data(), M, N).noalias() = a.cast<double>() * b.cast<double>();
  return c;
}

double reference_entry(const float* A, const float* B, int N, int K, int i, int j) {
  double sum = 0.0;
  for (int k = 0; k < K; ++k) {
    sum += double(A[std::size_t(i) * K + k]) * double(B[std::size_t(k) * N + j]);
  }
  return sum;
}

}  // namespace matmul
