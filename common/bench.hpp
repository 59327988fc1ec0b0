// The loop every stage program runs, shared: for each problem and variant, a row with the model,
// the CPU count, and on the GPU a checked run, the median time and the hardware counters; then the
// table, the notes that say why a column is n/a, and the CSV.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compare.hpp"
#include "io_count.hpp"
#include "options.hpp"
#include "report.hpp"

namespace course {

// Runs `command` (a shell command: --between-rounds) with the row's problem in its environment
// (COURSE_STAGE, COURSE_VARIANT, COURSE_DTYPE, COURSE_SHAPE, COURSE_ROUND). Returns "" when it
// exits 0, else how it failed ("exit status 3", "killed by signal 9", ...).
std::string run_between_rounds(const std::string& command, const Row& row, int round);

class Bench {
 public:
  Bench(std::string stage, const CommonOptions& options);

  // Whether GPU variants run: a usable GPU and no --no-gpu.
  bool use_gpu() const { return use_gpu_; }
  // The stage cannot use this GPU (e.g. it needs a Hopper): its rows keep the CPU parts only, and
  // the table's note says `why`.
  void disable_gpu(const std::string& why) {
    use_gpu_ = false;
    gpu_unsuitable_ = why;
  }
  // "[stage] problem: what" on stderr, so the user sees progress.
  void progress(const std::string& problem, const std::string& what) const;

  // A row with the stage, variant, dtype and problem filled in (device "cpu" until a GPU runs it).
  Row row(const std::string& variant, const std::string& shape) const;

  // The CPU run through the counting view: its count, and its result's check.
  void record_counted(Row& row, const IoCount& io, const Comparison& check);

  // The GPU run of a variant: `launch` enqueues it (on output the caller has poisoned), `check`
  // compares its result with the reference (an empty `check`: a run that times a part of the work
  // and has no result of its own to check); then timing (median of --reps, L2 flushed before each)
  // in --rounds rounds, each followed by --between-rounds' command; with --kernel-time, in the
  // first round, the kernel time (kernel_time.hpp); then the counters. Fills the row's GPU columns
  // (round 1's time); add() then adds a row for each further round.
  void measure_gpu(Row& row, const std::function<void()>& launch,
                   const std::function<Comparison()>& check);

  // Adds the row, and after measure_gpu one row for each round after the first: the same problem,
  // that round's time, and nothing measured only once (the counters, the kernel time, the error).
  void add(Row row);

  // Prints `title`, the table, `notes` and the reasons for n/a columns, appends the CSV; returns
  // the exit code: 1 if any check failed.
  int finish(const std::string& title, std::vector<std::string> notes);

 private:
  void report_check(const Row& row, const char* where, const Comparison& check);
  void between_rounds(const Row& row, int round);

  std::string stage_;
  const CommonOptions& options_;
  bool use_gpu_;
  std::string gpu_unsuitable_;  // disable_gpu's reason
  std::vector<Row> rows_;
  std::string counters_note_;
  std::vector<std::string> extra_lines_;  // --metrics
  std::vector<std::string> kernel_lines_;  // --kernel-time
  std::string kernel_note_;                // why a kernel time is missing
  std::string rounds_note_;                // why --between-rounds stopped
  struct Round {
    int round;
    double median_ms, min_ms, max_ms;
  };
  std::vector<Round> later_rounds_;  // of the last measure_gpu, for add()
  bool all_ok_ = true;
};

}  // namespace course
