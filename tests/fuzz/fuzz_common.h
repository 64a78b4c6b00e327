// Shared by the libFuzzer targets in this folder: the contract is that malformed input yields a
// jfx::JfxError and nothing else. Any other exception, a broken invariant or a sanitizer report
// is a bug, and the target aborts so libFuzzer saves the input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "ir/error.h"

namespace jfx::fuzz {

[[noreturn]] inline void bug(const std::string& what) {
  std::fprintf(stderr, "fuzz: BUG: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline std::string_view asText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `body`; a JfxError is the expected outcome of bad input, anything else aborts.
template <typename F>
void expectOnlyJfxError(F&& body) {
  try {
    body();
  } catch (const JfxError&) {
  } catch (const std::exception& e) {
    bug(std::string("exception other than JfxError escaped: ") + e.what());
  } catch (...) {
    bug("non-std exception escaped");
  }
}

}  // namespace jfx::fuzz
