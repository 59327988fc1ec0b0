#include "decode.hpp"

#include <algorithm>
#include <numeric>

#include "check.hpp"

namespace inference {

long long DecodeShape::tokens() const { return std::accumulate(lengths.begin(), lengths.end(), 0LL); }

void DecodeShape::validate() const {
  course::require(!lengths.empty(), "decode: no sequences (give at least one length)");
  course::require(heads_q >= 1 && heads_kv >= 1, "decode: H_q and H_kv must be >= 1");
  course::require(heads_q % heads_kv == 0,
                  "decode: H_q (" + std::to_string(heads_q) + ") must be a multiple of H_kv (" +
                      std::to_string(heads_kv) + ")");
  course::require(d >= 16 && d % 16 == 0, "decode: d must be a multiple of 16, not " + std::to_string(d));
  course::require(rows >= 1, "decode: at least one query row a step");
  for (int len : lengths)
    course::require(len >= rows, "decode: a sequence of " + std::to_string(len) + " tokens cannot hold this step's " +
                                     std::to_string(rows) + " rows");
}

std::string DecodeShape::text() const {
  if (lengths.empty()) return "B=0";
  const auto [lo, hi] = std::minmax_element(lengths.begin(), lengths.end());
  const std::string len = *lo == *hi ? std::to_string(*lo) : std::to_string(*lo) + ".." + std::to_string(*hi);
  return "B=" + std::to_string(batch()) + " Hq=" + std::to_string(heads_q) + " Hkv=" + std::to_string(heads_kv) +
         " d=" + std::to_string(d) + " rows=" + std::to_string(rows) + " len=" + len;
}

}  // namespace inference
