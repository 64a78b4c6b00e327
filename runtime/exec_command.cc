// `jointfx exec` (launcher or rank) and `jointfx parity`. Torch-free: everything that needs
// LibTorch is behind runtime/trainer.h.
#include "runtime/exec_command.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "ir/error.h"
#include "ir/hash.h"
#include "ir/io.h"
#include "passes/pass_manager.h"
#include "runtime/launcher.h"
#include "runtime/safetensors.h"
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
  return {};
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

bool inWorker() {
  return std::getenv("RANK") && std::getenv("WORLD_SIZE");
}

}  // namespace

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
  add("--progress", o.progress);
  if (!o.check_meta) a.push_back("--no-check-meta");
  if (o.quiet) a.push_back("--quiet");
  if (o.profile) a.push_back("--profile");
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

// ---------------------------------------------------------------------------------- parity

namespace {

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Element i of a floating-point entry as double; nullopt for other dtypes.
std::optional<double> element(ScalarType t, std::string_view bytes, size_t i) {
  switch (t) {
    case ScalarType::Float32: {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      return f;
    }
    case ScalarType::Float64: {
      double d;
      std::memcpy(&d, bytes.data() + 8 * i, 8);
      return d;
    }
    case ScalarType::BFloat16: {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      uint32_t bits = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case ScalarType::Float16: {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      return halfToFloat(h);
    }
    default:
      return std::nullopt;
  }
}

std::string describeDiff(const SafetensorsEntry& ea, std::string_view a, std::string_view b,
                         int64_t* max_ulp) {
  size_t item = static_cast<size_t>(dtypeItemSize(ea.dtype));
  size_t n = item ? a.size() / item : 0;
  size_t differ = 0;
  double max_abs = 0;
  int64_t ulp = 0;
  bool numeric = true;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(a.data() + i * item, b.data() + i * item, item) == 0) continue;
    ++differ;
    auto x = element(ea.dtype, a, i), y = element(ea.dtype, b, i);
    if (!x || !y) {
      numeric = false;
      continue;
    }
    double d = std::fabs(*x - *y);
    if (std::isnan(d)) d = INFINITY;
    max_abs = std::max(max_abs, d);
    int64_t u = ulpDistance(ea.dtype, a, b, i);
    ulp = (u < 0 || ulp < 0) ? -1 : std::max(ulp, u);
  }
  if (max_ulp) *max_ulp = numeric ? ulp : -1;
  char buf[200];
  if (numeric && ulp >= 0)
    std::snprintf(buf, sizeof buf, "%zu of %zu elements differ (max |a-b| %.3g, max %lld ulp)",
                  differ, n, max_abs, static_cast<long long>(ulp));
  else if (numeric)
    std::snprintf(buf, sizeof buf, "%zu of %zu elements differ (max |a-b| %.3g, NaN in one)",
                  differ, n, max_abs);
  else
    std::snprintf(buf, sizeof buf, "%zu of %zu elements differ", differ, n);
  return buf;
}

std::string gradFile(const std::string& dir, int step, int rank) {
  return dir + "/grads.step" + std::to_string(step) + ".rank" + std::to_string(rank) +
         ".safetensors";
}

}  // namespace

int64_t ulpDistance(ScalarType t, std::string_view a, std::string_view b, size_t i) {
  // Floats ordered as sign-magnitude integers: the distance in representable values.
  auto ordered = [](uint64_t bits, int width) -> int64_t {
    const uint64_t sign = uint64_t{1} << (width - 1);
    const int64_t mag = static_cast<int64_t>(bits & (sign - 1));
    return (bits & sign) ? -mag : mag;
  };
  auto isNan = [](uint64_t bits, int width, int mant) {
    const uint64_t exp_mask = ((uint64_t{1} << (width - 1 - mant)) - 1) << mant;
    return (bits & exp_mask) == exp_mask && (bits & ((uint64_t{1} << mant) - 1)) != 0;
  };
  int width = 0, mant = 0;
  switch (t) {
    case ScalarType::Float32:
      width = 32, mant = 23;
      break;
    case ScalarType::Float64:
      width = 64, mant = 52;
      break;
    case ScalarType::BFloat16:
      width = 16, mant = 7;
      break;
    case ScalarType::Float16:
      width = 16, mant = 10;
      break;
    default:
      return -1;
  }
  const size_t item = static_cast<size_t>(width / 8);
  uint64_t x = 0, y = 0;
  std::memcpy(&x, a.data() + item * i, item);
  std::memcpy(&y, b.data() + item * i, item);
  const bool nx = isNan(x, width, mant), ny = isNan(y, width, mant);
  if (nx || ny) return nx && ny ? 0 : -1;
  const int64_t ox = ordered(x, width), oy = ordered(y, width);
  // 64-bit values can overflow the difference; saturate.
  if ((ox > 0 && oy < 0 && ox > INT64_MAX + oy) || (ox < 0 && oy > 0 && oy > INT64_MAX + ox))
    return INT64_MAX;
  return ox > oy ? ox - oy : oy - ox;
}

