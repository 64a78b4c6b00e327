// jointfx calibrate [--world N] [-o FILE] [--device cpu|cuda] [--quick]: measures this machine
// and writes a hardware profile for `jointfx analyze --hardware` (runtime/calibrate.h). Without
// the runtime (configured without -DJFX_WITH_TORCH=ON) the subcommand only says so.
#include <memory>
#include <string>

#include "passes/analysis/cost_model.h"
#include "passes/data_files.h"
#include "runtime/calibrate.h"
#include "tools/jointfx/cli_range.h"
#include "tools/jointfx/cli_util.h"
#include "tools/jointfx/commands.h"
#if JFX_HAVE_RUNTIME
#include "tools/jointfx/runtime_api.h"
#endif
#include "tools/synth/synth.h"

namespace jfx::cli {
#if JFX_HAVE_RUNTIME
namespace {

// The cost model's part in a calibration (runtime/calibrate.h): the roofline time of a chain's
// work at the rates just measured, and the check that a profile loads.
rt::CalibrateModel costModelForCalibrate() {
  rt::CalibrateModel m;
  m.work_seconds = [](const Graph& g, double peak_flops, double memory_bandwidth) {
    HardwareProfile measured;
    measured.name = "measured";
    measured.default_peak_flops = peak_flops;
    measured.memory_bandwidth = memory_bandwidth;
    CostModel roofline(measured);
    double sum = 0;
    for (const Node* n = g.first(); n; n = n->next())
      sum += roofline.computeSeconds(*n);
    return sum;
  };
  m.overhead_nodes = [](const Graph& g) {
    std::pair<int64_t, int64_t> counts{0, 0};
    for (const Node* n = g.first(); n; n = n->next()) {
      if (n->op() != OpKind::CallFunction) continue;
      ++(CostModel::isFree(*n) ? counts.second : counts.first);
    }
    return counts;
  };
  // The default workload: the tiny Llama-3 joint graph the fixtures are traced from, as synth
  // writes it (world 4 SimpleFSDP collectives, which calibrate makes local).
  m.default_workload = [] { return synthLlamaJoint(SynthConfig{}); };
  m.default_workload_label = "a synthetic tiny Llama-3 joint graph (jointfx synth's defaults)";
  m.check_profile = [](std::string_view text, const std::string& filename) {
    (void)parseHardwareProfile(text, filename);
  };
  return m;
}

}  // namespace
#endif

void addCalibrateCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<rt::CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Measure this machine (matmul rate per dtype, memory bandwidth, per-node executor "
      "overhead, collective latency and bandwidth on N ranks) and write a hardware profile for "
      "analyze --hardware");
  cmd->option_defaults()->always_capture_default();
  cmd->footer("Exit codes: 0 ok, 2 usage or input error (no CUDA device), 3 a rank failed.");
  cmd->add_option("--world", o->world, "Ranks (processes on this host) for the collectives")
      ->check(IntRange(1, 4096));
  cmd->add_option("-o,--output", o->output, "Profile to write (atomically); - for stdout");
  cmd->add_option(
         "--base", o->base,
         "Start from this profile (a file, or a shipped one by name: h100): fields calibrate does "
         "not measure are kept")
      ->check(NonEmpty());
  cmd->add_option("--device", o->device, "cpu (gloo) or cuda (NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--name", o->name, "Profile name (default: calibrated-<host>)");
  cmd->add_flag("--quick", o->quick, "Small sizes and few repetitions (seconds; for tests)");
  cmd->add_option("--threads", o->threads,
                  "Intra-op threads per rank (default: cores / ranks, as exec)")
      ->check(IntRange(0, 4096));
  cmd->add_option("--gloo-threads", o->gloo_threads, "Worker threads per gloo group, as exec")
      ->check(IntRange(1, 64));
  cmd->add_option("--workload", o->workload,
                  "A graph (.json or .jfx) to run with its collectives made local: scales the "
                  "per-node overheads to what a node costs amid a real model's ops (default: a "
                  "synthetic tiny Llama-3 joint graph; none: the microbenchmarks alone)")
      ->check(NonEmpty());
  cmd->add_flag("!--gloo-separate-groups", o->gloo_share_groups,
                "As exec: the profile then gives each group its own stream");
  cmd->add_option("--timeout-s", o->timeout_s, "Rendezvous and collective timeout")
      ->check(IntRange(1, 86400));
  cmd->add_flag("-v,--verbose", o->verbose, "Print each figure on stderr as it is measured");
  cmd->add_option("--rank-dir", o->rank_dir)->group("");  // set by the launcher for its ranks
#if !JFX_HAVE_RUNTIME
  cmd->group("");  // absent from --help; running it says how to get it (kNoRuntimeMessage)
#endif
  cmd->callback([o, &exit_code] {
    try {
      if (!o->base.empty()) o->base = resolveHardwareProfilePath(o->base);  // --base h100
    } catch (const JfxError& e) {
      printError("calibrate", e.what());
      exit_code = kInputError;
      return;
    }
    std::vector<std::string> inputs{o->base};
    if (o->workload != rt::kNoWorkload) inputs.push_back(o->workload);
    if (wouldOverwriteInput("calibrate", inputs, o->output)) {
      exit_code = kInputError;
      return;
    }
#if JFX_HAVE_RUNTIME
    const RuntimeApi* rt = runtimeFor("calibrate");
    exit_code = rt ? rt->run_calibrate(*o, costModelForCalibrate()) : kInputError;
#else
    printError("calibrate", kNoRuntimeMessage);
    exit_code = kInputError;
#endif
  });
}

}  // namespace jfx::cli
