#include "ir/io.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <utility>
#include <vector>

#include "ir/error.h"
#include "ir/json_format.h"
#include "ir/text_format.h"

namespace jfx {
namespace {

[[noreturn]] void ioError(const std::string& path, const std::string& what, int err) {
  SourceLocation loc;
  loc.file = path;
  throw JfxError(loc, what + ": " + std::strerror(err));
}

[[noreturn]] void pathError(const std::string& path, const std::string& what) {
  SourceLocation loc;
  loc.file = path;
  throw JfxError(loc, what);
}

uint64_t g_input_limit = kDefaultInputLimitBytes;

std::string mib(uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

std::string readAll(int fd, const std::string& path, std::string_view what, bool binary) {
  const uint64_t limit = g_input_limit;
  auto tooLarge = [&] {
    pathError(path, "the " + std::string(what) + " is larger than the input limit of " +
                        mib(limit) + " (--max-input-mib raises it)");
  };
  std::string data;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    if (static_cast<uint64_t>(st.st_size) > limit) tooLarge();
    data.reserve(static_cast<size_t>(st.st_size));
  }
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      ioError(path, "cannot read", errno);
    }
    if (data.size() + static_cast<uint64_t>(n) > limit) tooLarge();
    if (!binary) {
      if (const void* nul = std::memchr(buf, '\0', static_cast<size_t>(n))) {
        data.append(buf, static_cast<size_t>(static_cast<const char*>(nul) - buf) + 1);
        break;
      }
    }
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Writes all of `data`, retrying short writes; false with errno set on failure.
bool writeAll(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

// Writes a new file's contents in blocks of kDirectWriteBlock staged in an aligned buffer. From
// the first full block on it asks for direct I/O (O_DIRECT), which moves the data straight to the
// device: a buffered write copies every byte into the page cache, and fsync then writes the dirty
// pages back from this process, which for a large graph cost many times the system time of direct
// I/O, varying with the kernel's writeback throttling. Outputs smaller than a block, file systems
// without direct I/O (fcntl or the write says EINVAL) and the tail after the last whole block are
// written as usual. 1 MiB blocks cost a large graph as little as 4 MiB ones, and a small output
// faults in a quarter of the staging pages that 4 MiB would take (bench/README.md, "Figures behind
// the code").
class BlockWriter {
 public:
  static constexpr size_t kBlock = kDirectWriteBlock;  // a multiple of any device's block size
  static constexpr size_t kAlign = 4096;

  explicit BlockWriter(int fd) : fd_(fd) {}
  BlockWriter(const BlockWriter&) = delete;
  BlockWriter& operator=(const BlockWriter&) = delete;
  ~BlockWriter() { std::free(buf_); }

  bool write(std::string_view data) {
    if (!buf_) {
      buf_ = static_cast<char*>(std::aligned_alloc(kAlign, kBlock));
      if (!buf_) return writeAll(fd_, data);  // no buffer: write as given
    }
    while (!data.empty()) {
      const size_t n = std::min(data.size(), kBlock - used_);
      std::memcpy(buf_ + used_, data.data(), n);
      used_ += n;
      data.remove_prefix(n);
      if (used_ == kBlock && !flushBlock()) return false;
    }
    return true;
  }
  // The last partial block, written through the page cache.
  bool finish() {
    if (direct_ && !setDirect(false)) return false;
    const bool ok = used_ == 0 || writeAll(fd_, std::string_view(buf_, used_));
    used_ = 0;
    return ok;
  }

 private:
  bool setDirect(bool on) {
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, on ? (flags | O_DIRECT) : (flags & ~O_DIRECT)) != 0)
      return false;
    direct_ = on;
    return true;
  }
  bool flushBlock() {
    if (!tried_direct_) {
      tried_direct_ = true;
      setDirect(true);  // EINVAL where the file system has no direct I/O: stay buffered
    }
    const std::string_view block(buf_, kBlock);
    if (direct_) {
      ssize_t n;
      do {
        n = ::write(fd_, buf_, kBlock);
      } while (n < 0 && errno == EINTR);
      if (n == static_cast<ssize_t>(kBlock)) {
        used_ = 0;
        return true;
      }
      // Refused (EINVAL: an alignment the device does not take) or short: the rest goes through
      // the page cache, from where this write left off.
      if (n < 0 && errno != EINVAL) return false;
      if (!setDirect(false)) return false;
      if (!writeAll(fd_, block.substr(n < 0 ? 0 : static_cast<size_t>(n)))) return false;
    } else if (!writeAll(fd_, block)) {
      return false;
    }
    used_ = 0;
    return true;
  }

