// The shape of one attention problem, as every attention stage (05 onward) takes it.
//
// Layout: Q, K, V and O are B·H heads of N × d values, row-major, one head after another; a row
// statistic (L, l, m, D) is B·H rows of N floats.
#pragma once

#include <cstddef>
#include <string>

namespace attention {

struct Shape {
  int B = 1, H = 1, N = 1, d = 64;
  bool causal = false;
  int heads() const { return B * H; }
  std::size_t elements() const { return std::size_t(heads()) * N * d; }  // of Q (or K, V, O)
  double flops() const;  // 4·B·H·N²·d, halved when causal (docs/DESIGN.md)
  std::string text() const;  // "B=4 H=32 N=4096 d=64 causal=0"
};
// Rejects what no variant handles: empty shapes, d other than 32, 64 or 128, more than 65535 heads.
void require_supported(const Shape& s);
inline bool supported_d(int d) { return d == 32 || d == 64 || d == 128; }
// Whether query row i may look at key j.
inline bool visible(const Shape& s, int i, int j) { return !s.causal || j <= i; }

}  // namespace attention
