#include "softmax_bench.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include "algorithm.hpp"
#include "bench.hpp"
#include "check.hpp"
#include "compare.hpp"
#include "gpu.hpp"
#include "inputs.hpp"
#include "options.hpp"
#include "reference.hpp"
#if COURSE_HAS_CUDA
#include "copy.cuh"
#include "device_buffer.hpp"
#endif

namespace softmax {

namespace {

struct Shape {
  int R, C;
  double elements() const { return double(R) * C; }
  std::string text() const { return "R=" + std::to_string(R) + " C=" + std::to_string(C); }
};

course::IoCount copy_counted(const float* X, float* Y, int R, int C) {
  course::Hbm hbm;
  const auto x = hbm.wrap(X, std::size_t(R) * C);
  const auto y = hbm.wrap(Y, std::size_t(R) * C);
  // As common/copy.cu: 16-byte accesses (a warp: 128 floats) over n - n % 4, then the tail.
  const std::size_t n = std::size_t(R) * C, body = n - n % 4, width = 4 * course::kWarpSize;
  std::vector<float> chunk(width);
  for (std::size_t i = 0; i < body; i += width) {
    const std::size_t k = std::min(width, body - i);
    x.load(i, k, chunk.data());
    y.store(i, k, chunk.data());
  }
  if (n > body) {
    x.load(body, n - body, chunk.data());
    y.store(body, n - body, chunk.data());
  }
  return hbm.count();
}

}  // namespace

Variant copy_variant() {
  Variant v;
  v.name = "copy";
  v.model = [](int R, int C) { return 8.0 * R * C; };
  v.counted = copy_counted;
#if COURSE_HAS_CUDA
  v.gpu = [](const float* X, float* Y, float*, int R, int C) {
    course::launch_copy(X, Y, std::size_t(R) * C);
  };
#endif
  v.is_copy = true;
  return v;
}

int run(int argc, char** argv, const Program& program) {
  CLI::App app{program.description};
  course::CommonOptions options;
  std::vector<int> cols = {1024, 16384, 262144};
  std::vector<int> shape;
  double matrix_mib = 4.0;
  double count_limit = double(1 << 26);
  float lo = -4.0f, hi = 8.0f;
  course::add_common_options(app, options);
  app.add_option("--cols", cols, "Row lengths C to sweep, comma-separated")
      ->delimiter(',')
      ->check(course::whole_number(1))
      ->capture_default_str();
  app.add_option("--matrix-mib", matrix_mib,
                 "Size of X for each row length (R = MiB / (4 C), at least 1 row)")
      ->check(course::number(0.0))
      ->capture_default_str();
  app.add_option("--shape", shape, "One shape R C instead of --cols")
      ->expected(2)
      ->check(course::whole_number(1));
  app.add_option("--count-limit", count_limit,
                 "Run the CPU counting versions only when R*C is at most this")
      ->check(course::number(0.0))
      ->capture_default_str();
  app.add_option("--lo", lo, "Logits are uniform in [lo, hi)")->capture_default_str();
  app.add_option("--hi", hi, "Logits are uniform in [lo, hi)")->capture_default_str();
  if (program.add_options) program.add_options(app);
  if (const int code = course::parse_options(app, argc, argv); code >= 0) return code;

  return course::run_program(program.stage, [&]() -> int {
    std::vector<std::string> known = course::names_of(program.variants);
    known.insert(known.end(), program.after_variants.begin(), program.after_variants.end());
    course::finish_common_options(options, known);
    course::require(std::isfinite(lo) && std::isfinite(hi) && lo < hi, "--lo must be below --hi");
    std::vector<Shape> shapes;
    if (!shape.empty()) {
      shapes.push_back({shape[0], shape[1]});
    } else {
      course::require(matrix_mib > 0.0, "--matrix-mib must be positive");
      for (int C : cols) {
        const double rows = std::floor(matrix_mib * 1048576.0 / (4.0 * C));
        course::require(rows <= double(1 << 30), "too many rows; choose a smaller --matrix-mib");
        shapes.push_back({std::max(1, int(rows)), C});
      }
    }

    course::Bench bench(program.stage, options);
    for (const Shape& s : shapes) {
      const double bytes = 4.0 * s.elements();
      const double workspace = 4.0 * double(workspace_floats(s.R, s.C));
      course::require_fits(5.0 * bytes, bench.use_gpu() ? 2.0 * bytes + workspace : 0.0,
                           "the matrix " + s.text());
      // The float64 reference, only where a result will be compared with it: a CPU count or a GPU run.
      bool checked = false;
      for (const Variant& v : program.variants)
        checked = checked || (course::selected(options, v.name) && !v.is_copy && (v.max_cols == 0 || s.C <= v.max_cols) &&
                              ((v.counted && s.elements() <= count_limit) || (bench.use_gpu() && v.gpu)));
      bench.progress(s.text(), checked ? "inputs and float64 reference" : "inputs (nothing to check: no reference)");
      const auto X = course::random_uniform(std::size_t(s.R) * s.C, options.seed, lo, hi);
      const auto ref = checked ? reference(X.data(), s.R, s.C) : std::vector<double>();
      const double tolerance = course::fp32_sum_tolerance(std::size_t(s.C));
      auto check = [&](const std::vector<float>& Y, bool is_copy) {
        if (!is_copy) return course::compare(Y.data(), ref.data(), ref.size(), tolerance, s.C);
        const std::vector<double> x(X.begin(), X.end());  // the copy must reproduce X exactly
        return course::compare(Y.data(), x.data(), x.size(), 0.0, s.C);
      };

#if COURSE_HAS_CUDA
      std::unique_ptr<course::DeviceBuffer<float>> dX, dY, dW;
      if (bench.use_gpu()) {
        course::reset_device_peak();
        dX = std::make_unique<course::DeviceBuffer<float>>(X);
        dY = std::make_unique<course::DeviceBuffer<float>>(X.size());
        dW = std::make_unique<course::DeviceBuffer<float>>(workspace_floats(s.R, s.C));
      }
#endif
      for (const Variant& v : program.variants) {
        if (!course::selected(options, v.name)) continue;
        if (v.max_cols > 0 && s.C > v.max_cols) {
          bench.progress(s.text(), v.name + ": skipped, rows longer than " +
                                       std::to_string(v.max_cols) + " do not fit on chip");
          continue;
        }
        course::Row row = bench.row(v.name, s.text());
        row.size = s.C;
        if (v.model) row.io_model_bytes = v.model(s.R, s.C);
        if (v.counted && s.elements() <= count_limit) {
          bench.progress(s.text(), v.name + ": counting IO on the CPU");
          std::vector<float> Y(X.size(), NAN);
          const auto io = v.counted(X.data(), Y.data(), s.R, s.C);
          bench.record_counted(row, io, check(Y, v.is_copy));
        }
#if COURSE_HAS_CUDA
        if (bench.use_gpu() && v.gpu) {
          dY->poison();
          bench.measure_gpu(
              row, [&] { v.gpu(dX->get(), dY->get(), dW->get(), s.R, s.C); },
              [&] { return check(dY->download(), v.is_copy); });
        }
#endif
        bench.add(row);
      }
    }
    if (program.after) program.after(bench, options);
    return bench.finish(
        program.stage + " on " + course::device_label() + ", fp32, logits uniform in [" +
            std::to_string(lo) + ", " + std::to_string(hi) + "), seed " +
            std::to_string(options.seed) + " (repeat with --seed " + std::to_string(options.seed) +
            ")",
        {"model: the chapter's formula for bytes between the SMs and L2; counted: the CPU run "
         "through the counting view (R*C <= " +
             std::to_string(static_cast<long long>(count_limit)) + ", else n/a)",
         "L2 r+w, DRAM r+w: measured by the GPU's counters (CUPTI range profiler); max rel err vs "
         "float64 over every element; GB/s = model bytes / time"});
  });
}

}  // namespace softmax
