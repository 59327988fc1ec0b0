#include "reference.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include <string>

#include "check.hpp"

namespace inference {

DecodeResult decode_reference(const DecodeShape& s, const std::vector<float>& Q, const PagedCache& cache,
                              const std::vector<int>* only) {
  s.validate();
  course::require(cache.sequences() == s.batch() && cache.heads_kv() == s.heads_kv && cache.d() == s.d,
                  "decode reference: the cache does not hold this problem's sequences and heads");
  course::require(Q.size() == s.q_elements(), "decode reference: Q holds the wrong number of values");
  DecodeResult out{std::vector<double>(s.q_elements(), NAN), std::vector<double>(s.l_elements(), NAN)};
  const double scale = 1.0 / std::sqrt(double(s.d));
  for (int b = 0; b < s.batch(); ++b) {
    if (only && std::find(only->begin(), only->end(), b) == only->end()) continue;
    course::require(cache.length(b) == s.lengths[std::size_t(b)],
                    "decode reference: sequence " + std::to_string(b) + " has " + std::to_string(cache.length(b)) +
                        " tokens in the cache, the problem says " + std::to_string(s.lengths[std::size_t(b)]));
    for (int h = 0; h < s.heads_kv; ++h) {
      const int n = s.lengths[std::size_t(b)];
      // The sequence's K and V of head h, gathered through its block table: n × d.
      Eigen::MatrixXd K(n, s.d), V(n, s.d);
      for (int p = 0; p < n; ++p) {
        const std::size_t at = cache.at(b, p, h);
        for (int e = 0; e < s.d; ++e) {
          K(p, e) = cache.K()[at + std::size_t(e)];
          V(p, e) = cache.V()[at + std::size_t(e)];
        }
      }
      for (int hq = h * s.group(); hq < (h + 1) * s.group(); ++hq)
        for (int r = 0; r < s.rows; ++r) {
          const int keys = s.last_key(b, r) + 1;
          Eigen::VectorXd q(s.d);
          for (int e = 0; e < s.d; ++e) q(e) = Q[s.q_at(b, r, hq) + std::size_t(e)];
          const Eigen::VectorXd scores = scale * (K.topRows(keys) * q);
          const double m = scores.maxCoeff();
          const Eigen::VectorXd p = (scores.array() - m).exp().matrix();
          const double l = p.sum();
          const Eigen::VectorXd o = V.topRows(keys).transpose() * p / l;
          for (int e = 0; e < s.d; ++e) out.O[s.q_at(b, r, hq) + std::size_t(e)] = o(e);
          out.L[s.l_at(b, hq, r)] = m + std::log(l);
        }
    }
  }
  return out;
}

}  // namespace inference