bool compareGradDirs(const std::string& dir_a, const std::string& dir_b, int nproc, int steps,
                     std::vector<std::string>& report, ParityUlp* ulp, bool* buffers) {
  bool same = true;
  if (buffers) *buffers = false;
  if (ulp) {
    ulp->loss.assign(static_cast<size_t>(std::max(steps, 0)), 0);
    ulp->gradients.assign(static_cast<size_t>(std::max(steps, 0)), 0);
  }
  auto note = [&](int step, const std::string& name, int64_t u) {
    if (!ulp) return;
    int64_t& slot =
        (name == "__loss__" ? ulp->loss : ulp->gradients)[static_cast<size_t>(step - 1)];
    slot = (u < 0 || slot < 0) ? -1 : std::max(slot, u);
  };
  for (int step = 1; step <= steps; ++step)
    for (int rank = 0; rank < nproc; ++rank) {
      std::string where = "step " + std::to_string(step) + " rank " + std::to_string(rank);
      std::optional<SafetensorsFile> fa, fb;
      try {
        fa = SafetensorsFile::read(gradFile(dir_a, step, rank));
        fb = SafetensorsFile::read(gradFile(dir_b, step, rank));
      } catch (const JfxError& e) {
        report.push_back(where + ": " + e.what());
        same = false;
        continue;
      }
      std::set<std::string> names;
      for (const auto& e : fa->entries()) {
        names.insert(e.name);
        if (buffers && e.name.starts_with("buffer:")) *buffers = true;
      }
      for (const auto& e : fb->entries())
        names.insert(e.name);
      for (const std::string& name : names) {
        const SafetensorsEntry* ea = fa->find(name);
        const SafetensorsEntry* eb = fb->find(name);
        std::string what = where + " '" + name + "': ";
        if (!ea || !eb) {
          report.push_back(what + "only in " + (ea ? "A" : "B"));
          note(step, name, -1);
          same = false;
        } else if (ea->dtype != eb->dtype || ea->shape != eb->shape) {
          report.push_back(what + "dtype/shape differ");
          note(step, name, -1);
          same = false;
        } else if (fa->bytes(*ea) != fb->bytes(*eb)) {
          int64_t u = 0;
          report.push_back(what + describeDiff(*ea, fa->bytes(*ea), fb->bytes(*eb), &u));
          note(step, name, u);
          same = false;
        }
      }
    }
  return same;
}

namespace {

// One run for parity: loss and gradients of every step into `dir`, nothing on stdout.
int runForParity(const ExecOptions& base, const std::string& graph, const std::string& dir) {
  ExecOptions e = base;
  e.graph = graph;
  e.save_grads = dir;
  e.log = dir + "/loss.rank{rank}.jsonl";
  e.save.clear();
  e.quiet = true;
  e.progress = "never";
  return runExec(e);
}

}  // namespace

