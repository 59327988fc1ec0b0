// One report format for every stage: a table on stdout and, with --csv FILE, the same rows appended
// to a CSV whose schema is shared by the whole course (one plotting script serves every stage).
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace course {

struct Row {
  std::string stage;    // "01_naive_matmul"
  std::string variant;  // "coalesced"
  std::string device;   // GPU name, or "cpu" for rows with no GPU measurement
  std::string dtype;    // "fp32"
  std::string shape;    // "M=4096 N=4096 K=4096"
  // Unknown values stay empty (never zero) in the CSV, and print as n/a.
  std::optional<double> size;  // the plots' x-axis: matrix side, row length, sequence length
  std::optional<double> flops, ms, tflops, gbps;
  std::optional<double> io_model_bytes, io_counted_bytes;
  std::optional<double> dram_read_bytes, dram_write_bytes, l2_read_bytes, l2_write_bytes;
  std::optional<double> peak_mem_bytes, max_rel_err;
  // Added at the end of the schema (older CSVs lack them):
  std::optional<double> ms_min, ms_max;  // the fastest and slowest of the timed runs behind ms
  std::optional<double> kernel_ms;       // median kernel time of a call (kernel_time.hpp: GPU work alone)
  std::optional<double> kernels;         // pieces of GPU work a call runs (kernels, memsets, copies)
  std::optional<double> round;           // which round of timing this row is (--rounds), from 1

  // tflops = flops / time; gbps = io_model_bytes / time (the model's bytes at the measured speed).
  void derive_rates();
};

const std::vector<std::string>& csv_columns();
std::string csv_header();
std::string csv_line(const Row& row);
// Appends rows, writing the header first if the file is new or empty. An existing file with
// another header is an error (it belongs to another version of the schema).
void append_csv(const std::string& path, const std::vector<Row>& rows);
// Throws UsageError now, rather than after a long run, if append_csv would fail.
void check_csv_writable(const std::string& path);

// The stage's table; `notes` are printed under it (e.g. why a column is n/a).
void print_table(std::ostream& out, const std::vector<Row>& rows,
                 const std::vector<std::string>& notes);

}  // namespace course
