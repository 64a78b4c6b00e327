// bucket{plan=auto} and schedule{prefetch=auto}: the choice stays within the memory bound, is at
// least as fast (simulated) as every fixed candidate that fits, and is deterministic.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ir/clone.h"
#include "ir/io.h"
#include "ir/json_format.h"
#include "passes/analysis/cost_model.h"
#include "passes/analysis/memory.h"
#include "passes/analysis/phase.h"
#include "passes/analysis/simulator.h"
#include "passes/bucket/bucket.h"
#include "passes/bucket/schedule.h"
#include "passes/bucket/split_comm_groups.h"
#include "passes/pass_manager.h"
#include "passes/registry.h"
#include "tools/synth/synth.h"

using namespace jfx;

namespace {

const std::string kH100 = std::string(JFX_SOURCE_DIR) + "/configs/hardware/h100.json";

std::shared_ptr<const CostModel> h100() {
  static auto cost = std::make_shared<const CostModel>(loadHardwareProfile(kH100));
  return cost;
}

PassManagerOptions quiet(std::ostream& sink) {
  PassManagerOptions o;
  o.out = &sink;
  return o;
}

// A traced fixture or a synthetic Llama, through the passes before bucket (reshard=always, so
// there are backward re-gathers to bucket and prefetch).
std::unique_ptr<Graph> prepared(const std::string& name) {
  std::unique_ptr<Graph> g;
  if (name == "synth") {
    SynthConfig cfg;
    cfg.layers = 4;
    cfg.param_dtype = ScalarType::BFloat16;
    g = synthLlamaJoint(cfg);
  } else {
    g = loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/" + name + ".json");
  }
  std::ostringstream sink;
  runPipeline(*g, resolvePipeline("dce,tag-fsdp{reshard=always},remat,dedup-fsdp-unshard"),
              quiet(sink));
  return g;
}

int64_t peakOf(const Graph& g) {
  return analyzeMemory(g, computePhases(g)).peak_bytes;
}

// The step plan=auto scores a bucketed graph by: split-comm-groups, then schedule{prefetch=1}
// under the bound.
double probeStep(const Graph& bucketed, int64_t bound) {
  auto g = cloneGraph(bucketed);
  PassContext quiet;
  SplitCommGroupsPass().run(*g, quiet);
  ScheduleOptions so;
  so.prefetch = 1;
  so.memory_limit = bound;
  scheduleCollectives(*g, so, quiet);
  return simulate(*g, *h100()).step;
}

const std::vector<std::string> kGraphs = {"fsdp_w2", "bf16_w4", "gpt2_w2", "moe_w2", "synth"};

}  // namespace

TEST_CASE("bucket: plan=auto stays within the bound and beats every fixed candidate",
          "[bucket][planner]") {
  for (const std::string& name : kGraphs) {
    INFO(name);
    auto src = prepared(name);
    const int64_t input_peak = peakOf(*src);
    // The peak with the plain blocks plan unbounded: limits are spread from the input's peak to
    // it, plus no limit at all.
    int64_t loose = input_peak;
    {
      auto g = cloneGraph(*src);
      BucketOptions o;
      PassContext quiet;
      bucketCollectives(*g, o, quiet);
      loose = std::max(loose, peakOf(*g));
    }
    for (int i = 0; i <= 4; ++i) {
      const int64_t limit = i == 4 ? 0 : input_peak + (loose - input_peak) * i / 3;
      INFO("limit " << limit);
      BucketOptions opts;
      opts.plan = BucketOptions::Plan::Auto;
      opts.memory_limit = limit;
      opts.cost = h100();
      auto g = cloneGraph(*src);
      PassContext ctx;
      bucketCollectives(*g, opts, ctx);
      const int64_t bound = limit == 0 ? 0 : std::max(limit, input_peak);
      const int64_t peak = peakOf(*g);
      if (bound > 0) CHECK(peak <= bound);
      CHECK(peak == ctx.stats.at("memory-peak-estimate"));
      CHECK(ctx.stats.at("auto-candidates") == 8);
      const double step = probeStep(*g, bound);
      CHECK(static_cast<int64_t>(std::llround(step * 1e6)) == ctx.stats.at("simulated-step-us"));
      // Every fixed candidate, bucketed under the same bound (so it fits), is no faster.
      for (const BucketCandidate& c : bucketAutoCandidates(opts)) {
        INFO(c.name);
        auto f = cloneGraph(*src);
        PassContext quiet;
        bucketCollectives(*f, c.opts, quiet);
        if (bound > 0) REQUIRE(peakOf(*f) <= bound);
        CHECK(step <= probeStep(*f, bound));
      }
    }
  }
}

