#include "runtime/input_checks.h"

#include <ATen/ops/isfinite.h>

#include <cstdio>
#include <optional>
#include <set>

#include "ir/error.h"
#include "runtime/graph_queries.h"
#include "runtime/safetensors.h"
#include "runtime/tensor_io.h"

namespace jfx::rt {
namespace {

std::string namesText(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 8; ++i)
    s += (i ? ", " : "") + quoteForMessage(names[i]);
  if (names.size() > 8) s += ", ... (" + std::to_string(names.size() - 8) + " more)";
  return s.empty() ? "none" : s;
}

}  // namespace

bool isIntegral(ScalarType t) {
  switch (t) {
    case ScalarType::Bool:
    case ScalarType::UInt8:
    case ScalarType::Int8:
    case ScalarType::Int16:
    case ScalarType::Int32:
    case ScalarType::Int64:
    case ScalarType::UInt16:
    case ScalarType::UInt32:
    case ScalarType::UInt64:
      return true;
    default:
      return false;
  }
}

namespace {

// A file tensor of dtype `have` for a graph input of dtype `want`: "" when the same; a warning
// (`*warn` set) for a cast within floating point or within integers, which keeps what the values
// mean; else an error: float token ids, integer weights, complex for real.
std::string dtypeMismatch(ScalarType have, ScalarType want, bool* warn) {
  *warn = false;
  if (have == want) return {};
  std::string text = std::string(dtypeName(have)) + " in the file, " +
                     std::string(dtypeName(want)) + " in the graph";
  if ((dtypeIsFloatingPoint(have) && dtypeIsFloatingPoint(want)) ||
      (isIntegral(have) && isIntegral(want))) {
    *warn = true;
    return text + "; cast to " + std::string(dtypeName(want));
  }
  return text;
}

int64_t nonFinite(const at::Tensor& t) {
  if (!t.is_floating_point() || t.numel() == 0) return 0;
  return t.isfinite().logical_not().sum().item<int64_t>();
}

// A parameter or buffer against --params: "" or the error; the entry it uses goes into `used`.
std::string checkWeight(const GraphInput& in, const SafetensorsFile& params, const ExecOptions& o,
                        std::set<std::string>& used, std::vector<std::string>& warnings) {
  const TensorMeta& m = in.meta.tensor;
  const SafetensorsEntry* e = params.find(in.fqn);
  if (!e) {
    std::vector<std::string> have;
    for (const auto& x : params.entries())
      have.push_back(x.name);
    return o.params + ": no tensor " + quoteForMessage(in.fqn) + " (input " +
           quoteForMessage(in.name) + "); the file has " + namesText(have);
  }
  used.insert(e->name);
  bool warn = false;
  if (std::string d = dtypeMismatch(e->dtype, m.dtype, &warn); !d.empty()) {
    if (!warn) return o.params + ": tensor " + quoteForMessage(in.fqn) + " is " + d;
    warnings.push_back(o.params + ": tensor " + quoteForMessage(in.fqn) + " is " + d);
  }
  if (e->shape.size() != m.shape.size())
    return o.params + ": tensor " + quoteForMessage(in.fqn) + " has " +
           std::to_string(e->shape.size()) + " dimensions, the graph's input " +
           quoteForMessage(in.name) + " " + std::to_string(m.shape.size());
  if (int64_t bad = nonFinite(readTensor(params, *e)); bad > 0)
    return o.params + ": tensor " + quoteForMessage(in.fqn) + " holds " + std::to_string(bad) +
           " NaN or infinite value" + (bad == 1 ? "" : "s") +
           "; parameters and buffers must be finite";
  return {};
}

// A user input against --batch (`rows`: the rows of the embedding it indexes, 0 when none): ""
// or the error; the entry it uses goes into `used`.
std::string checkBatchInput(const GraphInput& in, int64_t rows, const SafetensorsFile& batch,
                            const ExecOptions& o, std::set<std::string>& used,
                            std::vector<std::string>& warnings) {
  const TensorMeta& m = in.meta.tensor;
  const SafetensorsEntry* e = batch.find(in.name);
  if (!e) {
    std::vector<std::string> have;
    for (const auto& x : batch.entries())
      have.push_back(x.name);
    return o.batch + ": no tensor " + quoteForMessage(in.name) +
           " (a user input of the graph); the file has " + namesText(have);
  }
  used.insert(e->name);
  bool warn = false;
  if (std::string d = dtypeMismatch(e->dtype, m.dtype, &warn); !d.empty()) {
    std::string what = o.batch + ": input " + quoteForMessage(in.name) + " is " + d;
    if (!warn)
      return what + (isIntegral(m.dtype) ? " (token ids and labels must be integers)" : "");
    warnings.push_back(what);
  }
  // The local batch, or the global one along dim 0 (k local batches).
  bool fits = e->shape.size() == m.shape.size();
  for (size_t d = 0; fits && d < m.shape.size(); ++d)
    fits = d == 0 ? (m.shape[0] > 0 ? e->shape[0] > 0 && e->shape[0] % m.shape[0] == 0
                                    : e->shape[0] == 0)
                  : e->shape[d] == m.shape[d];
  if (!fits) {
    std::string have = "[", want = "[";
    for (size_t d = 0; d < e->shape.size(); ++d)
      have += (d ? ", " : "") + std::to_string(e->shape[d]);
    for (size_t d = 0; d < m.shape.size(); ++d)
      want += (d ? ", " : "") + std::to_string(m.shape[d]);
    return o.batch + ": input " + quoteForMessage(in.name) + " has shape " + have +
           "], not the graph's " + want + "] (or a multiple of it along dim 0)";
  }
  at::Tensor t = readTensor(batch, *e);
  if (int64_t bad = nonFinite(t); bad > 0)
    return o.batch + ": input " + quoteForMessage(in.name) + " holds " + std::to_string(bad) +
           " NaN or infinite value" + (bad == 1 ? "" : "s");
  if (rows > 0 && isIntegral(e->dtype) && t.numel() > 0) {
    int64_t lo = t.min().item<int64_t>(), hi = t.max().item<int64_t>();
    if (lo < 0 || hi >= rows)
      return o.batch + ": input " + quoteForMessage(in.name) + " holds " +
             std::to_string(lo < 0 ? lo : hi) + ", outside [0, " + std::to_string(rows) +
             "): the rows of the embedding it indexes";
  }
  return {};
}

}  // namespace

