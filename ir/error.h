// Errors that point at a place: file, line/column (text IR) or JSON pointer, node name, rule.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace jfx {

struct SourceLocation {
  std::string file;          // path, or "<string>"
  int line = 0;              // 1-based; 0 when unknown
  int column = 0;            // 1-based; 0 when unknown
  std::string json_pointer;  // e.g. "/nodes/12/args/0"; empty when not JSON
  std::string node;          // node name, when the error concerns one

  // "file:3:14", "file (/nodes/12/args/0)", "node 'mm_1'", combined as available.
  std::string str() const;
  static SourceLocation atNode(std::string name) {
    SourceLocation l;
    l.node = std::move(name);
    return l;
  }
};

// Thrown by readers and by API misuse that a caller can recover from. what() is the full message
// "<location>: error: <message>".
class JfxError : public std::runtime_error {
 public:
  JfxError(SourceLocation loc, const std::string& message);
  const SourceLocation& location() const { return loc_; }
  const std::string& message() const { return message_; }

 private:
  SourceLocation loc_;
  std::string message_;
};

// The line and column (1-based) of byte `offset` (0-based) of `text`, in `file`.
SourceLocation locateByte(std::string_view text, size_t offset, std::string file);

// At most this many bytes of a value that came from the user (an option value, a pipeline spec,
// a string or key from a JSON file, a profile field, a node name) are quoted in an error
// message: a 100 MB option value must not come back as a 100 MB message.
constexpr size_t kQuoteLimit = 200;
// File paths get more room: a path the system can open (PATH_MAX) is shown whole.
constexpr size_t kPathQuoteLimit = 4096;

// `value` for a message: itself when it has at most `limit` bytes, else its first `limit` bytes
// (never splitting a UTF-8 sequence), "...", and how long it was: "aaaa... (104857600 bytes)".
std::string clipForMessage(std::string_view value, size_t limit = kQuoteLimit);
// The same in single quotes, the form messages quote values in: 'abc', or
// 'aaaa...' (104857600 bytes).
std::string quoteForMessage(std::string_view value, size_t limit = kQuoteLimit);

// A library's exception text made fit for a user: nlohmann's "[json.exception.parse_error.101]
// parse error at line 1, column 2: " prefix (the caller states the location itself) and
// c10::Error's C++ backtrace ("Exception raised from ..." onwards) are dropped, and the text the
// library quotes from the input ("last read: '...'", "number overflow parsing '...'") is clipped
// as quoteForMessage clips.
std::string humanLibraryMessage(std::string_view what);

}  // namespace jfx