TEST_CASE("schedule: prefetch=auto stays within the limit and beats every fixed distance",
          "[schedule][planner]") {
  for (const std::string& name : kGraphs) {
    INFO(name);
    auto src = prepared(name);
    {
      std::ostringstream sink;
      runPipeline(*src, resolvePipeline("bucket{memory-limit=none},split-comm-groups"),
                  quiet(sink));
    }
    const int64_t input_peak = peakOf(*src);
    int64_t loose = input_peak;
    {
      auto g = cloneGraph(*src);
      ScheduleOptions o;
      o.prefetch = 3;
      PassContext quiet;
      scheduleCollectives(*g, o, quiet);
      loose = std::max(loose, peakOf(*g));
    }
    for (int i = 0; i <= 4; ++i) {
      const int64_t limit = i == 4 ? 0 : input_peak + (loose - input_peak) * i / 3;
      INFO("limit " << limit);
      ScheduleOptions opts;
      opts.auto_prefetch = true;
      opts.memory_limit = limit;
      opts.cost = h100();
      auto g = cloneGraph(*src);
      PassContext ctx;
      scheduleCollectives(*g, opts, ctx);
      const SimResult sim = simulate(*g, *h100());
      if (limit > 0) CHECK(sim.peak_memory_bytes <= limit);
      CHECK(static_cast<int64_t>(std::llround(sim.step * 1e6)) ==
            ctx.stats.at("simulated-step-us"));
      for (int64_t k = 0; k <= 3; ++k) {
        INFO("prefetch " << k);
        auto f = cloneGraph(*src);
        ScheduleOptions fixed;
        fixed.prefetch = k;
        fixed.memory_limit = limit;
        PassContext quiet;
        scheduleCollectives(*f, fixed, quiet);
        const SimResult fs = simulate(*f, *h100());
        if (limit > 0 && fs.peak_memory_bytes > limit) continue;
        CHECK(sim.step <= fs.step);
      }
    }
  }
}

TEST_CASE("planner: the auto pipeline is deterministic", "[bucket][schedule][planner]") {
  const std::string spec =
      "dce,tag-fsdp{reshard=default},remat,dedup-fsdp-unshard,"
      "bucket{plan=auto, hardware=" +
      kH100 + "},split-comm-groups,schedule{prefetch=auto, hardware=" + kH100 + "}";
  for (const char* name : {"fsdp_w2", "gpt2_w2"}) {
    INFO(name);
    std::string out[2];
    for (std::string& o : out) {
      auto g = loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/" + name + ".json");
      std::ostringstream sink;
      runPipeline(*g, resolvePipeline(spec), quiet(sink));
      o = writeJsonGraph(*g);
    }
    CHECK(out[0] == out[1]);
  }
}

TEST_CASE("planner: configs/pipelines/auto.json runs on a traced fixture", "[planner]") {
  auto g = loadGraph(std::string(JFX_SOURCE_DIR) + "/tests/data/traced/fsdp_w2.json");
  const int64_t before = peakOf(*g);
  std::ostringstream sink;
  auto pipeline = resolvePipeline(std::string(JFX_SOURCE_DIR) + "/configs/pipelines/auto.json");
  applyOptionOverrides(pipeline, {"hardware=" + kH100, "memory-limit=" + std::to_string(before)});
  for (const PipelineEntry& e : pipeline)
    if (e.options.has("memory-limit"))
      CHECK(e.options.values().at("memory-limit") == std::to_string(before));
  CHECK_THROWS_WITH(applyOptionOverrides(pipeline, {"cap-mb=3"}),
                    Catch::Contains("no pass in the pipeline has option 'cap-mb'"));
  PipelineResult r = runPipeline(*g, pipeline, quiet(sink));
  CHECK(peakOf(*g) <= before);
  bool bucket_auto = false;
  for (const PassRecord& p : r.passes)
    if (p.name == "bucket") bucket_auto = p.stats.count("auto-plan") > 0;
  CHECK(bucket_auto);
}

TEST_CASE("planner: option errors", "[planner]") {
  auto configure = [](std::string_view name, std::map<std::string, std::string> values) {
    createPass(name)->configure(PassOptions(std::string(name), std::move(values)));
  };
  CHECK_THROWS_WITH(configure("bucket", {{"plan", "auto"}}),
                    Catch::Equals("error: pass 'bucket': plan=auto needs hardware=FILE (a profile "
                                  "such as configs/hardware/h100.json) to time its candidates"));
  CHECK_THROWS_WITH(configure("bucket", {{"hardware", kH100}}),
                    Catch::Contains("read by plan=auto only"));
  CHECK_THROWS_WITH(configure("bucket", {{"plan", "size"}, {"group", "2"}}),
                    Catch::Contains("read by plan=blocks only"));
  CHECK_THROWS_WITH(configure("schedule", {{"prefetch", "auto"}}),
                    Catch::Contains("prefetch=auto needs hardware=FILE"));
  CHECK_THROWS_WITH(configure("schedule", {{"max-prefetch", "2"}}),
                    Catch::Contains("read by prefetch=auto only"));
  CHECK_NOTHROW(configure("schedule", {{"prefetch", "auto"}, {"hardware", kH100}}));
}
