// Kernel-level time: how long the GPU itself spent on one call's work, without the host.
//
// The timer (timer.hpp) records a CUDA event before a launch and one after it. If the host takes
// longer to issue the launch than the GPU takes to reach the first event (the flush of the L2 runs
// just before it), the GPU waits for the host, and the wait is counted in the event time. Host
// work inside a launch (building TMA descriptors, PyTorch's dispatch) would show up there.
//
// Here the same calls run with CUPTI's activity records on: the GPU's own start and end stamps of
// every kernel, memset and copy. A call's kernel time is the sum of the durations of its pieces
// of GPU work (gaps between them excluded), the L2 flush before it not counted. Where the event
// time and the kernel time agree, the event time has no host work in it. The peers measure theirs
// the same way through torch.profiler (scripts/peers/peer_common.py: kernel_time).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace course {

struct KernelTime {
  double median_ms = 0.0;  // over the calls: the summed durations of one call's GPU work
  double min_ms = 0.0;
  double max_ms = 0.0;
  int calls = 0;
  int ops = 0;                     // pieces of GPU work (kernels, memsets, copies) a call; -1: they varied
  std::vector<std::string> names;  // those of the first call, in order (short_kernel_name)
};

struct KernelTimeResult {
  std::optional<KernelTime> time;
  std::string why_not;  // when there is no time: why, in words
};

// Runs `launch` (which enqueues GPU work) `reps` times after `warmup` untimed runs, each after the
// L2 flush that time_gpu uses, with CUPTI's activity records on; returns the kernel time of a call.
// Never throws for an unavailable CUPTI (the result says why); CUDA errors of `launch` propagate.
KernelTimeResult measure_kernel_time(const std::function<void()>& launch, int reps, int warmup);

// --- the parts that need no GPU ---------------------------------------------------------------------

// One piece of GPU work: its name, GPU timestamps (ns), and whether it belongs to the L2 flush.
struct GpuOp {
  std::string name;
  double start_ns = 0.0;
  double end_ns = 0.0;
  bool flush = false;
};

// Marks the flush's pieces in `ops` (sorted by start): each run of consecutive pieces named, in
// order, as the flush alone ran them (`flush_names`). A call's own memset or kernel that happens to
// share one name with the flush is not taken for it.
void mark_flush(std::vector<GpuOp>& ops, const std::vector<std::string>& flush_names);

// The calls in a sequence of pieces of GPU work (sorted here by start): each run of flush pieces
// opens a call, which holds every piece up to the next flush. Pieces before the first flush belong
// to no call and are dropped.
std::vector<std::vector<GpuOp>> split_calls(std::vector<GpuOp> ops);

// The kernel time of `calls` (from split_calls), or nothing, with why_not set, when they are not
// the `expected` number of calls (e.g. the call itself ran a kernel that looks like the flush).
std::optional<KernelTime> kernel_time_of(const std::vector<std::vector<GpuOp>>& calls, int expected,
                                         std::string& why_not);

// A kernel's name without its namespaces, template arguments and parameters:
// "void attention::fa3::flash_v3_tuned<__half, 128>(CUtensorMap, ...)" -> "flash_v3_tuned";
// "Memset (Device)" -> "Memset".
std::string short_kernel_name(const std::string& name);

}  // namespace course
