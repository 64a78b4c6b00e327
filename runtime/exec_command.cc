// `jointfx exec`: the launcher, or this process as one rank. Torch-free: everything that needs
// LibTorch is behind runtime/trainer.h.
#include "runtime/exec_command.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <regex>
#include <utility>

#include "ir/error.h"
#include "ir/io.h"
#include "runtime/launcher.h"
#include "runtime/trainer.h"

namespace jfx::rt {
namespace {

void printError(const char* cmd, const std::string& message) {
  std::fprintf(stderr, "jointfx %s: %s\n", cmd, message.c_str());
}

std::string validate(const ExecOptions& o) {
  if (o.graph.empty()) return "no input graph";
  if (o.nproc < 1 || o.nproc > 4096) return "--nproc must be in [1, 4096]";
  if (o.steps < 1) return "--steps must be at least 1";
  if (o.timeout_s < 1) return "--timeout-s must be at least 1";
  if (o.gloo_threads < 1 || o.gloo_threads > 64) return "--gloo-threads must be in [1, 64]";
  if (o.optimizer != "sgd" && o.optimizer != "adamw" && o.optimizer != "none")
    return "--optimizer must be sgd, adamw or none";
  if (o.progress != "auto" && o.progress != "always" && o.progress != "never")
    return "--progress must be auto, always or never";
  if (o.device != "cpu" && o.device != "cuda") return "--device must be cpu or cuda";
  if (o.debug_fail_mode != "exit" && o.debug_fail_mode != "kill" && o.debug_fail_mode != "hang" &&
      o.debug_fail_mode != "throw")
    return "--debug-fail-mode must be exit, kill, hang or throw";
  if (!(o.lr >= 0) || !std::isfinite(o.lr)) return "--lr must be a finite number >= 0";
  if (!(o.momentum >= 0) || !std::isfinite(o.momentum))
    return "--momentum must be a finite number >= 0";
  if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay))
    return "--weight-decay must be a finite number >= 0";
  if (!(o.beta1 >= 0 && o.beta1 < 1)) return "--beta1 must be in [0, 1)";
  if (!(o.beta2 >= 0 && o.beta2 < 1)) return "--beta2 must be in [0, 1)";
  if (!(o.eps > 0) || !std::isfinite(o.eps)) return "--eps must be a finite number > 0";
  if (!o.memory_csv.empty() && !o.measure_memory)
    return "--memory-csv writes the measured memory, which --no-measure-memory turns off";
  return {};
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The numbers in `name` when it matches `pattern` (whose groups are numbers), else nullopt.
std::optional<std::vector<int64_t>> numbersIn(const std::string& name, const std::regex& pattern) {
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return std::nullopt;
  std::vector<int64_t> v;
  for (size_t i = 1; i < m.size(); ++i)
    v.push_back(std::stoll(m[i].str()));
  return v;
}

bool sameDirectory(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

bool inWorker() {
  return std::getenv("RANK") && std::getenv("WORLD_SIZE");
}

}  // namespace

std::string rankPath(std::string path, int rank) {
  const std::string r = std::to_string(rank);
  for (size_t p = path.find("{rank}"); p != std::string::npos;
       p = path.find("{rank}", p + r.size()))
    path.replace(p, 6, r);
  return path;
}

std::string outputOverwritesInput(const ExecOptions& o, int world_size) {
  std::vector<std::string> inputs{o.graph};
  std::vector<std::string> names{"the input graph"};
  if (!o.params.empty()) inputs.push_back(o.params), names.push_back("the --params file");
  if (!o.batch.empty()) inputs.push_back(o.batch), names.push_back("the --batch file");
  auto nameOf = [&](const std::string& in) {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i] == in) return names[i];
    return std::string("an input");
  };
  auto message = [&](const std::string& flag, const std::string& out, const std::string& in) {
    return flag + " " + quoteForMessage(out, kPathQuoteLimit) + " is " + nameOf(in) +
           "; refusing to overwrite an input";
  };
  for (auto [flag, path] : {std::pair<const char*, const std::string*>{"--log", &o.log},
                            {"--memory-csv", &o.memory_csv}}) {
    if (path->empty()) continue;
    const bool per_rank = path->find("{rank}") != std::string::npos;
    for (int r = 0; r < (per_rank ? world_size : 1); ++r) {
      std::string out = rankPath(*path, r);
      if (auto in = sameFileAs(out, inputs)) return message(flag, out, *in);
    }
  }
  // The directories' files: an input that sits in one under a name this run writes.
  const std::regex grads(R"(grads\.step(\d{1,9})\.rank(\d{1,9})\.safetensors)");
  const std::regex state(R"(state\.rank(\d{1,9})\.safetensors)");
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::filesystem::path in(inputs[i]);
    std::string dir = in.has_parent_path() ? in.parent_path().string() : ".";
    std::string name = in.filename().string();
    if (!o.save_grads.empty() && sameDirectory(o.save_grads, dir))
      if (auto n = numbersIn(name, grads);
          n && (*n)[0] >= 1 && (*n)[0] <= o.steps && (*n)[1] < world_size)
        return message("--save-grads", o.save_grads, inputs[i]) + " (it writes " + name + ")";
    if (!o.save.empty() && sameDirectory(o.save, dir))
      if (auto n = numbersIn(name, state); n && (*n)[0] < world_size)
        return message("--save", o.save, inputs[i]) + " (it writes " + name + ")";
  }
  return {};
}

