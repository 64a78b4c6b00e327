#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ir/error.h"
#include "ir/hash.h"
#include "ir/io.h"
#include "ir/json_format.h"
#include "ir/text_format.h"
#include "tools/synth/synth.h"

using namespace jfx;
namespace fs = std::filesystem;

namespace {

const char* kGraph = R"(jointfx.graph 1
group "0" size=2 ranks=[0, 1]
default_device "cpu"

%w : f32[4, 8] = placeholder {input=parameter, fqn="w"}
%ag : f32[8, 8] = _c10d_functional.all_gather_into_tensor.default(%w, 2, "0") {phase=forward}
%output = output([%ag])
)";

// A fresh directory per test, removed afterwards.
struct TempDir {
  fs::path path;
  explicit TempDir(const fs::path& in = fs::temp_directory_path()) {
    std::string tmpl = (in / "jfx_io_XXXXXX").string();
    const char* made = ::mkdtemp(tmpl.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp in " + in.string() + " failed");
    path = made;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
  std::string file(const char* name) const { return (path / name).string(); }
  size_t entries() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(path), {}));
  }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const JfxError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("io: formatFromPath", "[format]") {
  CHECK(formatFromPath("a/b.json") == GraphFormat::Json);
  CHECK(formatFromPath("b.jfx") == GraphFormat::Text);
  CHECK(!formatFromPath("b.txt"));
  CHECK(!formatFromPath("json"));
  CHECK(!formatFromPath("-"));
}

TEST_CASE("io: save and load in both formats", "[format]") {
  TempDir dir;
  auto g = parseTextGraph(kGraph, "g.jfx");
  for (GraphFormat f : {GraphFormat::Json, GraphFormat::Text}) {
    std::string path = dir.file(f == GraphFormat::Json ? "g.json" : "g.jfx");
    saveGraph(*g, path, f);
    CHECK(slurp(path) == serializeGraph(*g, f));
    auto back = loadGraph(path);
    CHECK(printTextGraph(*back) == kGraph);
    CHECK(structuralHash(*back) == structuralHash(*g));
    struct stat st;
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0644);
  }
  CHECK(dir.entries() == 2);  // no temporaries left behind
}

TEST_CASE("io: writeFileAtomic replaces a file and keeps its mode", "[format]") {
  TempDir dir;
  std::string path = dir.file("out.jfx");
  writeFileAtomic(path, "old\n");
  ::chmod(path.c_str(), 0600);
  writeFileAtomic(path, "new\n");
  CHECK(slurp(path) == "new\n");
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(dir.entries() == 1);
}

TEST_CASE("io: failed writes leave the target untouched and no temporary", "[format]") {
  TempDir dir;
  // The target is a directory: rename fails, the directory and its contents stay.
  std::string target = dir.file("target.json");
  fs::create_directory(target);
  std::ofstream(target + "/keep") << "x";
  std::string e = errorOf([&] { writeFileAtomic(target, "data"); });
  CHECK(e.find(target) != std::string::npos);
  CHECK(fs::is_directory(target));
  CHECK(slurp(target + "/keep") == "x");
  CHECK(dir.entries() == 1);

  // The directory does not exist.
  std::string missing = dir.file("no/such/dir/g.json");
  e = errorOf([&] { writeFileAtomic(missing, "data"); });
  CHECK(e.find(missing) != std::string::npos);
  CHECK(e.find("temporary") != std::string::npos);

  // A read-only directory (skipped as root, who can write anyway).
  if (::geteuid() != 0) {
    std::string ro = dir.file("ro");
    fs::create_directory(ro);
    std::ofstream(ro + "/g.json") << "original";
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    e = errorOf([&] { writeFileAtomic(ro + "/g.json", "new"); });
    CHECK(e.find("g.json") != std::string::npos);
    CHECK(slurp(ro + "/g.json") == "original");
    fs::permissions(ro, fs::perms::owner_all);
  }
}