  int fd_;
  char* buf_ = nullptr;
  size_t used_ = 0;
  bool direct_ = false;
  bool tried_direct_ = false;
};

}  // namespace

std::optional<GraphFormat> formatFromPath(const std::string& path) {
  if (ends_with(path, ".json")) return GraphFormat::Json;
  if (ends_with(path, ".jfx")) return GraphFormat::Text;
  return std::nullopt;
}

uint64_t inputSizeLimit() {
  return g_input_limit;
}

void setInputSizeLimit(uint64_t bytes) {
  g_input_limit = bytes;
}

namespace {

// How long an input FIFO may go without a writer before it is an error.
constexpr int kFifoWriterWaitMs = 10000;

// Opens an input for reading. Non-blocking first: opening a FIFO nobody writes to would wait for
// a writer forever. A FIFO then gets kFifoWriterWaitMs for a writer to send something (or to
// come and go); after that, reads block as usual.
int openInput(const std::string& path, const std::string& what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) ioError(path, "cannot open the " + what, errno);
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode)) {
    pollfd pfd{fd, POLLIN, 0};
    int r;
    while ((r = ::poll(&pfd, 1, kFifoWriterWaitMs)) < 0 && errno == EINTR) {
    }
    if (r == 0) {
      ::close(fd);
      pathError(path, "cannot read the " + what + ": a FIFO nobody wrote to in " +
                          std::to_string(kFifoWriterWaitMs / 1000) + " s (no writer?)");
    }
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

}  // namespace

std::string readInputFile(const std::string& path, std::string_view what, bool binary) {
  if (path == "-") return readAll(STDIN_FILENO, "<stdin>", what, binary);
  int fd = openInput(path, std::string(what));
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    ioError(path, "cannot read", EISDIR);
  }
  std::string data;
  try {
    data = readAll(fd, path, what, binary);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return data;
}

namespace {

// A graph file's bytes. A regular file is mapped, not read: read() into a buffer of the file's
// size costs a fresh zeroed page and a copy for every 4 KiB of text, several times the CPU time of
// mapping it and touching every page (bench/README.md, "Figures behind the code"), and the mapping
// shares the page cache's pages instead of holding a second copy. As LLVM's MemoryBuffer does, the
// mapping assumes nobody truncates the file while it is read (that would end the process with
// SIGBUS); jointfx writes every output by rename, never in place.
struct FileText {
  void* map = nullptr;
  size_t map_len = 0;
  std::string fallback;  // stdin, files that are not regular, empty files
  std::string_view text;

  FileText() = default;
  FileText(const FileText&) = delete;
  FileText& operator=(const FileText&) = delete;
  ~FileText() {
    if (map) ::munmap(map, map_len);
  }
};

// `end_at_nul`: the text ends just past its first NUL byte, as readInputFile's does. The JSON
// reader needs no scan for it (a NUL byte stops its fast tokenizer, and the fallback ends the
// text there itself): the scan read the whole text once more for nothing.
void readGraphFile(const std::string& path, FileText& out, bool end_at_nul) {
  // Non-blocking: a FIFO without a writer is for readInputFile to wait for, a bounded time.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) ioError(path, "cannot open the graph", errno);
  struct stat st;
  const bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
                       static_cast<uint64_t>(st.st_size) <= g_input_limit;
  void* p = MAP_FAILED;
  if (regular) {
    // MAP_POPULATE maps the cached pages in one call instead of a fault per 64 KiB.
    p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd,
               0);
  }
  ::close(fd);
  if (p == MAP_FAILED) {  // not a regular file (or too large: the common path says so), or no map
    out.fallback = readInputFile(path, "graph");
    out.text = out.fallback;
    return;
  }
  out.map = p;
  out.map_len = static_cast<size_t>(st.st_size);
  size_t n = out.map_len;
  const char* bytes = static_cast<const char*>(p);
  if (const void* nul = end_at_nul ? std::memchr(bytes, '\0', n) : nullptr)
    n = static_cast<size_t>(static_cast<const char*>(nul) - bytes) + 1;
  out.text = std::string_view(bytes, n);
}

}  // namespace

