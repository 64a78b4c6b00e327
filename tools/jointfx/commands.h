// Subcommands of the `jointfx` binary. main.cc builds the CLI11 app and calls each add*Command;
// each subcommand lives in its own cmd_<name>.cc. Exit codes: 0 ok, 1 verification failed,
// 2 usage or input error.
#pragma once

#include <CLI/CLI.hpp>

namespace jfx::cli {

enum ExitCode : int { kOk = 0, kVerifyFailed = 1, kInputError = 2 };

// Each registers its subcommand; when the subcommand runs, its callback stores the exit code in
// `exit_code`. Errors are printed to stderr as "jointfx <cmd>: <message>".
void addOptCommand(CLI::App& app, int& exit_code);        // cmd_opt.cc
void addVerifyCommand(CLI::App& app, int& exit_code);     // cmd_verify.cc
void addConvertCommand(CLI::App& app, int& exit_code);    // cmd_convert.cc
void addStatsCommand(CLI::App& app, int& exit_code);      // cmd_stats.cc
void addSynthCommand(CLI::App& app, int& exit_code);      // cmd_synth.cc
void addPassesCommand(CLI::App& app, int& exit_code);     // cmd_passes.cc: lists the registry
void addAnalyzeCommand(CLI::App& app, int& exit_code);    // cmd_analyze.cc (memory, simulator)
void addExecCommand(CLI::App& app, int& exit_code);       // cmd_exec.cc (runtime; stub message
                                                          // when built without LibTorch)
void addCalibrateCommand(CLI::App& app, int& exit_code);  // cmd_calibrate.cc (runtime)
void addParityCommand(CLI::App& app, int& exit_code);     // cmd_parity.cc (registered by
                                                          // addExecCommand)

}  // namespace jfx::cli