std::vector<std::string> execArgs(const ExecOptions& o) {
  std::vector<std::string> a{"exec", o.graph};
  auto add = [&](const char* flag, const std::string& v) {
    a.push_back(flag);
    a.push_back(v);
  };
  add("--steps", std::to_string(o.steps));
  add("--device", o.device);
  add("--timeout-s", std::to_string(o.timeout_s));
  add("--gloo-threads", std::to_string(o.gloo_threads));
  if (!o.gloo_share_groups) a.push_back("--gloo-separate-groups");
  add("--seed", std::to_string(o.seed));
  if (!o.params.empty()) add("--params", o.params);
  if (!o.batch.empty()) add("--batch", o.batch);
  add("--optimizer", o.optimizer);
  add("--lr", num(o.lr));
  add("--momentum", num(o.momentum));
  add("--weight-decay", num(o.weight_decay));
  add("--beta1", num(o.beta1));
  add("--beta2", num(o.beta2));
  add("--eps", num(o.eps));
  add("--int-high", std::to_string(o.int_high));
  add("--threads", std::to_string(o.threads));
  if (!o.save_grads.empty()) add("--save-grads", o.save_grads);
  if (!o.save.empty()) add("--save", o.save);
  if (!o.log.empty()) add("--log", o.log);
  if (!o.memory_csv.empty()) add("--memory-csv", o.memory_csv);
  add("--progress", o.progress);
  if (!o.check_meta) a.push_back("--no-check-meta");
  if (o.quiet) a.push_back("--quiet");
  if (o.profile) a.push_back("--profile");
  if (!o.measure_memory) a.push_back("--no-measure-memory");
  // The ranks read the same files under the same input limit (a global option of jointfx).
  if (inputSizeLimit() != kDefaultInputLimitBytes)
    add("--max-input-mib", std::to_string(inputSizeLimit() >> 20));
  if (o.data_checked) a.push_back("--data-checked");
  if (o.debug_fail_rank >= 0) {
    add("--debug-fail-rank", std::to_string(o.debug_fail_rank));
    add("--debug-fail-step", std::to_string(o.debug_fail_step));
    add("--debug-fail-mode", o.debug_fail_mode);
  }
  return a;
}

int runExec(const ExecOptions& o) {
  try {
    if (std::string e = validate(o); !e.empty()) {
      printError("exec", e);
      return kExecInputError;
    }
    {
      const char* world_env = std::getenv("WORLD_SIZE");
      int world = inWorker() ? std::atoi(world_env) : o.nproc;
      if (std::string e = outputOverwritesInput(o, std::max(world, 1)); !e.empty()) {
        printError("exec", e);
        return kExecInputError;
      }
    }
    if (!inWorker()) {
      if (std::string e = deviceGraphProblem(o); !e.empty()) {
        printError("exec", e);
        return kExecInputError;
      }
    }
    if (std::string e = deviceProblem(o.device); !e.empty()) {
      printError("exec", e);
      return kExecInputError;
    }
    // Once per run: by the launcher, by a single process, or by rank 0 under torchrun.
    const char* rank_env = std::getenv("RANK");
    if (o.gloo_threads > 1 && o.device == "cpu" && !o.data_checked &&
        (!inWorker() || (rank_env && std::string(rank_env) == "0")))
      std::fprintf(stderr,
                   "jointfx exec: warning: --gloo-threads %d: LibTorch 2.15's gloo backend "
                   "corrupts the heap now and then with more than one worker thread per group "
                   "(a double free between the threads of ProcessGroupGloo::runLoop; "
                   "docs/executor.md, Limits); results are the same with 1, the default\n",
                   o.gloo_threads);
    // Started by torchrun or by our own launcher, or a single process: be the rank.
    if (inWorker() || o.nproc == 1) return runRank(o);

    // A graph that cannot run fails here once, not in every rank.
    if (std::string e = preflight(o); !e.empty()) {
      printError("exec", e);
      return kExecInputError;
    }
    LaunchSpec spec;
    spec.exe = selfExecutable();
    ExecOptions rank_options = o;
    rank_options.data_checked = true;
    spec.args = execArgs(rank_options);
    spec.nproc = o.nproc;
    LaunchResult r = launchRanks(spec);
    if (r.exit_code == 0) return kExecOk;
    printError("exec", r.message + (r.failed_rank >= 0 ? "; stopped the other ranks" : ""));
    if (r.exit_code == kExecInputError) return kExecInputError;
    return r.failed_rank >= 0 ? kExecRankFailed : r.exit_code;
  } catch (const JfxError& e) {
    printError("exec", e.what());
  } catch (const std::exception& e) {
    printError("exec", humanLibraryMessage(e.what()));
  }
  return kExecRankFailed;
}

}  // namespace jfx::rt
