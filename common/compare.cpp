#include "compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace course {

std::string Comparison::summary() const {
  char text[160];
  std::snprintf(text, sizeof text, "%s, max %s %.2e (tol %.1e, %zu checked, %zu bad)",
                ok() ? "ok" : "FAILED", scale == Scale::rms ? "err/rms" : "rel err", max_rel_err, tolerance,
                checked, bad);
  return text;
}

namespace {

// The one definition of an element's error and of max_rel_err, for an out of floats (a kernel's
// result) or of doubles (a float64 computation such as attention computed plainly in fp16).
template <class Out>
Comparison compare_any(const Out* out, const double* ref, std::size_t n, double tolerance,
                       std::size_t cols, const std::vector<std::size_t>* where, Scale scale) {
  Comparison result;
  result.tolerance = tolerance;
  result.scale = scale;
  result.checked = n;
  double sum_squares = 0.0;
  std::size_t finite = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isfinite(ref[i])) {
      sum_squares += ref[i] * ref[i];
      ++finite;
    }
  }
  const double rms = finite ? std::sqrt(sum_squares / static_cast<double>(finite)) : 0.0;

  std::ostringstream mismatches;
  for (std::size_t i = 0; i < n; ++i) {
    const double o = out[i];
    const double r = ref[i];
    double error;
    if (std::isnan(r)) {
      error = std::isnan(o) ? 0.0 : INFINITY;  // a NaN reference must be propagated
    } else if (std::isinf(r)) {
      error = (o == r) ? 0.0 : INFINITY;
    } else if (!std::isfinite(o)) {
      error = INFINITY;
    } else {
      const double by = scale == Scale::rms ? rms : std::max(std::abs(r), rms);
      error = by > 0.0 ? std::abs(o - r) / by : std::abs(o - r);
    }
    result.max_rel_err = std::max(result.max_rel_err, error);
    if (!(error <= tolerance)) {
      if (result.bad < 5) {
        const std::size_t flat = where ? (*where)[i] : i;
        mismatches << "  [";
        if (cols > 0) {
          mismatches << flat / cols << "," << flat % cols;
        } else {
          mismatches << flat;
        }
        mismatches << "] = " << o << ", expected " << r << " (rel err " << error << ")\n";
      }
      ++result.bad;
    }
  }
  result.first_mismatches = mismatches.str();
  return result;
}

}  // namespace

Comparison compare(const float* out, const double* ref, std::size_t n, double tolerance,
                   std::size_t cols, const std::vector<std::size_t>* where, Scale scale) {
  return compare_any(out, ref, n, tolerance, cols, where, scale);
}

double max_rel_error(const std::vector<double>& out, const std::vector<double>& ref, Scale scale) {
  if (out.size() != ref.size())
    throw std::invalid_argument("max_rel_error: " + std::to_string(out.size()) + " results for " +
                                std::to_string(ref.size()) + " reference values");
  return compare_any(out.data(), ref.data(), ref.size(), INFINITY, 0, nullptr, scale).max_rel_err;
}

double fp32_sum_tolerance(std::size_t terms) {
  const double unit_roundoff = std::ldexp(1.0, -24);
  return std::max(1e-6, 4.0 * std::sqrt(static_cast<double>(std::max<std::size_t>(terms, 1))) *
                            unit_roundoff);
}

}  // namespace course
