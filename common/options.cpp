#include "options.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cmath>

#include "check.hpp"
#include "counters.hpp"
#include "inputs.hpp"
#include "report.hpp"

namespace course {

CLI::Validator whole_number(int min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        std::size_t used = 0;
        long long value = 0;
        try {
          value = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || value < min || value > INT_MAX) {
          return "must be an integer from " + std::to_string(min) + " to " +
                 std::to_string(INT_MAX) + ", got '" + text + "'";
        }
        return std::string();
      },
      "INT>=" + std::to_string(min));
}

CLI::Validator number(double min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        std::size_t used = 0;
        double value = 0.0;
        try {
          value = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        const bool ok = used != 0 && used == text.size() && std::isfinite(value) &&
                        (min == 0.0 ? value >= 0.0 : value > min);
        if (!ok) {
          return std::string("must be a number ") + (min == 0.0 ? ">= 0" : "> " + std::to_string(min)) +
                 ", got '" + text + "'";
        }
        return std::string();
      },
      min == 0.0 ? "NUMBER>=0" : "NUMBER");
}

CLI::Validator seed_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const bool digits = !text.empty() && text.size() <= 20 &&
                            std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (digits) {
          try {
            std::stoull(text);
            return std::string();
          } catch (const std::exception&) {  // beyond 2^64 - 1
          }
        }
        return "must be a whole number from 0 to " + std::to_string(UINT64_MAX) + ", got '" + text + "'";
      },
      "UINT64");
}

void add_common_options(CLI::App& app, CommonOptions& o) {
  app.add_option("--csv", o.csv, "Append the result rows to this CSV file (course-wide schema)");
  app.add_option("--variants", o.variants, "Run only these variants (comma-separated)")
      ->delimiter(',');
  app.add_option("--reps", o.reps, "Timed runs per measurement; the median is reported")
      ->check(whole_number(1))
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed warm-up runs before timing")
      ->check(whole_number(0))
      ->capture_default_str();
  app.add_option("--rounds", o.rounds,
                 "Time each GPU run this many times in a row (rounds), each a median of --reps, one CSV "
                 "row a round (column round)")
      ->check(whole_number(1))
      ->capture_default_str();
  app.add_option("--between-rounds", o.between_rounds,
                 "Shell command run after each round of each timed run, with COURSE_STAGE, COURSE_VARIANT, "
                 "COURSE_DTYPE, COURSE_SHAPE and COURSE_ROUND set (scripts/peers/peer_turn.sh: the peers "
                 "time the same problem, so that the two alternate)");
  app.add_flag("--kernel-time", o.kernel_time,
               "Also time each GPU run's kernels alone, without the host (CUPTI activity records; "
               "columns kernel_ms and kernels), in its first round");
  app.add_flag("--no-counters", o.no_counters, "Do not read the GPU's hardware counters");
  app.add_option("--sustain", o.sustain,
                 "Also run each GPU run back to back for this many seconds (no L2 flush between calls), with "
                 "[sustain] lines on stdout where it starts and ends, for an energy reader "
                 "(scripts/peers/energy.py); 0: not")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  app.add_option("--metrics", o.metrics,
                 "Also read these hardware metrics (CUPTI/ncu names, e.g. "
                 "lts__t_sectors_srcunit_tex_op_read.sum) and print them")
      ->delimiter(',');
  app.add_flag("--no-gpu", o.no_gpu, "Run only the CPU parts (reference, counted IO)");
  app.add_option("--seed", o.seed, "Seed for the random inputs (default: a fresh one, printed)")
      ->check(seed_number())
      ->each([&o](const std::string&) { o.seed_given = true; });
}

int parse_options(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints the help, or the error and a hint
    return code == 0 ? 0 : 2;
  }
  return -1;
}

void finish_common_options(CommonOptions& o, const std::vector<std::string>& known) {
  for (const auto& name : o.variants) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw UsageError("unknown variant '" + name + "'; this stage has: " + list);
    }
  }
  if (!o.csv.empty()) check_csv_writable(o.csv);  // before the work, not after it
  if (o.no_counters) disable_counters("--no-counters was given");
  set_extra_metrics(o.metrics);
  if (!o.seed_given) o.seed = fresh_seed();
}

bool selected(const CommonOptions& o, const std::string& variant) {
  return o.variants.empty() ||
         std::find(o.variants.begin(), o.variants.end(), variant) != o.variants.end();
}

}  // namespace course