TEST_CASE("io: load errors name the file", "[format]") {
  TempDir dir;
  std::string missing = dir.file("missing.json");
  std::string e = errorOf([&] { loadGraph(missing); });
  CHECK(e.rfind(missing, 0) == 0);
  CHECK(e.find("cannot open") != std::string::npos);

  std::string unknown = dir.file("graph.txt");
  std::ofstream(unknown) << kGraph;
  e = errorOf([&] { loadGraph(unknown); });
  CHECK(e.rfind(unknown, 0) == 0);
  CHECK(e.find(".json or .jfx") != std::string::npos);

  std::string a_dir = dir.file("d.jfx");
  fs::create_directory(a_dir);
  e = errorOf([&] { loadGraph(a_dir); });
  CHECK(e.rfind(a_dir, 0) == 0);

  std::string bad = dir.file("bad.jfx");
  std::ofstream(bad) << "jointfx.graph 1\n%x = nope(\n";
  e = errorOf([&] { loadGraph(bad); });
  CHECK(e.rfind(bad + ":2:", 0) == 0);

  std::string bad_json = dir.file("bad.json");
  std::ofstream(bad_json) << "{\"format\":\"jointfx.graph\",\"version\":1,\"nodes\":[{]}";
  e = errorOf([&] { loadGraph(bad_json); });
  CHECK(e.rfind(bad_json + ":1:", 0) == 0);
}

// ---- output paths: what writeFileAtomic does with what already sits at the path

