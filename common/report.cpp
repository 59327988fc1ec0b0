#include "report.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "check.hpp"

namespace course {

void Row::derive_rates() {
  if (ms && *ms > 0.0) {
    if (flops) tflops = *flops / (*ms * 1e9);
    if (io_model_bytes) gbps = *io_model_bytes / (*ms * 1e6);
  }
}

const std::vector<std::string>& csv_columns() {
  static const std::vector<std::string> columns = {
      "stage", "variant", "device", "dtype", "shape", "size", "flops", "ms", "tflops", "gbps",
      "io_model_bytes", "io_counted_bytes", "dram_read_bytes", "dram_write_bytes",
      "l2_read_bytes", "l2_write_bytes", "peak_mem_bytes", "max_rel_err",
      // added later, at the end, so that readers of older CSVs by position still work
      "ms_min", "ms_max", "kernel_ms", "kernels", "round"};
  return columns;
}

namespace {

std::string quoted(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string number(const std::optional<double>& value) {
  if (!value) return "";
  char text[40];
  std::snprintf(text, sizeof text, "%.12g", *value);
  return text;
}

}  // namespace

std::string csv_header() {
  std::string line;
  for (const auto& column : csv_columns()) line += (line.empty() ? "" : ",") + column;
  return line;
}

std::string csv_line(const Row& r) {
  const std::string fields[] = {
      quoted(r.stage), quoted(r.variant), quoted(r.device), quoted(r.dtype), quoted(r.shape),
      number(r.size), number(r.flops), number(r.ms), number(r.tflops), number(r.gbps),
      number(r.io_model_bytes), number(r.io_counted_bytes), number(r.dram_read_bytes),
      number(r.dram_write_bytes), number(r.l2_read_bytes), number(r.l2_write_bytes),
      number(r.peak_mem_bytes), number(r.max_rel_err), number(r.ms_min), number(r.ms_max),
      number(r.kernel_ms), number(r.kernels), number(r.round)};
  std::string line;
  for (const auto& field : fields) line += (&field == fields ? "" : ",") + field;
  return line;
}

namespace {
// The header line of an existing CSV, or "" for a new or empty file; checks it is ours.
std::string existing_header(const std::string& path) {
  std::string header;
  std::ifstream in(path);
  if (in) std::getline(in, header);
  if (!header.empty() && header.back() == '\r') header.pop_back();  // a CSV whose lines end in \r\n
  if (!header.empty() && header != csv_header()) {
    throw UsageError("'" + path + "' has another header; write to a new file");
  }
  return header;
}
}  // namespace

void check_csv_writable(const std::string& path) {
  existing_header(path);
  std::ofstream out(path, std::ios::app);
  if (!out) throw UsageError("cannot write '" + path + "'");
}

void append_csv(const std::string& path, const std::vector<Row>& rows) {
  const std::string header = existing_header(path);
  std::ofstream out(path, std::ios::app);
  if (!out) throw UsageError("cannot write '" + path + "'");
  if (header.empty()) out << csv_header() << "\n";
  for (const auto& row : rows) out << csv_line(row) << "\n";
  if (!out) throw std::runtime_error("writing '" + path + "' failed");
}

namespace {

std::string bytes_cell(const std::optional<double>& a, const std::optional<double>& b = {}) {
  if (!a) return "n/a";
  const double total = *a + (b ? *b : 0.0);
  char text[32];
  if (total >= 1e9) {
    std::snprintf(text, sizeof text, "%.2f GB", total / 1e9);
  } else if (total >= 1e6) {
    std::snprintf(text, sizeof text, "%.2f MB", total / 1e6);
  } else {
    std::snprintf(text, sizeof text, "%.1f kB", total / 1e3);
  }
  return text;
}

std::string value_cell(const std::optional<double>& value, const char* format) {
  if (!value) return "n/a";
  char text[32];
  std::snprintf(text, sizeof text, format, *value);
  return text;
}

}  // namespace

void print_table(std::ostream& out, const std::vector<Row>& rows,
                 const std::vector<std::string>& notes) {
  const std::vector<std::string> header = {"variant", "dtype", "shape",   "ms",     "TFLOP/s",
                                           "GB/s",    "model",   "counted", "L2 r+w",
                                           "DRAM r+w", "max rel err"};
  std::vector<std::vector<std::string>> cells = {header};
  for (const auto& r : rows) {
    cells.push_back({r.variant, r.dtype, r.shape, value_cell(r.ms, "%.4g"), value_cell(r.tflops, "%.2f"),
                     value_cell(r.gbps, "%.0f"), bytes_cell(r.io_model_bytes), bytes_cell(r.io_counted_bytes),
                     bytes_cell(r.l2_read_bytes, r.l2_write_bytes),
                     bytes_cell(r.dram_read_bytes, r.dram_write_bytes),
                     value_cell(r.max_rel_err, "%.1e")});
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& line : cells)
    for (size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  for (size_t i = 0; i < cells.size(); ++i) {
    for (size_t c = 0; c < cells[i].size(); ++c) {
      out << (c ? "  " : "") << (c < 3 ? std::left : std::right) << std::setw(int(width[c]))
          << cells[i][c];
    }
    out << std::left << "\n";
    if (i == 0) {
      size_t total = 0;
      for (size_t w : width) total += w + 2;
      out << std::string(total - 2, '-') << "\n";
    }
  }
  for (const auto& note : notes) out << "  " << note << "\n";
}

}  // namespace course
