// Measured IO: the GPU's hardware counters, read in-process through CUPTI's range profiler.
//
// For one piece of GPU work (one kernel or several) we read
//   dram__bytes_read.sum, dram__bytes_write.sum   bytes between L2 and device memory (DRAM)
//   l1tex__m_xbar2l1tex_read_bytes.sum            bytes the crossbar delivered from L2 to the SMs
//   l1tex__m_l1tex2xbar_write_bytes.sum           bytes the SMs sent to L2 over the crossbar
// The SM<->L2 numbers are what the papers call "HBM accesses"; the DRAM numbers show how much of
// that the L2 (50 MB on an H100) absorbs. The L2 is flushed before every replay pass, as the timer
// flushes it before every timed run.
//
// Why the SM side of the crossbar and not the L2's own sector count
// (lts__t_sectors_srcunit_tex_op_read): when several SMs ask for the same sector while it is still
// on its way from DRAM, the L2 looks it up once, so its count falls below the bytes it delivers
// (25% below for our tiled matmuls at n = 1024, 70% below for the coalesced naive kernel at
// n = 256). Each SM still receives its own copy, and that delivered traffic is what the models
// count. docs/01_naive_matmul.md shows both.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace course {

struct Traffic {
  double dram_read_bytes = 0.0;
  double dram_write_bytes = 0.0;
  double l2_read_bytes = 0.0;   // L2 -> SMs
  double l2_write_bytes = 0.0;  // SMs -> L2
  std::vector<std::pair<std::string, double>> extra;  // the metrics of set_extra_metrics, in order
};

struct CounterResult {
  std::optional<Traffic> traffic;
  std::string why_not;  // when there is no traffic: why, in words
  // When there is no traffic: whether that is the machine's doing and not a fault of the code:
  // the driver lets only administrators read counters, or the profiler is busy with another
  // process (a second program or test reading counters at the same time, Nsight Compute).
  // Tests accept an excused absence and fail on any other.
  bool excused = false;
};

// Runs `run` (which enqueues GPU work) inside one profiler range, replaying it as many times as
// the counters need passes, and returns the totals over the range. Never throws for an
// unavailable profiler: the result then says why, and the program goes on without counters. Throws
// UsageError for an unknown --metrics name, and lets CUDA errors of `run` propagate.
CounterResult measure_traffic(const std::function<void()>& run);

// Also reads these metrics (any the range profiler knows, e.g. lts__t_sectors_srcunit_tex_op_read.sum)
// in every measurement, returned in Traffic::extra. Call before the first measurement.
void set_extra_metrics(const std::vector<std::string>& names);

// Switches measurement off for this process (the --no-counters option), with the reason given.
void disable_counters(const std::string& why);

}  // namespace course
