#include "attention_bench.hpp"

#include <cmath>
#include <memory>

#include "algorithm.hpp"
#include "attention_reference.hpp"
#include "check.hpp"
#include "compare.hpp"
#include "gpu.hpp"
#include "inputs.hpp"
#include "kernels.cuh"
#if COURSE_HAS_CUDA
#include "device_buffer.hpp"
#endif

namespace softmax {

void add_attention_options(CLI::App& app, AttentionOptions& o) {
  app.add_option("--attention-keys", o.keys, "attention_row: numbers of keys N, comma-separated")
      ->delimiter(',')
      ->check(course::whole_number(1))
      ->capture_default_str();
  app.add_option("--attention-queries", o.queries, "attention_row: number of queries Nq")
      ->check(course::whole_number(1))
      ->capture_default_str();
  app.add_option("--attention-d", o.d, "attention_row: head dimension d (32, 64 or 128)")
      ->check(CLI::IsMember({32, 64, 128}))
      ->capture_default_str();
}

void run_attention(course::Bench& bench, const course::CommonOptions& common,
                   const AttentionOptions& o, double count_limit) {
  if (!course::selected(common, "attention_row")) return;
  const int Nq = o.queries, d = o.d;
  for (int N : o.keys) {
    const std::string shape =
        "Nq=" + std::to_string(Nq) + " N=" + std::to_string(N) + " d=" + std::to_string(d);
    const double q_bytes = 4.0 * Nq * d, kv_bytes = 8.0 * N * d;
    course::require_fits(3.0 * (2.0 * q_bytes + kv_bytes) + 8.0 * Nq * double(N),
                         bench.use_gpu() ? 2.0 * q_bytes + kv_bytes : 0.0, "attention " + shape);
    const bool count = double(Nq) * N * d <= count_limit;
    const bool checked = count || bench.use_gpu();  // else nothing is compared with the reference
    bench.progress(shape, checked ? "inputs and float64 reference" : "inputs (nothing to check: no reference)");
    const auto Q = course::random_uniform(std::size_t(Nq) * d, common.seed);
    const auto K = course::random_uniform(std::size_t(N) * d, common.seed + 1);
    const auto V = course::random_uniform(std::size_t(N) * d, common.seed + 2);
    const auto ref = checked ? attention_reference(Q.data(), K.data(), V.data(), Nq, N, d) : std::vector<double>();
    auto check = [&](const std::vector<float>& out) {
      return course::compare(out.data(), ref.data(), ref.size(),
                             course::fp32_sum_tolerance(std::size_t(N) + d), d);
    };
    course::Row row = bench.row("attention_row", shape);
    row.size = N;
    row.flops = 4.0 * Nq * double(N) * d;
    row.io_model_bytes = attention_row_model_bytes(Nq, N, d);
    if (count) {
      bench.progress(shape, "attention_row: counting IO on the CPU");
      std::vector<float> out(std::size_t(Nq) * d, NAN);
      const auto io = attention_row_counted(Q.data(), K.data(), V.data(), out.data(), Nq, N, d);
      bench.record_counted(row, io, check(out));
    }
#if COURSE_HAS_CUDA
    if (bench.use_gpu()) {
      course::reset_device_peak();
      course::DeviceBuffer<float> dQ(Q), dK(K), dV(V), dO(Q.size());
      dO.poison();
      bench.measure_gpu(
          row, [&] { launch_attention_row(dQ.get(), dK.get(), dV.get(), dO.get(), Nq, N, d); },
          [&] { return check(dO.download()); });
    }
#endif
    bench.add(row);
  }
}

}  // namespace softmax
