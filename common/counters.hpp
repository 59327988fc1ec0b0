// Measured IO: the GPU's hardware counters, read in-process through CUPTI's range profiler.
//
// For one piece of GPU work (one kernel or several) we read
//   dram__bytes_read.sum, dram__bytes_write.sum          bytes between L2 and device memory (DRAM)
//   lts__t_sectors_srcunit_tex_op_read.sum  x 32         bytes the SMs read from L2
//   lts__t_sectors_srcunit_tex_op_write.sum x 32         bytes the SMs wrote to L2
// The SM<->L2 numbers are what the papers call "HBM accesses"; the DRAM numbers show how much of
// that the L2 (50 MB on an H100) absorbs. The L2 is flushed before every replay pass, as the timer
// flushes it before every timed run.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace course {

struct Traffic {
  double dram_read_bytes = 0.0;
  double dram_write_bytes = 0.0;
  double l2_read_bytes = 0.0;
  double l2_write_bytes = 0.0;
};

struct CounterResult {
  std::optional<Traffic> traffic;
  std::string why_not;  // when there is no traffic: why, in words
};

// Runs `run` (which enqueues GPU work) inside one profiler range, replaying it as many times as
// the counters need passes, and returns the totals over the range. Never throws for an
// unavailable profiler: the result then says why, and the program goes on without counters.
CounterResult measure_traffic(const std::function<void()>& run);

// Switches measurement off for this process (the --no-counters option), with the reason given.
void disable_counters(const std::string& why);

}  // namespace course
