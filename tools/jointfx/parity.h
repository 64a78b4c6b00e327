// `jointfx parity`: runs graph A and graph B (or A after pass pipelines) through `jointfx exec`
// with identical options and compares their loss and gradients bit for bit (docs/executor.md).
// It lives in the CLI, not in runtime/, because it runs pass pipelines: the runtime depends on
// ir/ only. Built only with the runtime (JFX_HAVE_RUNTIME).
#pragma once

#include <string>
#include <vector>

#include "runtime/exec_command.h"

namespace jfx::cli {

struct ParityOptions {
  std::string a;  // the reference graph
  std::string b;  // the graph to compare; empty: `a` after each of `pipelines`
  // Pass pipelines (text or configs/pipelines/*.json), each compared with one shared run of `a`;
  // none: `a` round-tripped through JSON.
  std::vector<std::string> pipelines;
  std::string keep;      // keep the run directories here (default: a temp dir, removed)
  rt::ExecOptions exec;  // nproc, steps, seed, data, optimizer... (graph and outputs set per run)
};

// Runs A once and every B (the second graph, or A after each pipeline) with identical options,
// comparing the loss and every gradient of every step on every rank bit for bit, one report line
// per B. 0 all identical, 1 some B differs, 2/3 as rt::runExec.
int runParity(const ParityOptions& o);

}  // namespace jfx::cli