std::unique_ptr<Graph> loadGraph(const std::string& path) {
  if (path == "-") {
    std::string data = readInputFile(path, "graph");
    size_t first = data.find_first_not_of(" \t\r\n");
    bool is_json = first != std::string::npos && data[first] == '{';
    return is_json ? readJsonGraph(data, "<stdin>") : parseTextGraph(data, "<stdin>");
  }
  auto format = formatFromPath(path);
  if (!format) {
    SourceLocation loc;
    loc.file = path;
    throw JfxError(loc, "unknown graph format: expected a .json or .jfx file name");
  }
  FileText data;
  readGraphFile(path, data, /*end_at_nul=*/*format != GraphFormat::Json);
  return *format == GraphFormat::Json ? readJsonGraph(data.text, path)
                                      : parseTextGraph(data.text, path);
}

std::string serializeGraph(const Graph& g, GraphFormat format) {
  return format == GraphFormat::Json ? writeJsonGraph(g) : printTextGraph(g);
}

namespace {

// The descriptor a path names when it is one of this process's standard streams or open files
// (/dev/stdout, /dev/fd/1, /proc/self/fd/1, ...); -1 otherwise. Writing there must go to the
// descriptor itself: reopening it would truncate a redirected file or lose an append.
int descriptorPath(const std::string& path) {
  if (path == "-" || path == "/dev/stdout") return STDOUT_FILENO;
  if (path == "/dev/stderr") return STDERR_FILENO;
  for (std::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (!path.starts_with(prefix)) continue;
    std::string_view digits = std::string_view(path).substr(prefix.size());
    int fd = -1;
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), fd);
    if (ec == std::errc() && p == digits.data() + digits.size() && fd >= 0 &&
        ::fcntl(fd, F_GETFD) != -1)
      return fd;
  }
  return -1;
}

// Follows `path` through symbolic links (the last component, link after link) to the file they
// finally name, which need not exist yet. The links themselves are never replaced.
std::string followLinks(const std::string& path) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::vector<char> buf(static_cast<size_t>(st.st_size > 0 ? st.st_size : 255) + 1);
    ssize_t n = ::readlink(p.c_str(), buf.data(), buf.size());
    if (n < 0) ioError(path, "cannot read the symbolic link", errno);
    if (static_cast<size_t>(n) == buf.size())
      pathError(path, "the symbolic link changed while it was read");
    std::string target(buf.data(), static_cast<size_t>(n));
    if (target.empty()) pathError(path, "the symbolic link is empty");
    if (target[0] != '/') {
      size_t slash = p.rfind('/');
      if (slash != std::string::npos) target = p.substr(0, slash + 1) + target;
    }
    p = std::move(target);
  }
  ioError(path, "cannot follow the symbolic link", ELOOP);
}

void writeToDescriptor(int fd, const std::string& path, const std::string& contents) {
  if (!writeAll(fd, contents)) ioError(path, "cannot write", errno);
}

// Opens an existing file and writes it in place: no temporary, no rename. For character devices
// and FIFOs (no truncation: neither has contents to replace), and for regular files under /dev,
// /proc and /sys (truncated), which are never replaced by a file of ours.
int openInPlace(const std::string& path, const std::string& shown, bool regular);

void writeInPlace(const std::string& path, const std::string& shown, const std::string& contents,
                  bool regular) {
  int fd = openInPlace(path, shown, regular);
  if (!writeAll(fd, contents)) {
    int err = errno;
    ::close(fd);
    ioError(shown, "cannot write", err);
  }
  if (::close(fd) != 0) ioError(shown, "cannot write", errno);
}

}  // namespace

namespace {

// The temporaries being written, for the out-of-memory handler, which must not allocate: fixed
// slots, claimed and released lock-free. A write beyond the slots is simply not in the table.
using TemporarySlots = std::array<std::atomic<const char*>, 64>;
TemporarySlots& temporarySlots() {
  static TemporarySlots slots{};
  return slots;
}
std::atomic<int>& outOfMemoryExitCode() {
  static std::atomic<int> code{3};
  return code;
}
void registerTemporary(const char* path) {
  for (auto& slot : temporarySlots()) {
    const char* empty = nullptr;
    if (slot.compare_exchange_strong(empty, path)) return;
  }
}
void unregisterTemporary(const char* path) {
  for (auto& slot : temporarySlots()) {
    const char* mine = path;
    if (slot.compare_exchange_strong(mine, nullptr)) return;
  }
}
[[noreturn]] void outOfMemory() {
  static constexpr char kMessage[] =
      "jointfx: error: out of memory (free memory, or raise the process's limit; "
      "--max-input-mib bounds the inputs read)\n";
  ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  (void)ignored;
  for (auto& slot : temporarySlots())
    if (const char* path = slot.exchange(nullptr)) ::unlink(path);
  ::_exit(outOfMemoryExitCode().load());
}

}  // namespace

void exitOutOfMemory() {
  outOfMemory();
}

