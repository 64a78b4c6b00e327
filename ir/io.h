// Reading and writing graph files by extension; atomic writes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/sink.h"

namespace jfx {

enum class GraphFormat { Json, Text };

// ".json" -> Json, ".jfx" -> Text; nullopt otherwise.
std::optional<GraphFormat> formatFromPath(const std::string& path);
// Inputs larger than this are refused (graphs, pipeline and hardware files, safetensors), so a
// wrong path such as /dev/zero or a runaway pipe ends with a clear error instead of exhausting
// memory. Default kDefaultInputLimitBytes; `jointfx --max-input-mib` changes it.
constexpr uint64_t kDefaultInputLimitBytes = uint64_t{2} << 30;  // 2 GiB
uint64_t inputSizeLimit();
void setInputSizeLimit(uint64_t bytes);

// Reads a whole input file ("-" reads stdin) up to inputSizeLimit(); `what` names it in errors
// ("graph", "pipeline file"). Text inputs (`binary` false) stop at the first chunk that holds a
// NUL byte, which no text format allows: the data ends just past it, so the parser reports it at
// once (/dev/zero fails in microseconds, not at the limit). Throws JfxError naming the file.
std::string readInputFile(const std::string& path, std::string_view what, bool binary = false);

// Reads a file ("-" reads stdin). The format comes from the extension (stdin: sniffed, JSON when
// the first non-space byte is '{'). Throws JfxError.
std::unique_ptr<Graph> loadGraph(const std::string& path);
std::string serializeGraph(const Graph& g, GraphFormat format);
// Writes an output so that a failure never leaves a partial file and no special file is ever
// replaced:
// - "-", /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: written to that descriptor.
// - A regular file, or a new one: written to a temporary file beside it and renamed into place
//   (readers see the old file or the new one; a failure leaves the old one untouched).
// - A symbolic link: its final target is written the same way (atomically when it is a regular
//   file or does not exist yet); the link stays.
// - A character device or a FIFO: opened and written directly (a FIFO waits for its reader).
//   Anything under /dev, /proc or /sys is written in place too, never replaced.
// - Anything else (a directory, a socket, a block device): refused with an error.
//   The temporary is written in blocks of kDirectWriteBlock with direct I/O from the first whole
//   block on (the tail, and file systems without direct I/O, through the page cache).
void writeFileAtomic(const std::string& path, const std::string& contents);
inline constexpr size_t kDirectWriteBlock = size_t{1} << 20;
// The same, with the contents made by `produce`, which hands them to its sink in pieces: a regular
// file's temporary is written as they come, so the whole output is never in memory at once (a
// descriptor, device or FIFO still gets the contents only once all of it is made, so a failure
// part way writes nothing there). An exception from `produce` leaves the target untouched.
void writeFileAtomic(const std::string& path, const std::function<void(const ChunkSink&)>& produce);
// Streams the graph into the file (writeFileAtomic with the writers' sink forms).
void saveGraph(const Graph& g, const std::string& path, GraphFormat format);

// Out of memory in a command: `operator new` calls the handler this installs, which says so on
// stderr, removes every temporary an atomic write has open (so no `.OUT.tmp.XXXXXX` is left
// beside an output) and exits with `exit_code`. Without it the program aborted with no message:
// mimalloc's `new`, built as C, calls abort() when it has no handler to call. The handler
// allocates nothing; the temporaries are kept in a fixed table of slots (a registry).
void installOutOfMemoryHandler(int exit_code);
// What that handler does: for an allocator that reports failure its own way (mimalloc's error
// callback, tools/jointfx/main.cc).
[[noreturn]] void exitOutOfMemory();

class TemporaryBeside;
// An output written as it is made (a log that grows step by step), with writeFileAtomic's rules
// for where it goes: a regular file is written to a temporary beside it and takes its place only
// at commit(), so a reader never sees a partial file and the old file stays until then; "-" and
// descriptors, devices and FIFOs are written directly. write() throws JfxError naming the output
// when the bytes cannot be written (a full disk, /dev/full); an output never committed leaves
// the target untouched.
class StreamedOutput {
 public:
  explicit StreamedOutput(const std::string& path);
  StreamedOutput(const StreamedOutput&) = delete;
  StreamedOutput& operator=(const StreamedOutput&) = delete;
  ~StreamedOutput();

  void write(std::string_view text);
  // Puts the output in place (syncs and renames a regular file's temporary); once only.
  void commit();

 private:
  std::string shown_;
  int fd_ = -1;
  bool own_fd_ = false;
  std::unique_ptr<TemporaryBeside> tmp_;
};

// The first of `inputs` that names the same file as `output` (device and inode, links
// followed), or nullopt: an output that would overwrite an input is refused by every command
// before anything is written. "-", descriptors and outputs that do not exist yet match nothing.
std::optional<std::string> sameFileAs(const std::string& output,
                                      const std::vector<std::string>& inputs);

}  // namespace jfx
