#include "algorithm.hpp"

#include <algorithm>
#include <limits>
#include <tuple>

namespace softmax {

namespace {
std::size_t at(int r, int c, int C) { return std::size_t(r) * C + c; }
}  // namespace

void read_segment(const In& X, int r, int s, int C, const std::function<void(float)>& f) {
  const int begin = s * kSegment, end = std::min(C, begin + kSegment), width = request_floats(C);
  std::vector<float> values(width);
  for (int c = begin; c < end; c += width) {
    const int n = std::min(width, end - c);
    X.load(at(r, c, C), n, values.data());
    for (int i = 0; i < n; ++i) f(values[i]);
  }
}

void map_segment(const In& X, const Out& Y, int r, int s, int C,
                 const std::function<float(float)>& f) {
  const int begin = s * kSegment, end = std::min(C, begin + kSegment), width = request_floats(C);
  std::vector<float> values(width);
  for (int c = begin; c < end; c += width) {
    const int n = std::min(width, end - c);
    X.load(at(r, c, C), n, values.data());
    for (int i = 0; i < n; ++i) values[i] = f(values[i]);
    Y.store(at(r, c, C), n, values.data());
  }
}

void write_partial(const Out& P, int r, int s, int C, float value) {
  P.store(std::size_t(r) * partial_stride(C) + s, 1, &value);
}

std::vector<float> read_partials(const Out& P, int r, int C) {
  const int S = segments(C);
  std::vector<float> values(S);
  for (int i = 0; i < S; i += course::kWarpSize) {
    P.load(std::size_t(r) * partial_stride(C) + i, std::min(course::kWarpSize, S - i), &values[i]);
  }
  return values;
}

PassMemory::PassMemory(const float* X, float* Y, int R, int C)
    : partials(workspace_floats(R, C)),
      x(hbm.wrap(X, std::size_t(R) * C)),
      y(hbm.wrap(Y, std::size_t(R) * C)),
      m_part(hbm.wrap(partials.data(), partials.size() / 2)),
      l_part(hbm.wrap(partials.data() + partials.size() / 2, partials.size() / 2)) {}

course::IoCount naive_counted(const float* X, float* Y, int R, int C) {
  PassMemory mem(X, Y, R, C);
  const auto& [x, y, l_part] = std::tie(mem.x, mem.y, mem.l_part);
  const int S = segments(C);
  for (int r = 0; r < R; ++r)  // pass 1: sum of exp(x), per segment
    for (int s = 0; s < S; ++s) {
      double sum = 0.0;  // see sum_note in algorithm.hpp
      read_segment(x, r, s, C, [&](float v) { sum += std::exp(v); });
      write_partial(l_part, r, s, C, float(sum));
    }
  for (int r = 0; r < R; ++r)  // pass 2: y = exp(x) / l, every block combining the row's partials
    for (int s = 0; s < S; ++s) {
      float l = 0.0f;
      for (float p : read_partials(l_part, r, C)) l += p;
      map_segment(x, y, r, s, C, [&](float v) { return std::exp(v) / l; });
    }
  return mem.hbm.count();
}

course::IoCount safe_counted(const float* X, float* Y, int R, int C) {
  PassMemory mem(X, Y, R, C);
  const auto& [x, y, m_part, l_part] = std::tie(mem.x, mem.y, mem.m_part, mem.l_part);
  const int S = segments(C);
  auto row_max = [&](int r) {
    float m = -std::numeric_limits<float>::infinity();
    for (float p : read_partials(m_part, r, C)) m = nan_max(m, p);
    return m;
  };
  for (int r = 0; r < R; ++r)  // pass 1: max, per segment
    for (int s = 0; s < S; ++s) {
      float m = -std::numeric_limits<float>::infinity();
      read_segment(x, r, s, C, [&](float v) { m = nan_max(m, v); });
      write_partial(m_part, r, s, C, m);
    }
  for (int r = 0; r < R; ++r)  // pass 2: sum of exp(x - m), per segment
    for (int s = 0; s < S; ++s) {
      const float m = row_max(r);
      double sum = 0.0;
      read_segment(x, r, s, C, [&](float v) { sum += std::exp(v - m); });
      write_partial(l_part, r, s, C, float(sum));
    }
  for (int r = 0; r < R; ++r)  // pass 3: y = exp(x - m) / l
    for (int s = 0; s < S; ++s) {
      const float m = row_max(r);
      float l = 0.0f;
      for (float p : read_partials(l_part, r, C)) l += p;
      map_segment(x, y, r, s, C, [&](float v) { return std::exp(v - m) / l; });
    }
  return mem.hbm.count();
}

double passes_model_bytes(int R, int C, int reads, int partial_arrays_written,
                          int partial_arrays_read) {
  const double rc = double(R) * C, S = segments(C);
  const double partial_read_per_block = std::ceil(S / 8.0) * 32.0;
  return 4.0 * rc * reads + 4.0 * rc + double(R) * S * 32.0 * partial_arrays_written +
         double(R) * S * partial_read_per_block * partial_arrays_read;
}

}  // namespace softmax
