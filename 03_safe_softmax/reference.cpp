#include "reference.hpp"

#include <Eigen/Dense>

#include <cmath>

namespace softmax {

std::vector<double> reference(const float* X, int R, int C) {
  using RowMajorF = Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using RowMajorD = Eigen::Array<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const RowMajorD x = Eigen::Map<const RowMajorF>(X, R, C).cast<double>();
  std::vector<double> y(std::size_t(R) * C);
  Eigen::Map<RowMajorD> out(y.data(), R, C);
  for (int r = 0; r < R; ++r) {
    const double m = x.row(r).maxCoeff<Eigen::PropagateNaN>();
    // std::exp per element: exactly 0 for -inf (Eigen's vectorised exp returns a tiny denormal).
    out.row(r) = (x.row(r) - m).unaryExpr([](double v) { return std::exp(v); });
    out.row(r) /= out.row(r).sum();
  }
  return y;
}

}  // namespace softmax
