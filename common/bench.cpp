#include "bench.hpp"

#include <cstdio>
#include <iostream>

#include "counters.hpp"
#include "gpu.hpp"
#if COURSE_HAS_CUDA
#include "device_buffer.hpp"
#include "timer.hpp"
#endif

namespace course {

Bench::Bench(std::string stage, const CommonOptions& options)
    : stage_(std::move(stage)), options_(options), use_gpu_(gpu().available && !options.no_gpu) {}

void Bench::progress(const std::string& problem, const std::string& what) const {
  std::fprintf(stderr, "[%s] %s: %s\n", stage_.c_str(), problem.c_str(), what.c_str());
}

Row Bench::row(const std::string& variant, const std::string& shape) const {
  Row r;
  r.stage = stage_;
  r.variant = variant;
  r.device = "cpu";
  r.dtype = "fp32";
  r.shape = shape;
  return r;
}

void Bench::report_check(const Row& row, const char* where, const Comparison& check) {
  if (check.ok()) return;
  all_ok_ = false;
  std::cerr << where << " " << row.variant << " " << row.shape << ": " << check.summary() << "\n"
            << check.first_mismatches;
}

void Bench::record_counted(Row& row, const IoCount& io, const Comparison& check) {
  row.io_counted_bytes = double(io.total());
  row.max_rel_err = check.max_rel_err;
  report_check(row, "CPU", check);
}

void Bench::measure_gpu(Row& row, const std::function<void()>& launch,
                        const std::function<Comparison()>& check) {
#if COURSE_HAS_CUDA
  progress(row.shape, row.variant + ": GPU check");
  launch();
  const Comparison result = check();
  row.device = gpu().name;
  row.max_rel_err = result.max_rel_err;
  report_check(row, "GPU", result);
  progress(row.shape, row.variant + ": timing");
  row.ms = time_gpu(launch, {options_.warmup, options_.reps}).median_ms;
  progress(row.shape, row.variant + ": hardware counters");
  const CounterResult measured = measure_traffic(launch);
  if (measured.traffic) {
    row.dram_read_bytes = measured.traffic->dram_read_bytes;
    row.dram_write_bytes = measured.traffic->dram_write_bytes;
    row.l2_read_bytes = measured.traffic->l2_read_bytes;
    row.l2_write_bytes = measured.traffic->l2_write_bytes;
    for (const auto& [name, value] : measured.traffic->extra) {
      char text[256];
      std::snprintf(text, sizeof text, "%-17s %-24s %s = %.6g", row.variant.c_str(),
                    row.shape.c_str(), name.c_str(), value);
      extra_lines_.push_back(text);
    }
  } else {
    counters_note_ = measured.why_not;
  }
  row.peak_mem_bytes = double(device_bytes_peak());
#else
  (void)row, (void)launch, (void)check;
#endif
}

void Bench::add(Row row) {
  row.derive_rates();
  rows_.push_back(std::move(row));
}

int Bench::finish(const std::string& title, std::vector<std::string> notes) {
  std::cout << title << "\n";
  if (!use_gpu_) {
    notes.push_back("GPU columns n/a: " + (options_.no_gpu           ? std::string("--no-gpu was given")
                                           : !gpu_unsuitable_.empty() ? gpu_unsuitable_
                                                                      : gpu().why_not));
  } else if (!counters_note_.empty()) {
    notes.push_back("measured IO n/a: " + counters_note_);
  }
  print_table(std::cout, rows_, notes);
  if (!extra_lines_.empty()) {
    std::cout << "extra counters (--metrics):\n";
    for (const auto& line : extra_lines_) std::cout << "  " << line << "\n";
  }
  if (!options_.csv.empty()) append_csv(options_.csv, rows_);
  if (!all_ok_) {
    std::cerr << stage_ << ": verification FAILED (see above)\n";
    return 1;
  }
  return 0;
}

}  // namespace course