void installOutOfMemoryHandler(int exit_code) {
  outOfMemoryExitCode().store(exit_code);
  std::set_new_handler(&outOfMemory);
}

// A temporary file beside `path` (same directory, so rename() stays on one file system and is
// atomic: readers see the old file or the new one, never a partial one), removed unless
// commit() renames it into place. `shown` names the output in errors (the path the user gave,
// not a link's target).
class TemporaryBeside {
 public:
  TemporaryBeside(const std::string& path, const std::string& shown) : path_(path), shown_(shown) {
    size_t slash = path.rfind('/');
    dir_ = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    std::string tmpl =
        (slash == std::string::npos ? "" : path.substr(0, slash + 1)) + "." + base + ".tmp.XXXXXX";
    tmp_.assign(tmpl.begin(), tmpl.end());
    tmp_.push_back('\0');
    fd_ = ::mkstemp(tmp_.data());
    if (fd_ < 0) ioError(shown_, "cannot create a temporary file in '" + dir_ + "'", errno);
    registerTemporary(tmp_.data());
    // mkstemp makes the file 0600; keep an existing target's mode, else the usual 0644.
    struct stat st;
    mode_t mode = ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644;
    if (::fchmod(fd_, mode) != 0) fail("cannot set the mode of the temporary file", errno);
  }
  TemporaryBeside(const TemporaryBeside&) = delete;
  TemporaryBeside& operator=(const TemporaryBeside&) = delete;
  ~TemporaryBeside() { discard(); }

  int fd() const { return fd_; }

  // Removes the temporary and throws the error (errno `err`) naming the output.
  [[noreturn]] void fail(const std::string& what, int err) {
    discard();
    ioError(shown_, what, err);
  }

  // Syncs the temporary, renames it over the target and syncs the directory.
  void commit() {
    if (::fsync(fd_) != 0) fail("cannot sync", errno);
    int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail("cannot write", errno);
    if (::rename(tmp_.data(), path_.c_str()) != 0) fail("cannot replace", errno);
    unregisterTemporary(tmp_.data());
    tmp_.clear();
    // Make the rename itself durable; a failure here leaves a complete file, so it is not an
    // error.
    int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  void discard() {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
    if (!tmp_.empty()) {
      unregisterTemporary(tmp_.data());
      ::unlink(tmp_.data());
    }
    tmp_.clear();
  }

  std::string path_, shown_, dir_;
  std::vector<char> tmp_;  // NUL-terminated; empty once renamed or removed
  int fd_ = -1;
};

namespace {

// Writes to a temporary file beside `path` and renames it into place.
void replaceAtomically(const std::string& path, const std::string& shown,
                       const std::function<void(const ChunkSink&)>& produce) {
  TemporaryBeside tmp(path, shown);
  // A write error surfaces from inside produce; anything produce throws (a write error or its
  // own) removes the temporary (TemporaryBeside's destructor) and leaves the target as it was.
  struct WriteFailed {
    int err;
  };
  try {
    BlockWriter out(tmp.fd());
    produce([&](std::string_view chunk) {
      if (!out.write(chunk)) throw WriteFailed{errno};
    });
    if (!out.finish()) throw WriteFailed{errno};
  } catch (const WriteFailed& w) {
    tmp.fail("cannot write", w.err);
  }
  tmp.commit();
}

// What writeFileAtomic does with a path, once links are followed.
enum class Destination { Descriptor, Replace, InPlace };
struct OutputTarget {
  Destination kind;
  std::string path;  // the descriptor's number for Descriptor; the final target otherwise
  int fd = -1;
  bool regular = false;  // InPlace: a regular file under /dev, /proc or /sys (truncated)
};

OutputTarget outputTarget(const std::string& path) {
  if (int fd = descriptorPath(path); fd >= 0) return {Destination::Descriptor, path, fd};
  if (path.empty()) pathError("<output>", "empty output path");
  std::string target = followLinks(path);
  struct stat st;
  if (::stat(target.c_str(), &st) != 0) {
    if (errno != ENOENT) ioError(path, "cannot write", errno);
    return {Destination::Replace, target};  // a new file
  }
  // A system directory holds device nodes and kernel files, never an output of ours: whatever
  // sits there (even a regular file where /dev/null should be) is written in place.
  const bool system_dir =
      target.starts_with("/dev/") || target.starts_with("/proc/") || target.starts_with("/sys/");
  if (S_ISREG(st.st_mode) && !system_dir) return {Destination::Replace, target};
  if (S_ISREG(st.st_mode) || S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))
    return {Destination::InPlace, target, -1, S_ISREG(st.st_mode)};
  if (S_ISDIR(st.st_mode)) ioError(path, "cannot write", EISDIR);
  pathError(path, std::string("refusing to write to a ") +
                      (S_ISSOCK(st.st_mode)  ? "socket"
                       : S_ISBLK(st.st_mode) ? "block device"
                                             : "special file") +
                      " (outputs go to regular files, character devices or FIFOs)");
}

// Opens an existing device, FIFO or system file for writing in place (see writeInPlace).
int openInPlace(const std::string& path, const std::string& shown, bool regular) {
  int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC | (regular ? O_TRUNC : 0));
  if (fd < 0) ioError(shown, "cannot open for writing", errno);
  struct stat st;
  if (fstat(fd, &st) != 0 ||
      !(regular ? S_ISREG(st.st_mode) : S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    // Replaced by something else between the check and the open: do not write a regular file
    // in place, which could leave it partial.
    ::close(fd);
    pathError(shown, "the output changed while it was opened; not written");
  }
  return fd;
}

}  // namespace