TEST_CASE("io: a symlink to a regular file: the target is replaced atomically, the link stays",
          "[format][output]") {
  TempDir dir;
  std::string target = dir.file("real.jfx");
  std::string link = dir.file("link.jfx");
  writeFileAtomic(target, "old\n");
  ::chmod(target.c_str(), 0640);
  REQUIRE(::symlink("real.jfx", link.c_str()) == 0);  // relative, resolved against the link
  writeFileAtomic(link, "new\n");
  CHECK(fs::is_symlink(link));
  CHECK(fs::read_symlink(link) == "real.jfx");
  CHECK(slurp(target) == "new\n");
  struct stat st;
  REQUIRE(::stat(target.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
  CHECK(dir.entries() == 2);  // no temporaries left

  // A chain of links, one absolute.
  std::string link2 = dir.file("link2.jfx");
  REQUIRE(::symlink(link.c_str(), link2.c_str()) == 0);
  writeFileAtomic(link2, "newer\n");
  CHECK(fs::is_symlink(link2));
  CHECK(fs::is_symlink(link));
  CHECK(slurp(target) == "newer\n");

  // A dangling link: its target is created, the link stays and now resolves.
  std::string dangling = dir.file("dangling.jfx");
  REQUIRE(::symlink("sub/created.jfx", dangling.c_str()) == 0);
  fs::create_directory(dir.file("sub"));
  writeFileAtomic(dangling, "created\n");
  CHECK(fs::is_symlink(dangling));
  CHECK(slurp(dir.file("sub/created.jfx")) == "created\n");

  // A link loop is an error, and nothing is written.
  std::string a = dir.file("a.jfx"), b = dir.file("b.jfx");
  REQUIRE(::symlink(b.c_str(), a.c_str()) == 0);
  REQUIRE(::symlink(a.c_str(), b.c_str()) == 0);
  std::string e = errorOf([&] { writeFileAtomic(a, "x"); });
  CHECK(e.find(a) != std::string::npos);
  CHECK(fs::is_symlink(a));
  CHECK(fs::is_symlink(b));
}

TEST_CASE("io: a FIFO is written to, never replaced", "[format][output]") {
  TempDir dir;
  std::string fifo = dir.file("out.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string got;
  // The reader opens the FIFO on its own thread: opening it for writing waits for a reader.
  std::thread reader([&] { got = slurp(fifo); });
  writeFileAtomic(fifo, "through the pipe\n");
  reader.join();
  CHECK(got == "through the pipe\n");
  struct stat st;
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(dir.entries() == 1);
}

TEST_CASE("io: a character device is written to, never replaced", "[format][output]") {
  // Only through a link in a temporary directory, so the device node itself is never the path
  // given: if the code were wrong it would replace the link, not /dev/null.
  TempDir dir;
  struct stat before;
  // If something else already replaced /dev/null, writing through it tests nothing: fail first.
  REQUIRE(::stat("/dev/null", &before) == 0);
  REQUIRE(S_ISCHR(before.st_mode));
  std::string link = dir.file("null.jfx");
  REQUIRE(::symlink("/dev/null", link.c_str()) == 0);
  writeFileAtomic(link, "discarded\n");
  struct stat st;
  REQUIRE(::lstat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  CHECK(fs::is_symlink(link));
  CHECK(dir.entries() == 1);
}

TEST_CASE("io: standard streams are written, never reopened or replaced", "[format][output]") {
  // /dev/stdout of this process: redirect fd 1 into a file for the duration.
  TempDir dir;
  std::string file = dir.file("captured.txt");
  std::fflush(stdout);
  int saved = ::dup(STDOUT_FILENO);
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  ::dup2(fd, STDOUT_FILENO);
  ::close(fd);
  writeFileAtomic("/dev/stdout", "one\n");
  writeFileAtomic("-", "two\n");
  writeFileAtomic("/proc/self/fd/1", "three\n");
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  // Appended through the descriptor: nothing reopened the file (which would have truncated it)
  // and nothing renamed over it.
  CHECK(slurp(file) == "one\ntwo\nthree\n");
  CHECK(dir.entries() == 1);
}

TEST_CASE("io: other special files are refused", "[format][output]") {
  TempDir dir;
  std::string sock = dir.file("s.sock");
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  std::string e = errorOf([&] { writeFileAtomic(sock, "x"); });
  ::close(fd);
  CHECK(e.find("refusing to write to a socket") != std::string::npos);
  struct stat st;
  REQUIRE(::lstat(sock.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
}

// ---- input limits

TEST_CASE("io: inputs over the size limit are refused, NUL bytes end a text input", "[format]") {
  TempDir dir;
  std::string path = dir.file("big.jfx");
  std::ofstream(path) << kGraph << std::string(3 << 20, '#') << "\n";
  setInputSizeLimit(1 << 20);
  std::string e = errorOf([&] { loadGraph(path); });
  setInputSizeLimit(kDefaultInputLimitBytes);
  CHECK(e == path +
                 ": error: the graph is larger than the input limit of 1 MiB "
                 "(--max-input-mib raises it)");
  CHECK(loadGraph(path)->size() == 3);

  // /dev/zero through a link: stops at the first chunk, the parser names the NUL byte.
  std::string zero = dir.file("zero.jfx");
  REQUIRE(::symlink("/dev/zero", zero.c_str()) == 0);
  e = errorOf([&] { loadGraph(zero); });
  CHECK(e.find(zero + ":1:1: error: expected the header line 'jointfx.graph 1', found byte 0x00") ==
        0);
  std::string zero_json = dir.file("zero.json");
  REQUIRE(::symlink("/dev/zero", zero_json.c_str()) == 0);
  e = errorOf([&] { loadGraph(zero_json); });
  CHECK(e.find(zero_json + ":1:1: error: JSON syntax error at byte 0") == 0);
  // A regular file is mapped, not read through readInputFile; its text still ends just past the
  // first NUL byte, so the error is the same.
  for (const char* name : {"nul.jfx", "nul.json"}) {
    const std::string nul = dir.file(name);
    const std::string head = std::string(name).ends_with(".jfx") ? kGraph : "{\"format\":";
    std::ofstream(nul, std::ios::binary) << head << std::string("\0tail", 5);
    const std::string text = readInputFile(nul, "graph");
    CHECK(text.size() == head.size() + 1);
    e = errorOf([&] { loadGraph(nul); });
    CHECK(e.find(nul + ":") == 0);
    CHECK(e == errorOf([&] {
            std::string(name).ends_with(".jfx") ? parseTextGraph(text, nul)
                                                : readJsonGraph(text, nul);
          }));
  }
  // A mapped file that fills its last page exactly: nothing past the mapping is read (that page
  // would fault), in either format.
  const long page = ::sysconf(_SC_PAGESIZE);
  REQUIRE(page > 0);
  const std::string json_text = writeJsonGraph(*parseTextGraph(kGraph, "g"));
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{"page.jfx", kGraph}, {"page.json", json_text}}) {
    const std::string padded_path = dir.file(name.c_str());
    const size_t size = (text.size() / static_cast<size_t>(page) + 2) * static_cast<size_t>(page);
    std::string padded;
    if (name.ends_with(".jfx")) {  // a comment line fills the rest
      padded = text + "#";
      padded.resize(size - 1, '#');
      padded += '\n';
    } else {  // spaces before the document's closing brace, on the last byte
      padded = text.substr(0, text.rfind('}'));
      padded.resize(size - 1, ' ');
      padded += '}';
    }
    REQUIRE(padded.size() == size);
    std::ofstream(padded_path, std::ios::binary) << padded;
    INFO(name);
    CHECK(loadGraph(padded_path)->size() == 3);
  }

  // Binary readers keep NUL bytes.
  std::string bin = dir.file("b.bin");
  std::ofstream(bin, std::ios::binary) << std::string("a\0b", 3);
  CHECK(readInputFile(bin, "file", /*binary=*/true).size() == 3);
  CHECK(readInputFile(bin, "file").size() == 2);
}

TEST_CASE("io: graphs are streamed to their file in pieces, byte-identical to the whole document",
          "[format][output]") {
  // Large enough for several pieces in either format (about 9 MB of JSON, 3.5 MB of text).
  SynthConfig cfg;
  cfg.layers = 96;
  std::unique_ptr<Graph> g = synthLlamaJoint(cfg);
  TempDir dir;
  for (GraphFormat format : {GraphFormat::Json, GraphFormat::Text}) {
    const std::string whole = serializeGraph(*g, format);
    REQUIRE(whole.size() > 2 * kSinkChunkBytes);
    std::vector<size_t> pieces;
    std::string joined;
    const ChunkSink sink = [&](std::string_view chunk) {
      pieces.push_back(chunk.size());
      joined.append(chunk);
    };
    if (format == GraphFormat::Json)
      writeJsonGraph(*g, sink);
    else
      printTextGraph(*g, sink);
    CHECK(joined == whole);
    REQUIRE(pieces.size() >= 2);
    for (size_t k = 0; k + 1 < pieces.size(); ++k)
      CHECK(pieces[k] >= kSinkChunkBytes);  // about a piece at a time, not node by node
    const std::string path = dir.file(format == GraphFormat::Json ? "g.json" : "g.jfx");
    saveGraph(*g, path, format);
    CHECK(slurp(path) == whole);
  }
}

TEST_CASE("io: a producer that fails part way leaves the target untouched and no temporary",
          "[format][output]") {
  TempDir dir;
  const std::string target = dir.file("g.json");
  std::ofstream(target) << "original";
  auto produce = [](const ChunkSink& sink) {
    sink(std::string(3 * kSinkChunkBytes, 'x'));  // already in the temporary when it fails
    throw JfxError({}, "writer failed");
  };
  CHECK(errorOf([&] { writeFileAtomic(target, produce); }) == "error: writer failed");
  CHECK(slurp(target) == "original");
  CHECK(dir.entries() == 1);
  // A new file is not created either.
  const std::string fresh = dir.file("new.json");
  CHECK(errorOf([&] { writeFileAtomic(fresh, produce); }) == "error: writer failed");
  CHECK(!fs::exists(fresh));
  CHECK(dir.entries() == 1);
}

TEST_CASE("io: outputs over a block go to the device directly, byte for byte", "[format][output]") {
  // writeFileAtomic stages blocks of kDirectWriteBlock and writes them with O_DIRECT (the tail
  // through the page cache). Sizes around the block boundary, given in uneven pieces, on the test's
  // temporary directory and on tmpfs where there is one; each replaces the file the size before
  // wrote.
  constexpr size_t kBlock = kDirectWriteBlock;
  std::vector<std::unique_ptr<TempDir>> dirs;
  dirs.push_back(std::make_unique<TempDir>());
  if (fs::is_directory("/dev/shm") && ::access("/dev/shm", W_OK) == 0)
    dirs.push_back(std::make_unique<TempDir>("/dev/shm"));
  for (const auto& d : dirs) {
    const std::string path = d->file("big.json");
    for (size_t size :
         {size_t{0}, size_t{1}, kBlock - 1, kBlock, kBlock + 1, 2 * kBlock + 123'457}) {
      std::string contents(size, '\0');
      for (size_t i = 0; i < size; ++i)
        contents[i] = static_cast<char>('a' + (i * 7 + i / 4096) % 26);
      writeFileAtomic(path, [&](const ChunkSink& sink) {
        for (size_t at = 0, piece = 1; at < size; at += piece, piece = piece * 3 + 1)
          sink(std::string_view(contents).substr(at, std::min(piece, size - at)));
      });
      INFO(path << ", " << size << " bytes");
      CHECK(fs::file_size(path) == size);
      CHECK(slurp(path) == contents);
    }
    CHECK(d->entries() == 1);  // no temporary left
  }
}
