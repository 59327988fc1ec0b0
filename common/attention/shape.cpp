#include "attention/shape.hpp"

#include "check.hpp"

namespace attention {

double Shape::flops() const {
  return 4.0 * heads() * double(N) * N * d * (causal ? 0.5 : 1.0);
}

std::string Shape::text() const {
  return "B=" + std::to_string(B) + " H=" + std::to_string(H) + " N=" + std::to_string(N) +
         " d=" + std::to_string(d) + " causal=" + std::to_string(causal ? 1 : 0);
}

void require_supported(const Shape& s) {
  course::require(s.B >= 1 && s.H >= 1 && s.N >= 1,
                  "attention needs B, H and N of at least 1 (" + s.text() + ")");
  course::require(supported_d(s.d), "head dimension d = " + std::to_string(s.d) +
                                        " is not supported: d must be 32, 64 or 128");
  const long long heads = static_cast<long long>(s.B) * s.H;  // B·H, which may overflow an int
  course::require(heads <= 65535, "at most 65535 heads (B·H), not " + std::to_string(s.B) + " × " + std::to_string(s.H) + " = " +
                                         std::to_string(heads));
}

}  // namespace attention
