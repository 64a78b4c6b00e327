// Entry point of `jointfx exec` (parity runs it too: tools/jointfx/parity.h). Torch-free, so the
// CLI's translation units never include LibTorch headers; docs/executor.md describes the options
// and files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace jfx::rt {

// Exit codes of exec and parity (the CLI's 0/1/2 plus one for a failed rank).
enum ExecExit : int {
  kExecOk = 0,
  kExecMismatch = 1,    // parity: results differ
  kExecInputError = 2,  // bad options, unreadable graph or data, plan error, no CUDA device
  kExecRankFailed = 3,  // a rank failed at run time (op error, collective timeout, killed)
};

struct ExecOptions {
  std::string graph;  // .json or .jfx
  int nproc = 1;      // ignored when RANK/WORLD_SIZE are already set (torchrun)
  int steps = 1;
  std::string device = "cpu";  // "cpu" (gloo) or "cuda" (NCCL)
  int timeout_s = 300;         // rendezvous, every collective, the end-of-run barrier
  int gloo_threads = 1;        // worker threads per gloo group (2 is faster, see docs/executor.md)
  bool gloo_share_groups = true;  // groups over the same ranks share one gloo backend
  uint64_t seed = 0;
  std::string params;             // safetensors of full parameters by FQN; empty: seeded init
  std::string batch;              // safetensors of user inputs by placeholder name; empty: seeded
  std::string optimizer = "sgd";  // sgd | adamw | none
  double lr = 1e-3;
  double momentum = 0.0;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int int_high = 0;  // exclusive bound of generated integer inputs; 0: inferred from the graph
  int threads = 0;   // intra-op threads per rank; 0: cores / ranks
  std::string save_grads;  // directory: grads.step<S>.rank<R>.safetensors (+ "__loss__")
  std::string save;        // directory: state.rank<R>.safetensors after the last step
  std::string log;         // JSONL of losses; "{rank}" in the path gives one file per rank
  // CSV of the last step's measured live tensor bytes per node (Note [Measured memory]);
  // "{rank}" in the path gives one file per rank, else rank 0 only.
  std::string memory_csv;
  std::string progress = "auto";  // auto (a TTY) | always | never; rank 0 only, on stderr
  bool check_meta = true;         // compare every op's output with the graph's tensor meta
  bool quiet = false;             // no per-step loss lines on stdout
  bool profile = false;           // time every node; rank 0 prints seconds per target at the end
  bool measure_memory = true;     // each step's peak of live tensor bytes (Note [Measured memory])
  // Failure injection for tests: rank `debug_fail_rank` at step `debug_fail_step` exits
  // ("exit"), SIGKILLs itself ("kill"), hangs ("hang") or throws ("throw").
  int debug_fail_rank = -1;
  int debug_fail_step = 1;
  std::string debug_fail_mode = "exit";
  // Set by the launcher for its ranks: it checked --params and --batch once before launching
  // (runtime/trainer.h, preflight), so the ranks do not read and scan them again.
  bool data_checked = false;
};

// Validates `o`, then either runs this process as one rank (RANK/WORLD_SIZE set, or nproc 1) or
// launches nproc ranks of this executable and waits for them. Prints errors to stderr as
// "jointfx exec: ..." and returns an ExecExit code. Never throws.
int runExec(const ExecOptions& o);

// `path` with every "{rank}" replaced by `rank` (--log and --memory-csv: one file per rank).
std::string rankPath(std::string path, int rank);

// The first output of `o` (--log and --memory-csv for every rank of `world_size`, the files
// --save-grads and --save write) that is the same file as one of its inputs (the graph,
// --params, --batch), as "--log 'g.json' is the input graph": exec never overwrites an input.
// Empty when none is.
std::string outputOverwritesInput(const ExecOptions& o, int world_size);

// The argv (after the program name) that makes a rank process run `o`.
std::vector<std::string> execArgs(const ExecOptions& o);

}  // namespace jfx::rt