void writeFileAtomic(const std::string& path, const std::string& contents) {
  writeFileAtomic(path, [&](const ChunkSink& sink) { sink(contents); });
}

void writeFileAtomic(const std::string& path,
                     const std::function<void(const ChunkSink&)>& produce) {
  // Descriptors, devices and FIFOs cannot be replaced atomically: they get the whole contents
  // once made, so a failure while making them writes nothing there.
  auto whole = [&] {
    std::string contents;
    produce([&](std::string_view chunk) { contents.append(chunk); });
    return contents;
  };
  OutputTarget t = outputTarget(path);
  switch (t.kind) {
    case Destination::Descriptor:
      writeToDescriptor(t.fd, path == "-" ? "<stdout>" : path, whole());
      return;
    case Destination::Replace:
      replaceAtomically(t.path, path, produce);
      return;
    case Destination::InPlace:
      writeInPlace(t.path, path, whole(), t.regular);
      return;
  }
}

StreamedOutput::StreamedOutput(const std::string& path) : shown_(path == "-" ? "<stdout>" : path) {
  OutputTarget t = outputTarget(path);
  if (t.kind == Destination::Descriptor) {
    fd_ = t.fd;
  } else if (t.kind == Destination::InPlace) {
    fd_ = openInPlace(t.path, path, t.regular);
    own_fd_ = true;
  } else {
    tmp_ = std::make_unique<TemporaryBeside>(t.path, path);
    fd_ = tmp_->fd();
  }
}

StreamedOutput::~StreamedOutput() {
  if (own_fd_) ::close(fd_);
}

void StreamedOutput::write(std::string_view text) {
  if (fd_ < 0) pathError(shown_, "written after it was closed");
  if (writeAll(fd_, text)) return;
  int err = errno;
  if (tmp_) tmp_->fail("cannot write", err);
  ioError(shown_, "cannot write", err);
}

void StreamedOutput::commit() {
  if (fd_ < 0) return;
  int fd = std::exchange(fd_, -1);
  if (tmp_) {
    tmp_->commit();
    tmp_.reset();
  } else if (own_fd_) {
    own_fd_ = false;
    if (::close(fd) != 0) ioError(shown_, "cannot write", errno);
  }
}

void saveGraph(const Graph& g, const std::string& path, GraphFormat format) {
  writeFileAtomic(path, [&](const ChunkSink& sink) {
    if (format == GraphFormat::Json)
      writeJsonGraph(g, sink);
    else
      printTextGraph(g, sink);
  });
}

std::optional<std::string> sameFileAs(const std::string& output,
                                      const std::vector<std::string>& inputs) {
  if (output.empty() || descriptorPath(output) >= 0) return std::nullopt;
  struct stat out;
  if (::stat(output.c_str(), &out) != 0) {
    // Directories an output's path names are made before it is written ("new/../g.json"): the
    // path they will give, with the existing part's links followed.
    std::error_code ec;
    std::string resolved = std::filesystem::weakly_canonical(output, ec).string();
    if (ec || ::stat(resolved.c_str(), &out) != 0) return std::nullopt;
  }
  // Devices are written in place and read as streams; /dev/null as both input and output is fine.
  if (!S_ISREG(out.st_mode)) return std::nullopt;
  for (const std::string& in : inputs) {
    if (in.empty() || descriptorPath(in) >= 0) continue;
    struct stat st;
    if (::stat(in.c_str(), &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino)
      return in;
  }
  return std::nullopt;
}

}  // namespace jfx
