// Integer range checks for command-line options that say the range plainly. CLI11's own
// PositiveNumber / NonNegativeNumber validators compare against the largest double and print it
// in full (a 309-digit number) when a value is out of range.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <string>

#include "ir/error.h"

namespace jfx::cli {

// Accepts a decimal integer in [lo, hi]; anything else is an error naming the range, e.g.
// "--steps: expected an integer in [1, 1000000000], got '0'".
inline CLI::Validator IntRange(int64_t lo, int64_t hi) {
  std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        int64_t v = 0;
        const char* end = text.data() + text.size();
        auto [p, ec] = std::from_chars(text.data(), end, v);
        if (ec != std::errc() || p != end || v < lo || v > hi)
          return "expected an integer in " + range + ", got " + quoteForMessage(text);
        return {};
      },
      "INT in " + range);
}

}  // namespace jfx::cli
