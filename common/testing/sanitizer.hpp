// Whether a test runs under compute-sanitizer (COURSE_SANITIZER is set by the scripts that run it
// so): the tests then take smaller shapes, and skip what the sanitizer cannot run beside (the
// hardware counters).
#pragma once

#include <cstdlib>

namespace course::testing {

inline bool under_sanitizer() { return std::getenv("COURSE_SANITIZER") != nullptr; }

}  // namespace course::testing