int runParity(const ParityOptions& o) {
  namespace fs = std::filesystem;
  std::string work;
  bool remove_work = false;
  try {
    if (o.a.empty()) {
      printError("parity", "no reference graph");
      return kExecInputError;
    }
    if (!o.b.empty() && !o.pipelines.empty()) {
      printError("parity", "give either a second graph or --pipeline, not both");
      return kExecInputError;
    }
    // Every B: the second graph, or A after each pipeline ("" is the empty pipeline: A written
    // back, a format round trip). Pipelines are resolved before anything runs, so a typo in the
    // last one does not cost the runs of the others.
    std::vector<std::string> pipelines = o.pipelines;
    if (pipelines.empty() && o.b.empty()) pipelines.push_back("");
    std::vector<std::unique_ptr<Graph>> graphs;
    std::vector<std::string> changes;
    if (o.b.empty()) {
      std::vector<std::vector<PipelineEntry>> resolved;
      for (const std::string& p : pipelines)
        resolved.push_back(p.empty() ? std::vector<PipelineEntry>{} : resolvePipeline(p));
      for (const auto& p : resolved) {
        std::unique_ptr<Graph> g = loadGraph(o.a);
        uint64_t before = structuralHash(*g);
        size_t nodes_before = g->size();
        PassManagerOptions pm;
        if (!p.empty()) runPipeline(*g, p, pm);
        // Say whether the pipeline changed anything: identical results of an unchanged graph
        // prove nothing about the pipeline.
        changes.push_back(structuralHash(*g) == before ? std::string("graph unchanged")
                                                       : std::to_string(nodes_before) + " -> " +
                                                             std::to_string(g->size()) + " nodes");
        graphs.push_back(std::move(g));
      }
    }

    if (!o.keep.empty()) {
      work = o.keep;
      fs::create_directories(work);
    } else {
      std::string tmpl = (fs::temp_directory_path() / "jointfx-parity-XXXXXX").string();
      if (!::mkdtemp(tmpl.data())) {
        printError("parity", "cannot create a temporary directory");
        return kExecInputError;
      }
      work = tmpl;
      remove_work = true;
    }
    struct Candidate {
      std::string label, graph, dir, change;
    };
    std::vector<Candidate> bs;
    if (!o.b.empty()) {
      bs.push_back({o.b, o.b, work + "/b", ""});
    } else {
      for (size_t i = 0; i < graphs.size(); ++i) {
        std::string suffix = graphs.size() == 1 ? "" : std::to_string(i + 1);
        Candidate c{"'" + pipelines[i] + "'", work + "/b" + suffix + ".json", work + "/b" + suffix,
                    "; " + changes[i]};
        saveGraph(*graphs[i], c.graph, GraphFormat::Json);
        bs.push_back(std::move(c));
      }
      graphs.clear();
    }

    auto failed = [&](const std::string& which, const std::string& graph, int code) {
      printError("parity", "running " + which + " (" + graph + ") failed");
      std::fprintf(stderr, "jointfx parity: run directories kept in %s\n", work.c_str());
      return code;
    };
    if (int code = runForParity(o.exec, o.a, work + "/a"); code != kExecOk)
      return failed("A", o.a, code);
    bool all_same = true;
    for (const Candidate& c : bs) {
      if (int code = runForParity(o.exec, c.graph, c.dir); code != kExecOk)
        return failed("B " + c.label, c.graph, code);
      std::vector<std::string> report;
      bool buffers = false;
      ParityUlp ulp;
      bool same =
          compareGradDirs(work + "/a", c.dir, o.exec.nproc, o.exec.steps, report, &ulp, &buffers);
      std::string label = o.a + " vs " + c.label;
      if (same) {
        std::printf("parity: %s: %s bitwise identical (%d rank%s, %d step%s%s)\n", label.c_str(),
                    buffers ? "loss, gradients and updated buffers" : "loss and gradients",
                    o.exec.nproc, o.exec.nproc == 1 ? "" : "s", o.exec.steps,
                    o.exec.steps == 1 ? "" : "s", c.change.c_str());
      } else {
        all_same = false;
        // How far apart, not only that: the largest ulp distance over all steps, and per step
        // (step 1 shows a pass's own effect; later steps add what the optimizer carried over).
        auto fmt = [](int64_t u) { return u < 0 ? std::string("n/a") : std::to_string(u); };
        auto overall = [](const std::vector<int64_t>& v) {
          int64_t m = 0;
          for (int64_t u : v)
            m = (u < 0 || m < 0) ? -1 : std::max(m, u);
          return m;
        };
        std::string per_step;
        for (size_t s = 0; s < ulp.loss.size(); ++s)
          per_step += (s ? "; " : "") + std::string("step ") + std::to_string(s + 1) + ": loss " +
                      fmt(ulp.loss[s]) + ", gradients " + fmt(ulp.gradients[s]);
        std::printf(
            "parity: %s: DIFFERENT (%zu difference%s%s): max ulp distance: loss %s, gradients "
            "%s (%s)\n",
            label.c_str(), report.size(), report.size() == 1 ? "" : "s", c.change.c_str(),
            fmt(overall(ulp.loss)).c_str(), fmt(overall(ulp.gradients)).c_str(), per_step.c_str());
        for (size_t i = 0; i < report.size() && i < 50; ++i)
          std::printf("  %s\n", report[i].c_str());
        if (report.size() > 50) std::printf("  ... %zu more\n", report.size() - 50);
        std::printf("  run directories kept in %s\n", work.c_str());
        remove_work = false;
      }
      std::fflush(stdout);
    }
    if (remove_work) fs::remove_all(work);
    return all_same ? kExecOk : kExecMismatch;
  } catch (const JfxError& e) {
    printError("parity", e.what());
  } catch (const std::exception& e) {
    printError("parity", humanLibraryMessage(e.what()));
  }
  return kExecInputError;
}

}  // namespace jfx::rt
