// GPU timing as the course does it everywhere: CUDA events around each run, warm-up runs first,
// the L2 cache flushed before every run (so each run starts cold, as a kernel in a real model
// would), and the median of the runs reported.
#pragma once
#if COURSE_HAS_CUDA

#include <functional>
#include <vector>

namespace course {

struct Timing {
  double median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
  int reps = 0;
};

struct TimingOptions {
  int warmup = 3;
  int reps = 20;
};

// Times `launch`, which enqueues the work on the default stream.
Timing time_gpu(const std::function<void()>& launch, const TimingOptions& options = {});

// Back-to-back calls of `launch` for `seconds` of host time, after a warm-up of a quarter of that, with
// no L2 flush between them (the same kernel over and over, as in a loop over a model's layers): the
// steady state a GPU at its power cap settles into. `mark(false)` is called just before the first
// timed call is enqueued and `mark(true)` just after the last has finished, so that a reader outside
// (scripts/peers/energy.py, through NVML's energy counter) can take the GPU's energy between them.
struct Sustained {
  long calls = 0;
  double ms = 0.0;  // by events, from the first call's start to the last's end
};
Sustained time_sustained(const std::function<void()>& launch, double seconds, const std::function<void(bool)>& mark);

// Evicts the L2 by reading a buffer three times its size. Reading (not writing) leaves no dirty
// lines behind whose write-back would be counted against the next kernel.
void flush_l2();
// Further GPUs whose L2 flush_l2() evicts as well (stage 10, whose one timed call runs on several):
// each gets the same read pass on its default stream, and the current GPU's default stream waits
// for them, so that the timed work starts with every GPU's L2 cold and none of the flush is timed.
void flush_l2_also(const std::vector<int>& devices);

}  // namespace course

#endif  // COURSE_HAS_CUDA
