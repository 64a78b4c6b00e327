// The command-line options `jointfx exec` and `jointfx parity` share (CLI11). Header-only and
// torch-free: the CLI includes it whether or not the runtime is built. The option wiring lives
// here, not in runtime/, so that the runtime does not depend on CLI11.
#pragma once

#include <CLI/CLI.hpp>

#include "runtime/exec_command.h"
#include "tools/jointfx/cli_range.h"

namespace jfx::cli {

// Everything of ExecOptions but the graph and the outputs (exec adds those itself; parity sets
// them per run).
inline void addRunOptions(CLI::App* cmd, rt::ExecOptions& o) {
  cmd->add_option("--nproc", o.nproc,
                  "Ranks to launch on this host (ignored when RANK/WORLD_SIZE are set, as under "
                  "torchrun)")
      ->check(IntRange(1, 4096));
  cmd->add_option("--steps", o.steps, "Training steps")->check(IntRange(1, 1000000000));
  cmd->add_option("--device", o.device, "cpu (gloo) or cuda (NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--timeout-s", o.timeout_s,
                  "Seconds before a rendezvous or collective gives up (a failed rank never "
                  "leaves the others hanging longer); a rank that finishes no node for 5 s more "
                  "ends itself")
      ->check(IntRange(1, 86400 * 365));
  cmd->add_option("--gloo-threads", o.gloo_threads,
                  "Worker threads per gloo group. 2 (PyTorch's default) lets collectives in flight "
                  "on one group overlap, but LibTorch 2.15's gloo then corrupts the heap now and "
                  "then (docs/executor.md, Limits)")
      ->check(IntRange(1, 64));
  cmd->add_flag("!--gloo-separate-groups", o.gloo_share_groups,
                "One gloo backend per group name; by default groups over the same ranks (`0` and "
                "split-comm-groups' `0_rs`) share one, which is faster where the ranks fill the "
                "cores (docs/executor.md)");
  cmd->add_option("--seed", o.seed, "Seed of the generated parameters and batches");
  cmd->add_option("--params", o.params,
                  "safetensors file of full parameters (and buffers) by FQN; default: seeded "
                  "init, the same on every rank")
      ->check(NonEmpty());
  cmd->add_option("--batch", o.batch,
                  "safetensors file of user inputs by placeholder name (the local batch, or "
                  "the global batch along dim 0); default: seeded per step")
      ->check(NonEmpty());
  cmd->add_option("--optimizer", o.optimizer, "sgd, adamw or none")
      ->check(CLI::IsMember({"sgd", "adamw", "none"}));
  cmd->add_option("--lr", o.lr, "Learning rate");
  cmd->add_option("--momentum", o.momentum, "SGD momentum");
  cmd->add_option("--weight-decay", o.weight_decay, "Weight decay (SGD and AdamW)");
  cmd->add_option("--beta1", o.beta1, "AdamW beta1");
  cmd->add_option("--beta2", o.beta2, "AdamW beta2");
  cmd->add_option("--eps", o.eps, "AdamW epsilon");
  cmd->add_option("--int-high", o.int_high,
                  "Exclusive bound of generated integer inputs (default: from the graph: "
                  "embedding rows, loss classes)")
      ->check(IntRange(0, 2147483647));
  cmd->add_option("--threads", o.threads, "Intra-op threads per rank (default: cores / ranks)")
      ->check(IntRange(0, 4096));
  cmd->add_flag("!--no-check-meta", o.check_meta,
                "Do not compare op outputs with the graph's tensor meta");
  cmd->add_flag("--profile", o.profile,
                "Time every node; rank 0 prints the time per op target at the end (stderr)");
  cmd->add_flag("!--no-measure-memory", o.measure_memory,
                "Do not measure each step's peak of live tensor bytes (the log's peak_bytes)");
  // Failure injection for the launcher's tests; hidden from --help.
  cmd->add_option("--debug-fail-rank", o.debug_fail_rank)->group("");
  cmd->add_option("--debug-fail-step", o.debug_fail_step)->group("");
  cmd->add_option("--debug-fail-mode", o.debug_fail_mode)->group("");
  // Set by the launcher for its ranks (the data was checked before launch); hidden.
  cmd->add_flag("--data-checked", o.data_checked)->group("");
}

}  // namespace jfx::cli
