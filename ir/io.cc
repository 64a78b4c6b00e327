#include "ir/io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

std::string readInputFile(const std::string& path, std::string_view what, bool binary) {
  if (path == "-") return readAll(STDIN_FILENO, "<stdin>", what, binary);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ioError(path, "cannot open the " + std::string(what), errno);
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
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
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
void writeInPlace(const std::string& path, const std::string& shown, const std::string& contents,
                  bool regular) {
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
  if (!writeAll(fd, contents)) {
    int err = errno;
    ::close(fd);
    ioError(shown, "cannot write", err);
  }
  if (::close(fd) != 0) ioError(shown, "cannot write", errno);
}

// Writes to a temporary file beside `path` and renames it into place. `shown` names the output
// in errors (the path the user gave, not a link's target).
void replaceAtomically(const std::string& path, const std::string& shown,
                       const std::function<void(const ChunkSink&)>& produce) {
  // The temporary lives in the target's directory so rename() stays on one file system and is
  // atomic: readers see the old file or the new one, never a partial one.
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string tmpl =
      (slash == std::string::npos ? "" : path.substr(0, slash + 1)) + "." + base + ".tmp.XXXXXX";
  std::vector<char> tmp(tmpl.begin(), tmpl.end());
  tmp.push_back('\0');
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) ioError(shown, "cannot create a temporary file in '" + dir + "'", errno);
  auto fail = [&](const std::string& what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.data());
    ioError(shown, what, err);
  };
  // mkstemp makes the file 0600; keep an existing target's mode, else the usual 0644.
  struct stat st;
  mode_t mode = ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644;
  if (::fchmod(fd, mode) != 0) fail("cannot set the mode of the temporary file");
  // A write error surfaces from inside produce; anything produce throws (a write error or its
  // own) removes the temporary and leaves the target as it was.
  struct WriteFailed {
    int err;
  };
  try {
    BlockWriter out(fd);
    produce([&](std::string_view chunk) {
      if (!out.write(chunk)) throw WriteFailed{errno};
    });
    if (!out.finish()) throw WriteFailed{errno};
  } catch (const WriteFailed& w) {
    errno = w.err;
    fail("cannot write");
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.data());
    throw;
  }
  if (::fsync(fd) != 0) fail("cannot sync");
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.data());
    ioError(shown, "cannot write", err);
  }
  if (::rename(tmp.data(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.data());
    ioError(shown, "cannot replace", err);
  }
  // Make the rename itself durable; a failure here leaves a complete file, so it is not an error.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
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
  if (int fd = descriptorPath(path); fd >= 0) {
    writeToDescriptor(fd, path == "-" ? "<stdout>" : path, whole());
    return;
  }
  if (path.empty()) pathError("<output>", "empty output path");
  std::string target = followLinks(path);
  struct stat st;
  if (::stat(target.c_str(), &st) != 0) {
    if (errno != ENOENT) ioError(path, "cannot write", errno);
    replaceAtomically(target, path, produce);  // a new file
    return;
  }
  // A system directory holds device nodes and kernel files, never an output of ours: whatever
  // sits there (even a regular file where /dev/null should be) is written in place.
  const bool system_dir =
      target.starts_with("/dev/") || target.starts_with("/proc/") || target.starts_with("/sys/");
  if (S_ISREG(st.st_mode) && !system_dir) {
    replaceAtomically(target, path, produce);
  } else if (S_ISREG(st.st_mode) || S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
    writeInPlace(target, path, whole(), S_ISREG(st.st_mode));
  } else if (S_ISDIR(st.st_mode)) {
    ioError(path, "cannot write", EISDIR);
  } else {
    pathError(path, std::string("refusing to write to a ") +
                        (S_ISSOCK(st.st_mode)  ? "socket"
                         : S_ISBLK(st.st_mode) ? "block device"
                                               : "special file") +
                        " (outputs go to regular files, character devices or FIFOs)");
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

}  // namespace jfx
