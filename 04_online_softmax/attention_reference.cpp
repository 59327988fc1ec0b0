#include "attention_reference.hpp"

#include <Eigen/Dense>

#include <cmath>

namespace softmax {

std::vector<double> attention_reference(const float* Q, const float* K, const float* V, int Nq,
                                        int N, int d) {
  using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using RowMajorD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const RowMajorD q = Eigen::Map<const RowMajorF>(Q, Nq, d).cast<double>();
  const RowMajorD k = Eigen::Map<const RowMajorF>(K, N, d).cast<double>();
  const RowMajorD v = Eigen::Map<const RowMajorF>(V, N, d).cast<double>();
  RowMajorD s = (q * k.transpose()) / std::sqrt(double(d));
  for (int i = 0; i < Nq; ++i) {
    const double m = s.row(i).maxCoeff();
    s.row(i) = (s.row(i).array() - m).unaryExpr([](double x) { return std::exp(x); }).matrix();
    s.row(i) /= s.row(i).sum();
  }
  std::vector<double> o(std::size_t(Nq) * d);
  Eigen::Map<RowMajorD>(o.data(), Nq, d) = s * v;
  return o;
}

}  // namespace softmax
