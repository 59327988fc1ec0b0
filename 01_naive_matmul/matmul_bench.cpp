#include "matmul_bench.hpp"

#include <cmath>
#include <memory>
#include <optional>
#include <random>

#include "bench.hpp"
#include "check.hpp"
#include "compare.hpp"
#include "gpu.hpp"
#include "inputs.hpp"
#include "options.hpp"
#include "reference.hpp"
#if COURSE_HAS_CUDA
#include "device_buffer.hpp"
#endif

namespace matmul {

namespace {

struct Shape {
  int M, N, K;
  double mnk() const { return double(M) * N * K; }
  std::string text() const {
    return "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
  }
};

// The float64 reference: every entry for products up to `full_limit` multiply-adds, otherwise
// `samples` random entries and the four corners.
struct Reference {
  std::vector<std::size_t> where;  // flat indices checked (all of C when empty)
  std::vector<double> values;

  Reference(const std::vector<float>& A, const std::vector<float>& B, const Shape& s,
            double full_limit, int samples, std::uint64_t seed) {
    if (s.mnk() <= full_limit) {
      values = reference(A.data(), B.data(), s.M, s.N, s.K);
      return;
    }
    std::mt19937_64 generator(seed);
    std::uniform_int_distribution<int> row(0, s.M - 1), col(0, s.N - 1);
    const int corners[4][2] = {{0, 0}, {0, s.N - 1}, {s.M - 1, 0}, {s.M - 1, s.N - 1}};
    for (const auto& c : corners) where.push_back(std::size_t(c[0]) * s.N + c[1]);
    for (int n = 0; n < samples; ++n) where.push_back(std::size_t(row(generator)) * s.N + col(generator));
    for (std::size_t flat : where) {
      values.push_back(reference_entry(A.data(), B.data(), s.N, s.K, int(flat / s.N), int(flat % s.N)));
    }
  }

