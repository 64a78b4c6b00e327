#include "ir/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
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

std::string readAll(int fd, const std::string& path) {
  std::string data;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) data.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      ioError(path, "cannot read", errno);
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
bool writeAll(int fd, const std::string& data) {
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

}  // namespace

std::optional<GraphFormat> formatFromPath(const std::string& path) {
  if (ends_with(path, ".json")) return GraphFormat::Json;
  if (ends_with(path, ".jfx")) return GraphFormat::Text;
  return std::nullopt;
}

std::unique_ptr<Graph> loadGraph(const std::string& path) {
  if (path == "-") {
    std::string data = readAll(STDIN_FILENO, "<stdin>");
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
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ioError(path, "cannot open", errno);
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    ioError(path, "cannot read", EISDIR);
  }
  std::string data;
  try {
    data = readAll(fd, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return *format == GraphFormat::Json ? readJsonGraph(data, path) : parseTextGraph(data, path);
}

std::string serializeGraph(const Graph& g, GraphFormat format) {
  return format == GraphFormat::Json ? writeJsonGraph(g) : printTextGraph(g);
}

void writeFileAtomic(const std::string& path, const std::string& contents) {
  if (path == "-") {
    if (!writeAll(STDOUT_FILENO, contents)) ioError("<stdout>", "cannot write", errno);
    return;
  }
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
  if (fd < 0) ioError(path, "cannot create a temporary file in '" + dir + "'", errno);
  auto fail = [&](const std::string& what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.data());
    ioError(path, what, err);
  };
  // mkstemp makes the file 0600; keep an existing target's mode, else the usual 0644.
  struct stat st;
  mode_t mode = ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644;
  if (::fchmod(fd, mode) != 0) fail("cannot set the mode of the temporary file");
  if (!writeAll(fd, contents)) fail("cannot write");
  if (::fsync(fd) != 0) fail("cannot sync");
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.data());
    ioError(path, "cannot write", err);
  }
  if (::rename(tmp.data(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.data());
    ioError(path, "cannot replace", err);
  }
  // Make the rename itself durable; a failure here leaves a complete file, so it is not an error.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void saveGraph(const Graph& g, const std::string& path, GraphFormat format) {
  writeFileAtomic(path, serializeGraph(g, format));
}

}  // namespace jfx
