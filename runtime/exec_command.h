// Entry points of `jointfx exec` and `jointfx parity`. Torch-free, so the CLI's translation units
// never include LibTorch headers; docs/executor.md describes the options and files.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/types.h"

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
  std::string save_grads;         // directory: grads.step<S>.rank<R>.safetensors (+ "__loss__")
  std::string save;               // directory: state.rank<R>.safetensors after the last step
  std::string log;                // JSONL of losses; "{rank}" in the path gives one file per rank
  std::string progress = "auto";  // auto (a TTY) | always | never; rank 0 only, on stderr
  bool check_meta = true;         // compare every op's output with the graph's tensor meta
  bool quiet = false;             // no per-step loss lines on stdout
  bool profile = false;           // time every node; rank 0 prints seconds per target at the end
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

// The argv (after the program name) that makes a rank process run `o`.
std::vector<std::string> execArgs(const ExecOptions& o);

struct ParityOptions {
  std::string a;  // the reference graph
  std::string b;  // the graph to compare; empty: `a` after each of `pipelines`
  // Pass pipelines (text or configs/pipelines/*.json), each compared with one shared run of `a`;
  // none: `a` round-tripped through JSON.
  std::vector<std::string> pipelines;
  std::string keep;  // keep the run directories here (default: a temp dir, removed)
  ExecOptions exec;  // nproc, steps, seed, data, optimizer... (graph and outputs are set per run)
};

// Runs A once and every B (the second graph, or A after each pipeline) with identical options,
// comparing the loss and every gradient of every step on every rank bit for bit, one report line
// per B. 0 all identical, 1 some B differs, 2/3 as runExec.
int runParity(const ParityOptions& o);

// Units in the last place between A and B, largest per step (index step - 1): how far apart
// the values are where they differ. -1 where a value is not a float or is NaN in one only.
struct ParityUlp {
  std::vector<int64_t> loss;       // "__loss__"
  std::vector<int64_t> gradients;  // every other entry
};

// Byte-level comparison of two directories written by --save-grads (used by runParity; exposed
// for tests). Appends one line per difference to `report`; returns true when identical. With
// `ulp`, also the largest ulp distance per step for the loss and for the gradients. Entries named
// "buffer:<fqn>" are the buffers the graph updates, after the step's update; `buffers` (when
// given) is set to whether A's files hold any.
bool compareGradDirs(const std::string& dir_a, const std::string& dir_b, int nproc, int steps,
                     std::vector<std::string>& report, ParityUlp* ulp = nullptr,
                     bool* buffers = nullptr);

// Units in the last place between two floats of one dtype (same sign: bit distance; else the
// sum of both distances from zero). -1 when either is NaN and they are not both NaN.
int64_t ulpDistance(ScalarType t, std::string_view a, std::string_view b, size_t i);

}  // namespace jfx::rt