  course::Comparison check(const std::vector<float>& C, const Shape& s) const {
    const double tolerance = course::fp32_sum_tolerance(std::size_t(s.K));
    if (where.empty()) return course::compare(C.data(), values.data(), values.size(), tolerance, s.N);
    std::vector<float> picked;
    for (std::size_t flat : where) picked.push_back(C[flat]);
    return course::compare(picked.data(), values.data(), values.size(), tolerance, s.N, &where);
  }
};

}  // namespace

int run(int argc, char** argv, const Program& program) {
  CLI::App app{program.description};
  course::CommonOptions options;
  std::vector<int> sizes = program.default_sizes;
  std::vector<int> shape;
  double count_limit = double(1 << 27);
  double full_reference_limit = double(1u << 31);
  int samples = 2048;
  course::add_common_options(app, options);
  app.add_option("--sizes", sizes, "Square sizes n (M = N = K = n), comma-separated")
      ->delimiter(',')
      ->check(course::whole_number(1))
      ->capture_default_str();
  app.add_option("--shape", shape, "One shape M N K instead of --sizes")
      ->expected(3)
      ->check(course::whole_number(1));
  app.add_option("--count-limit", count_limit,
                 "Run the CPU counting version only when M*N*K is at most this")
      ->check(course::number(0.0))
      ->capture_default_str();
  app.add_option("--full-reference-limit", full_reference_limit,
                 "Compare every entry when M*N*K is at most this; above, sample entries")
      ->check(course::number(0.0))
      ->capture_default_str();
  app.add_option("--samples", samples, "Entries checked when sampling")
      ->check(course::whole_number(1))
      ->capture_default_str();
  if (const int code = course::parse_options(app, argc, argv); code >= 0) return code;

  return course::run_program(program.stage, [&]() -> int {
    course::finish_common_options(options, course::names_of(program.variants));
    std::vector<Shape> shapes;
    if (!shape.empty()) {
      shapes.push_back({shape[0], shape[1], shape[2]});
    } else {
      for (int n : sizes) shapes.push_back({n, n, n});
    }
    for (const Shape& s : shapes) {
      course::require(s.M <= (1 << 30) && s.N <= (1 << 30) && s.K <= (1 << 30),
                      "M, N and K can be at most 2^30 (" + s.text() + ")");
    }

    course::Bench bench(program.stage, options);
    for (const Shape& s : shapes) {
      const double a_bytes = 4.0 * s.M * s.K, b_bytes = 4.0 * s.K * s.N, c_bytes = 4.0 * s.M * s.N;
      // The float64 reference, only where a result will be compared with it: a CPU count or a GPU run.
      bool checked = false;
      for (const Variant& v : program.variants)
        checked = checked || (course::selected(options, v.name) &&
                              ((v.counted && s.mnk() <= count_limit) || (bench.use_gpu() && v.gpu)));
      const bool full = checked && s.mnk() <= full_reference_limit;
      const double host_bytes = a_bytes + b_bytes + 2.0 * c_bytes + (full ? 2.0 * c_bytes : 0.0);
      course::require_fits(host_bytes, bench.use_gpu() ? a_bytes + b_bytes + c_bytes : 0.0,
                           "the product " + s.text());
      bench.progress(s.text(), checked ? "inputs and float64 reference" : "inputs (nothing to check: no reference)");
      const auto A = course::random_uniform(std::size_t(s.M) * s.K, options.seed);
      const auto B = course::random_uniform(std::size_t(s.K) * s.N, options.seed + 1);
      std::optional<Reference> ref;
      if (checked) ref.emplace(A, B, s, full_reference_limit, samples, options.seed + 2);

#if COURSE_HAS_CUDA
      std::unique_ptr<course::DeviceBuffer<float>> dA, dB, dC;
      if (bench.use_gpu()) {
        course::reset_device_peak();
        dA = std::make_unique<course::DeviceBuffer<float>>(A);
        dB = std::make_unique<course::DeviceBuffer<float>>(B);
        dC = std::make_unique<course::DeviceBuffer<float>>(std::size_t(s.M) * s.N);
      }
#endif

      for (const Variant& v : program.variants) {
        if (!course::selected(options, v.name)) continue;
        course::Row row = bench.row(v.name, s.text());
        if (s.M == s.N && s.N == s.K) row.size = s.M;
        row.flops = 2.0 * s.mnk();
        if (v.model) row.io_model_bytes = v.model(s.M, s.N, s.K);

        if (v.counted && s.mnk() <= count_limit) {
          bench.progress(s.text(), v.name + ": counting IO on the CPU");
          std::vector<float> C(std::size_t(s.M) * s.N, NAN);  // unwritten elements fail the check
          const auto io = v.counted(A.data(), B.data(), C.data(), s.M, s.N, s.K);
          bench.record_counted(row, io, ref->check(C, s));
        }
#if COURSE_HAS_CUDA
        if (bench.use_gpu() && v.gpu) {
          dC->poison();
          bench.measure_gpu(
              row, [&] { v.gpu(dA->get(), dB->get(), dC->get(), s.M, s.N, s.K); },
              [&] { return ref->check(dC->download(), s); });
        }
#endif
        bench.add(row);
      }
    }

    return bench.finish(
        program.stage + " on " + course::device_label() + ", fp32, inputs uniform in [-1, 2), " +
            "seed " + std::to_string(options.seed) + " (repeat with --seed " +
            std::to_string(options.seed) + ")",
        {"model: the chapter's formula for bytes between the SMs and L2; counted: the CPU run "
         "through the counting view (M*N*K <= " +
             std::to_string(static_cast<long long>(count_limit)) + ", else n/a)",
         "L2 r+w, DRAM r+w: measured by the GPU's counters (CUPTI range profiler); max rel err "
         "vs float64 (all entries up to M*N*K = " +
             std::to_string(static_cast<long long>(full_reference_limit)) + ", then " +
             std::to_string(samples) + " samples + corners)"});
  });
}

}  // namespace matmul
