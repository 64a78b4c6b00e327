// jointfx: one binary, one subcommand per cmd_<name>.cc (see commands.h for the exit codes).
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(JFX_MIMALLOC)
#include <mimalloc.h>
#endif

#include "ir/io.h"
#include "tools/jointfx/cli_range.h"
#include "tools/jointfx/commands.h"

namespace {

// Which allocator serves malloc in this process (tools/CMakeLists.txt links mimalloc): asked of
// a block malloc hands out, so a link order that left libc's malloc in front shows.
std::string allocatorName() {
#if defined(JFX_MIMALLOC)
  void* p = std::malloc(64);
  const bool served = mi_is_in_heap_region(p);
  std::free(p);
  const int v = mi_version();
  const std::string name = "mimalloc " + std::to_string(v / 100) + "." +
                           std::to_string(v / 10 % 10) + "." + std::to_string(v % 10);
  return served ? name : "the C library's malloc (" + name + " linked but not serving it)";
#else
  return "the C library's malloc";
#endif
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  // Tables of 4 MiB and more (per-id side tables, analysis results) are mapped on their own and
  // unmapped when freed. glibc's default threshold starts at 128 KiB but rises to the size of
  // each mapped block freed, up to 32 MiB, after which such tables come from the heap and, once
  // freed, stay resident between the nodes allocated around them: after bucket the graph held
  // free heap that a fixed threshold gives back (bench/README.md, "Figures behind the code").
  // (For a build without mimalloc: where mimalloc serves malloc, glibc's settings go unused.)
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
#endif
#if defined(JFX_MIMALLOC)
  // Freed pages stay committed for a second (mimalloc's default: 25 ms) before they go back to
  // the system, so the per-node tables each pass and analysis makes and drops reuse the pages of
  // the last one instead of faulting fresh ones in: fewer page faults for a little more peak
  // RSS (bench/README.md, "Direct I/O for outputs, fewer page faults"). An environment setting
  // (MIMALLOC_DECOMMIT_DELAY) still wins: mimalloc reads it first.
  if (std::getenv("MIMALLOC_DECOMMIT_DELAY") == nullptr)
    mi_option_set(mi_option_decommit_delay, 1000);
  // mimalloc's `new` (built as C) aborts when memory runs out instead of calling the new
  // handler; its error callback comes first, and ends the run as the handler would.
  mi_register_error(
      [](int err, void*) {
        if (err == ENOMEM) jfx::exitOutOfMemory();
      },
      nullptr);
#endif
  using namespace jfx::cli;
  CLI::App app{"jointfx: compiler passes over PyTorch joint forward+backward FSDP graphs"};
  app.set_version_flag("--version",
                       "jointfx 0.1 (graph format 1; allocator: " + allocatorName() + ")");
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 ok, 1 verification failed, 2 usage or input error, 3 a run or write "
      "failed (exec, out of memory).");
  clipParseErrors(app);
  // Given before or after the subcommand (fallthrough): `jointfx verify g.json --max-input-mib 8`.
  int64_t max_input_mib = static_cast<int64_t>(jfx::kDefaultInputLimitBytes >> 20);
  app.add_option("--max-input-mib", max_input_mib,
                 "Refuse input files (graphs, pipelines, hardware profiles, safetensors) larger "
                 "than this many MiB (default " +
                     std::to_string(max_input_mib) + ")")
      ->check(IntRange(1, int64_t{1} << 24))
      ->each([](const std::string& v) { jfx::setInputSizeLimit(std::stoull(v) << 20); });
  app.fallthrough();
  // Out of memory: a message, no temporary left beside an output, exit 3 (not an abort).
  jfx::installOutOfMemoryHandler(3);
  int exit_code = kOk;
  addOptCommand(app, exit_code);
  addVerifyCommand(app, exit_code);
  addConvertCommand(app, exit_code);
  addStatsCommand(app, exit_code);
  addSynthCommand(app, exit_code);
  addPassesCommand(app, exit_code);
  addAnalyzeCommand(app, exit_code);
  addExecCommand(app, exit_code);
  addCalibrateCommand(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version come here too, with exit code 0.
    return app.exit(e) == 0 ? kOk : kInputError;
  } catch (const std::exception& e) {
    // Subcommands catch their own errors; this is the last line of defence against a crash.
    std::cerr << "jointfx: internal error: " << e.what() << "\n";
    return kInputError;
  }
  return exit_code;
}
