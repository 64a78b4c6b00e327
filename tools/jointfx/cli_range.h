// Integer range checks for command-line options that say the range plainly. CLI11's own
// PositiveNumber / NonNegativeNumber validators compare against the largest double and print it
// in full (a 309-digit number) when a value is out of range. And CLI11's parse errors with a long
// value clipped.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

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

// Refuses an empty value: for a path option, '' would otherwise mean "none given" and the run would
// go on without the file the user asked for.
inline CLI::Validator NonEmpty() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return text.empty() ? "expected a path, got an empty value" : std::string();
      },
      "");
}

// CLI11's own messages quote a bad value whole ("Could not convert: --lr = <value>", "--device:
// <value> not in {cpu,cuda}", "The following argument was not expected: <value>"): each word of
// one longer than quoteForMessage's limit is clipped as quoteForMessage clips a value.
inline std::string clipLongWords(const std::string& message) {
  std::string out;
  size_t i = 0;
  while (i < message.size()) {
    size_t end = message.find_first_of(" \n", i);
    if (end == std::string::npos) end = message.size();
    out += clipForMessage(std::string_view(message).substr(i, end - i));
    if (end < message.size()) out += message[end];
    i = end + 1;
  }
  return out;
}

// Installs clipLongWords on the messages CLI::App::exit prints for `app`'s parse errors.
inline void clipParseErrors(CLI::App& app) {
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    return clipLongWords(CLI::FailureMessage::simple(a, e));
  });
}

}  // namespace jfx::cli