std::string checkInputData(const Graph& g, const std::vector<GraphInput>& inputs,
                           const ExecOptions& o, std::vector<std::string>& warnings) {
  auto phs = g.placeholders();
  if (phs.size() != inputs.size()) return "placeholder count changed while planning";
  std::optional<SafetensorsFile> params, batch;
  if (!o.params.empty()) params = SafetensorsFile::read(o.params);
  if (!o.batch.empty()) batch = SafetensorsFile::read(o.batch);
  std::set<std::string> used_params, used_batch;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const GraphInput& in = inputs[i];
    if (!in.meta.isTensor()) continue;  // reported by the rank with its own message
    const TensorMeta& m = in.meta.tensor;
    const bool weight = in.kind == InputKind::Parameter || in.kind == InputKind::Buffer;
    if (in.kind == InputKind::Parameter && !dtypeIsFloatingPoint(m.dtype))
      return "parameter " + quoteForMessage(in.fqn) + " (input " + quoteForMessage(in.name) +
             ") is " + std::string(dtypeName(m.dtype)) +
             " in the graph; only floating-point parameters can be trained";
    if (weight && params)
      if (std::string e = checkWeight(in, *params, o, used_params, warnings); !e.empty()) return e;
    if (weight) continue;
    // A user input: from --batch, else generated.
    const int64_t rows = inferIntBound(phs[i], /*embeddings_only=*/true);
    if (!batch) {
      if (rows > 0 && o.int_high > rows && isIntegral(m.dtype))
        return "--int-high " + std::to_string(o.int_high) + " exceeds the " + std::to_string(rows) +
               " rows of the embedding input " + quoteForMessage(in.name) + " indexes";
      continue;
    }
    if (std::string e = checkBatchInput(in, rows, *batch, o, used_batch, warnings); !e.empty())
      return e;
  }
  auto unused = [&](const std::optional<SafetensorsFile>& f, const std::set<std::string>& used,
                    const std::string& path, const char* what) {
    if (!f) return;
    std::vector<std::string> extra;
    for (const auto& e : f->entries())
      if (!used.count(e.name)) extra.push_back(e.name);
    if (!extra.empty())
      warnings.push_back(path + ": " + std::to_string(extra.size()) + " tensor" +
                         (extra.size() == 1 ? "" : "s") + " the graph has no " + what +
                         " for, ignored: " + namesText(extra));
  };
  unused(params, used_params, o.params, "parameter or buffer");
  unused(batch, used_batch, o.batch, "user input");
  return {};
}

void printWarnings(const std::vector<std::string>& warnings) {
  for (const std::string& w : warnings)
    std::fprintf(stderr, "jointfx exec: warning: %s\n", w.c_str());
}

}  // namespace jfx::rt
