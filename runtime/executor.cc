#include "runtime/executor.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/TensorBody.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/GradMode.h>
#include <c10/core/Layout.h>
#include <c10/core/MemoryFormat.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "ir/error.h"
#include "runtime/memory_meter.h"
#include "runtime/process_groups.h"
#include "runtime/tensor_io.h"

namespace jfx::rt {
namespace {

// One element of a list argument that mixes node references and constants (Tensor[] of nodes,
// int[] of sizes some of which are computed).
struct ListItem {
  int64_t slot = -1;  // >= 0: read the value of this slot
  c10::IValue constant;
};

// An int/float/bool list argument whose items are constants or values of earlier nodes (sizes
// computed in the graph), built per run.
template <typename T>
c10::IValue scalarList(const std::vector<ListItem>& items, const std::vector<c10::IValue>& values) {
  c10::List<T> l;
  l.reserve(items.size());
  for (const ListItem& li : items)
    l.push_back((li.slot < 0 ? li.constant : values[static_cast<size_t>(li.slot)]).to<T>());
  return c10::IValue(std::move(l));
}

// A Tensor[] (Elem = at::Tensor) or Tensor?[] (Elem = std::optional<at::Tensor>) argument from
// the values of earlier nodes, built per run; a Tensor?[] item without a slot is None. An item
// that holds no tensor is left in `bad` (and the list is not finished).
template <typename Elem>
c10::IValue tensorList(const std::vector<ListItem>& items, const std::vector<c10::IValue>& values,
                       const c10::IValue*& bad) {
  c10::List<Elem> l;
  l.reserve(items.size());
  for (const ListItem& li : items) {
    if constexpr (!std::is_same_v<Elem, at::Tensor>) {
      if (li.slot < 0) {
        l.push_back(std::nullopt);
        continue;
      }
    }
    const c10::IValue& v = values[static_cast<size_t>(li.slot)];
    if (!v.isTensor()) {
      bad = &v;
      return {};
    }
    l.push_back(v.toTensor());
  }
  return c10::IValue(std::move(l));
}

// A stack position filled per run from the value table.
struct DynamicArg {
  enum class Kind : uint8_t { Value, TensorList, OptionalTensorList, IntList, FloatList, BoolList };
  size_t pos = 0;
  Kind kind = Kind::Value;
  int64_t slot = -1;  // Kind::Value
  std::vector<ListItem> items;
};

[[noreturn]] void failAt(const Node& n, const std::string& message) {
  throw JfxError(SourceLocation::atNode(std::string(n.name())),
                 std::string(n.target().str()) + ": " + message);
}

// Why a constant does not fit a schema type; thrown inside conversion, rewrapped with the node.
struct ConvertError {
  std::string message;
};

std::string argKindName(const Arg& a) {
  switch (a.kind()) {
    case Arg::Kind::None:
      return "None";
    case Arg::Kind::Bool:
      return "bool";
    case Arg::Kind::Int:
      return "int";
    case Arg::Kind::Float:
      return "float";
    case Arg::Kind::Str:
      return "str";
    case Arg::Kind::Node:
      return "node";
    case Arg::Kind::Dtype:
      return "dtype";
    case Arg::Kind::Device:
      return "device";
    case Arg::Kind::Layout:
      return "layout";
    case Arg::Kind::MemoryFormat:
      return "memory_format";
    case Arg::Kind::List:
      return "list";
    case Arg::Kind::Tuple:
      return "tuple";
    case Arg::Kind::Opaque:
      return "opaque " + std::string(a.str());
  }
  return "?";
}

[[noreturn]] void mismatch(const Arg& a, const c10::TypePtr& t) {
  throw ConvertError{"cannot pass a " + argKindName(a) + " as " + t->str()};
}

c10::ScalarType toAten(ScalarType t) {
  if (t == ScalarType::Undefined) throw ConvertError{"undefined dtype"};
  return atenDtype(t);
}

c10::Layout layoutFromName(std::string_view s) {
  if (s.starts_with("torch.")) s.remove_prefix(6);
  if (s == "strided") return c10::kStrided;
  if (s == "sparse_coo") return c10::kSparse;
  if (s == "sparse_csr") return c10::kSparseCsr;
  if (s == "_mkldnn") return c10::kMkldnn;
  throw ConvertError{"unknown layout " + quoteForMessage(s)};
}

c10::MemoryFormat memoryFormatFromName(std::string_view s) {
  if (s.starts_with("torch.")) s.remove_prefix(6);
  if (s == "contiguous_format") return c10::MemoryFormat::Contiguous;
  if (s == "preserve_format") return c10::MemoryFormat::Preserve;
  if (s == "channels_last") return c10::MemoryFormat::ChannelsLast;
  if (s == "channels_last_3d") return c10::MemoryFormat::ChannelsLast3d;
  throw ConvertError{"unknown memory format " + quoteForMessage(s)};
}

c10::IValue constantToIValue(const Arg& a, const c10::TypePtr& t, const c10::Device& device);

// A constant where the schema says `Any`: _c10d_functional's group_name / reduce_op in newer
// torch.
c10::IValue anyToIValue(const Arg& a, const c10::TypePtr& t) {
  switch (a.kind()) {
    case Arg::Kind::None:
      return c10::IValue();
    case Arg::Kind::Str:
      return c10::IValue(std::string(a.str()));
    case Arg::Kind::Int:
      return c10::IValue(a.toInt());
    case Arg::Kind::Float:
      return c10::IValue(a.toFloat());
    case Arg::Kind::Bool:
      return c10::IValue(a.toBool());
    default:
      mismatch(a, t);
  }
}

// A constant list (or one int where the schema wants int[N]) as a list of `t`'s element type.
c10::IValue listToIValue(const Arg& a, const c10::TypePtr& t, const c10::Device& device) {
  using K = c10::TypeKind;
  if (!a.isSequence()) {
    // torch accepts a single int where int[N] is expected (e.g. sum(x, 1)): broadcast it.
    if (a.kind() == Arg::Kind::Int) return c10::IValue(c10::List<int64_t>({a.toInt()}));
    mismatch(a, t);
  }
  const auto& elem = t->castRaw<c10::ListType>()->getElementType();
  switch (elem->kind()) {
    case K::IntType:
    case K::SymIntType: {
      c10::List<int64_t> l;
      for (const auto& i : a.items())
        l.push_back(constantToIValue(i, elem, device).toInt());
      return c10::IValue(std::move(l));
    }
    case K::FloatType: {
      c10::List<double> l;
      for (const auto& i : a.items())
        l.push_back(constantToIValue(i, elem, device).toDouble());
      return c10::IValue(std::move(l));
    }
    case K::BoolType: {
      c10::List<bool> l;
      for (const auto& i : a.items())
        l.push_back(constantToIValue(i, elem, device).toBool());
      return c10::IValue(std::move(l));
    }
    case K::TensorType:
      if (a.items().empty()) return c10::IValue(c10::List<at::Tensor>());
      mismatch(a, t);
    case K::OptionalType: {
      // Tensor?[] of all-None (aten.index with no indices) is rare but legal.
      c10::List<std::optional<at::Tensor>> l;
      for (const auto& i : a.items()) {
        if (!i.isNone()) mismatch(i, elem);
        l.push_back(std::nullopt);
      }
      return c10::IValue(std::move(l));
    }
    default: {
      c10::impl::GenericList l(elem);
      for (const auto& i : a.items())
        l.push_back(constantToIValue(i, elem, device));
      return c10::IValue(std::move(l));
    }
  }
}

// A constant where the schema says Tensor.
c10::IValue tensorToIValue(const Arg& a, const c10::TypePtr& t) {
  // Autograd formulas pass undefined tensors where a schema says Tensor, and FX prints them
  // as None: the SDPA backwards' attn_bias (efficient) and cum_seq_q/k (flash) outside
  // nested tensors. An undefined tensor is what eager passes.
  if (a.isNone()) return c10::IValue(at::Tensor());
  // make_fx keeps Python scalars where a schema wants a Tensor (add.Tensor(x, 1e-05)).
  // Python's arg parser turns them into 0-dim "wrapped number" tensors, which take no part
  // in type promotion; do the same so results match eager bit for bit.
  at::Tensor w;
  if (a.kind() == Arg::Kind::Float)
    w = at::scalar_tensor(a.toFloat(), at::TensorOptions().dtype(c10::kDouble));
  else if (a.kind() == Arg::Kind::Int)
    w = at::scalar_tensor(a.toInt(), at::TensorOptions().dtype(c10::kLong));
  else if (a.kind() == Arg::Kind::Bool)
    w = at::scalar_tensor(a.toBool(), at::TensorOptions().dtype(c10::kBool));
  else
    mismatch(a, t);
  w.unsafeGetTensorImpl()->set_wrapped_number(true);
  return c10::IValue(std::move(w));
}

// A constant (no node inside) as an IValue of schema type `t`.
c10::IValue constantToIValue(const Arg& a, const c10::TypePtr& t, const c10::Device& device) {
  using K = c10::TypeKind;
  switch (t->kind()) {
    case K::OptionalType:
      if (a.isNone()) return c10::IValue();
      return constantToIValue(a, t->castRaw<c10::OptionalType>()->getElementType(), device);
    case K::NoneType:
    case K::GeneratorType:
      if (a.isNone()) return c10::IValue();
      mismatch(a, t);
    case K::IntType:
    case K::SymIntType:
      if (a.kind() == Arg::Kind::Int) return c10::IValue(a.toInt());
      if (a.kind() == Arg::Kind::Bool) return c10::IValue(static_cast<int64_t>(a.toBool()));
      // FX writes dtype/layout/memory_format as such even where a schema says int.
      if (a.kind() == Arg::Kind::Dtype) return c10::IValue(toAten(a.dtype()));
      mismatch(a, t);
    case K::FloatType:
    case K::SymFloatType:
      if (a.kind() == Arg::Kind::Float) return c10::IValue(a.toFloat());
      if (a.kind() == Arg::Kind::Int) return c10::IValue(static_cast<double>(a.toInt()));
      mismatch(a, t);
    case K::BoolType:
    case K::SymBoolType:
      if (a.kind() == Arg::Kind::Bool) return c10::IValue(a.toBool());
      if (a.kind() == Arg::Kind::Int) return c10::IValue(a.toInt() != 0);
      mismatch(a, t);
    case K::NumberType:  // Scalar: keep the Python type, it decides type promotion
      if (a.kind() == Arg::Kind::Int) return c10::IValue(a.toInt());
      if (a.kind() == Arg::Kind::Float) return c10::IValue(a.toFloat());
      if (a.kind() == Arg::Kind::Bool) return c10::IValue(a.toBool());
      mismatch(a, t);
    case K::StringType:
      if (a.kind() == Arg::Kind::Str) return c10::IValue(std::string(a.str()));
      mismatch(a, t);
    case K::ScalarTypeType:
      if (a.kind() == Arg::Kind::Dtype) return c10::IValue(toAten(a.dtype()));
      if (a.kind() == Arg::Kind::Int) return c10::IValue(a.toInt());
      mismatch(a, t);
    case K::LayoutType:
      if (a.kind() == Arg::Kind::Layout) return c10::IValue(layoutFromName(a.str()));
      if (a.kind() == Arg::Kind::Int) return c10::IValue(a.toInt());
      mismatch(a, t);
    case K::MemoryFormatType:
      if (a.kind() == Arg::Kind::MemoryFormat) return c10::IValue(memoryFormatFromName(a.str()));
      if (a.kind() == Arg::Kind::Int) return c10::IValue(a.toInt());
      mismatch(a, t);
    case K::DeviceObjType:
      // Note [Devices]: the run device, whatever the trace said.
      if (a.kind() == Arg::Kind::Device || a.kind() == Arg::Kind::Str) return c10::IValue(device);
      mismatch(a, t);
    case K::AnyType:
      return anyToIValue(a, t);
    case K::ListType:
      return listToIValue(a, t, device);
    case K::TensorType:
      return tensorToIValue(a, t);
    default:
      throw ConvertError{"unsupported schema type " + t->str()};
  }
}

}  // namespace

struct Executor::Step {
  enum class Kind : uint8_t { Call, Getitem };
  Kind kind = Kind::Call;
  std::string name;
  std::string target;
  std::optional<c10::OperatorHandle> op;
  std::vector<c10::IValue> stack;  // constants in place; dynamic positions filled per run
  std::vector<DynamicArg> dynamic;
  size_t num_returns = 0;
  uint32_t out_slot = 0;
  int64_t src_slot = -1;  // getitem
  int64_t index = 0;      // getitem
  std::vector<uint32_t> free_after;
  ValueMeta expected;
  bool grad_mode = false;  // run with grad mode on (emptyWorkspace)
  bool any_size = false;   // its value is a workspace or a view of one (workspaceValue)
  bool collective = false;
  // Collectives (step indices) that complete with this step: their last wait
  // (Note [Measured memory]: their own buffers stop counting here).
  std::vector<uint32_t> completes;
};

std::string inputProblem(const GraphInput& in) {
  using K = ValueMeta::Kind;
  if (in.kind == InputKind::Mesh || in.meta.isTensor()) return {};
  if (in.kind != InputKind::Parameter && in.kind != InputKind::Buffer &&
      (in.meta.kind == K::None || in.meta.kind == K::Int || in.meta.kind == K::Float ||
       in.meta.kind == K::Bool))
    return {};
  if (in.kind == InputKind::Opaque)
    return "input " + quoteForMessage(in.name) +
           " is a non-tensor value of unknown content (kind opaque): the executor can supply "
           "meshes, None, ints, floats and bools only";
  return "input " + quoteForMessage(in.name) + " (" + std::string(inputKindName(in.kind)) +
         ") has no tensor meta (shape and dtype)" +
         (in.meta.kind == K::Absent ? "" : "; its value meta is not a tensor") +
         ": mark a non-tensor placeholder as kind mesh or opaque in the header";
}

c10::IValue nonTensorInput(const GraphInput& in) {
  using K = ValueMeta::Kind;
  switch (in.meta.kind) {
    case K::Int:
      return c10::IValue(in.meta.i);
    case K::Bool:
      return c10::IValue(in.meta.i != 0);
    case K::Float:
      return c10::IValue(in.meta.f);
    default:
      return c10::IValue();  // a mesh (no op reads it: it only rides to the outputs) or None
  }
}

std::optional<std::pair<std::string, std::string>> dispatcherName(std::string_view target) {
  if (target.starts_with("torch.ops.")) target.remove_prefix(10);
  auto first = target.find('.');
  auto last = target.rfind('.');
  if (first == std::string_view::npos || first == last || first == 0 || last + 1 == target.size())
    return std::nullopt;
  std::string name = std::string(target.substr(0, first)) +
                     "::" + std::string(target.substr(first + 1, last - first - 1));
  std::string overload(target.substr(last + 1));
  if (overload == "default") overload.clear();
  return std::make_pair(std::move(name), std::move(overload));
}

namespace {

// A node's args and kwargs after lowering (prims -> aten) and the op to call.
struct ResolvedCall {
  c10::OperatorHandle op;
  std::vector<Arg> args;
  Kwargs kwargs;
};

std::optional<c10::OperatorHandle> lookup(const std::string& name, const std::string& overload) {
  return c10::Dispatcher::singleton().findSchema(c10::OperatorName(name, overload));
}

// The dispatcher's op for a target; nullopt when it has none. prims.convert_element_type runs as
// aten::_to_copy (resolve below says why).
std::optional<c10::OperatorHandle> lookupTarget(std::string_view target) {
  if (target == "prims.convert_element_type.default") return lookup("aten::_to_copy", "");
  auto name = dispatcherName(target);
  if (!name) return std::nullopt;
  auto op = lookup(name->first, name->second);
  // Inductor passes sometimes emit the legacy c10d_functional namespace; it is the same op.
  if (!op && name->first.starts_with("c10d_functional::"))
    op = lookup("_" + name->first, name->second);
  return op;
}

ResolvedCall resolve(const Node& n) {
  std::string_view target = n.target().str();
  // prims ops are registered from Python only (torch/_prims), so a C++ process has no schema for
  // them. convert_element_type(a, dtype) is empty_like(a, dtype) + copy_, which is exactly
  // aten::_to_copy(a, dtype=dtype): same values, same strides.
  if (target == "prims.convert_element_type.default") {
    auto op = lookup("aten::_to_copy", "");
    if (!op) failAt(n, "aten::_to_copy is not registered");
    if (n.numArgs() + n.kwargs().size() != 2)
      failAt(n, "prims.convert_element_type takes (a, dtype)");
    std::vector<Arg> args;
    Kwargs kwargs;
    const Arg* a = n.numArgs() > 0 ? &n.arg(0) : n.kwarg("a");
    const Arg* dtype = n.numArgs() > 1 ? &n.arg(1) : n.kwarg("dtype");
    if (!a || !dtype) failAt(n, "prims.convert_element_type takes (a, dtype)");
    args.push_back(*a);
    kwargs.emplace_back(Symbol::intern("dtype"), *dtype);
    return {*op, std::move(args), std::move(kwargs)};
  }
  auto name = dispatcherName(target);
  if (!name) failAt(n, "not an operator name (expected namespace.op.overload)");
  auto op = lookupTarget(target);
  if (!op)
    failAt(n, "no such operator in the c10 dispatcher (" + name->first +
                  (name->second.empty() ? "" : "." + name->second) +
                  "); Python-only ops (torch.library custom ops, prims, higher-order ops) "
                  "cannot run in the C++ executor");
  return {*op, n.args(), n.kwargs()};
}

}  // namespace

std::string deviceKernelProblem(const Graph& g, c10::DeviceType device) {
  c10::DispatchKey key = c10::computeDispatchKey(std::nullopt, std::nullopt, c10::Device(device));
  const Node* first = nullptr;
  size_t count = 0;
  std::vector<std::string_view> targets;  // distinct, in program order
  for (const Node* n = g.first(); n; n = n->next()) {
    if (n->op() != OpKind::CallFunction) continue;
    std::optional<c10::OperatorHandle> op = lookupTarget(n->target().str());
    if (!op || op->hasComputedKernelForDispatchKey(key)) continue;
    if (!first) first = n;
    ++count;
    if (std::find(targets.begin(), targets.end(), n->target().str()) == targets.end())
      targets.push_back(n->target().str());
  }
  if (!first) return {};
  std::string device_name = c10::DeviceTypeName(device, /*lower_case=*/true);
  std::string ops;
  for (std::string_view t : targets)
    ops += (ops.empty() ? "" : ", ") + std::string(t);
  std::string message = "node " + quoteForMessage(first->name()) + ": " + std::to_string(count) +
                        " node" + (count == 1 ? "" : "s") + " call ops with no " + device_name +
                        " kernel (" + ops + "): the graph cannot run on " + device_name + ".";
  if (ops.find("_for_cpu") != std::string::npos)
    message +=
        " Tracing on CPU records CPU-only ops; trace the model on the device it will run "
        "on (or on a fake " +
        device_name + " device) to get that device's ops.";
  return message;
}

namespace {

bool hasNode(const Arg& a) {
  bool found = false;
  a.forEachNode([&](Node*) { found = true; });
  return found;
}

}  // namespace

// The constructor's work, step by step: a slot for every value in program order and a Step per
// call_function (planNodes), the output list (planOutputs), then when each value dies
// (planLifetimes, Note [Lifetimes]).
struct Executor::Planner {
  Planner(Executor& executor, const Graph& graph) : ex(executor), g(graph) {}

  Executor& ex;
  const Graph& g;
  std::unordered_map<const Node*, uint32_t> slot_of;
  std::vector<const Node*> slot_node;
  std::vector<std::vector<uint32_t>> reads;  // per step, the slots it reads
  std::vector<uint32_t> output_reads;
  const Node* output = nullptr;

  uint32_t slotOf(const Node& user, const Node* producer) const {
    auto it = slot_of.find(producer);
    if (it == slot_of.end())
      failAt(user,
             "reads " + quoteForMessage(producer->name()) + ", which is not defined before it");
    return it->second;
  }
  uint32_t newSlot(const Node* n) {
    uint32_t s = static_cast<uint32_t>(slot_node.size());
    slot_of.emplace(n, s);
    slot_node.push_back(n);
    return s;
  }

  // Why a collective's group is missing on this rank, and what would give it one.
  std::string unregisteredGroup(std::string_view name) const {
    std::string msg = "process group " + quoteForMessage(name) + " is not registered on this rank";
    for (const ProcessGroupInfo& pg : g.processGroups()) {
      if (pg.name != name) continue;
      if (pg.ranks.empty()) return msg + " (is this rank in it?)";
      std::string ranks;
      for (int64_t r : pg.ranks)
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      return msg + ": the graph header lists it with ranks [" + ranks +
             "], as the rank that traced the graph saw it, and no device mesh in the graph meta "
             "gives this rank its own copy of it (meta.mesh {\"dim_names\", \"shape\"}: "
             "jointfx.export_graph writes it from a DTensor graph's DeviceMesh placeholders)";
    }
    return msg + ": the graph header does not list it";
  }

  void planNodes();
  void addInput(const Node& n);
  void addConstant(const Node& n);
  void addStep(const Node& n);
  void planCall(const Node& n, Step& step, std::vector<uint32_t>& step_reads);
  std::vector<const Arg*> bindArguments(const Node& n, const ResolvedCall& rc) const;
  void planArgument(const Node& n, const c10::FunctionSchema& schema, size_t i, const Arg* bound,
                    Step& step, std::vector<uint32_t>& step_reads);
  DynamicArg planList(const Node& n, const Arg& a, const c10::TypePtr& type,
                      std::vector<uint32_t>& step_reads);
  void planOutputs();
  void planLifetimes();
  void extendToCompletion(const std::vector<int64_t>& step_of_slot, std::vector<int64_t>& last);
};

void Executor::Planner::planNodes() {
  for (const Node* n = g.first(); n; n = n->next()) {
    switch (n->op()) {
      case OpKind::Placeholder:
        addInput(*n);
        break;
      case OpKind::GetAttr:
        addConstant(*n);
        break;
      case OpKind::Output:
        if (output) failAt(*n, "a graph has one output node");
        output = n;
        break;
      case OpKind::CallFunction:
        if (output) failAt(*n, "node after the output node");
        addStep(*n);
        break;
    }
  }
}

void Executor::Planner::addInput(const Node& n) {
  GraphInput in;
  in.name = n.name();
  in.kind = n.inputKind();
  in.fqn = n.inputFqn();
  in.meta = n.val();
  ex.inputs_.push_back(std::move(in));
  ex.input_slots_.push_back(newSlot(&n));
}

void Executor::Planner::addConstant(const Node& n) {
  // A tensor constant: its bytes travel in the graph header (docs/graph-format.md).
  const ConstantInfo* c = g.findConstant(n.target().str());
  if (!c) {
    // A higher-order op's subgraph (torch.cond's branches): its body travels in the graph meta
    // for PyTorch (docs/pytorch-bridge.md), and no higher-order op runs here.
    for (Use u : n.uses())
      if (u.user->target().str().starts_with("higher_order."))
        failAt(n, "get_attr " + quoteForMessage(n.target().str()) + " is a subgraph of " +
                      std::string(u.user->target().str()) + " " + quoteForMessage(u.user->name()) +
                      ": higher-order ops cannot run in the C++ executor (run the graph in "
                      "PyTorch: jointfx.import_graph rebuilds its subgraphs)");
    failAt(n, "get_attr " + quoteForMessage(n.target().str()) +
                  " has no value: the graph's header lists no such constant (export the graph "
                  "with its GraphModule's attributes)");
  }
  at::Tensor t =
      at::empty(atenSizes(c->meta.shape), at::TensorOptions().dtype(atenDtype(c->meta.dtype)));
  if (!c->data.empty()) std::memcpy(t.data_ptr(), c->data.data(), c->data.size());
  ex.constants_.emplace_back(newSlot(&n), t.to(ex.opts_.device));
}

namespace {

// Whether one of a multi-output node's tensors is empty in the graph's meta. Meta kernels give
// an empty tensor for the scratch a real kernel keeps for its backward (mkldnn_rnn_layer's
// workspace), whose size only the real kernel knows; and such a kernel fills it only when grad
// mode is on, as it was when the graph was traced, else returns an undefined tensor that its
// backward rejects.
bool emptyWorkspace(const ValueMeta& v) {
  if (v.kind != ValueMeta::Kind::List) return false;
  for (const ValueMeta& item : v.items)
    if (item.isTensor() && item.tensor.numel() == 0) return true;
  return false;
}

// Whether `n`'s value is such a workspace, whose size only the kernel knows: a getitem of an
// empty item of it, or an alias or other view of one (SAC caches every value of its regions as an
// aten.alias, the LSTM's workspace included), empty in the meta too.
bool workspaceValue(const Node& n) {
  const Node* x = &n;
  for (int depth = 0; depth < 64 && x->val().isTensor() && x->val().tensor.numel() == 0; ++depth) {
    if (x->target().str() == "operator.getitem")
      return x->numArgs() == 2 && x->arg(0).isNode() && emptyWorkspace(x->arg(0).node()->val());
    if (x->info().category != OpCategory::View || x->inputs().size() != 1) return false;
    x = x->input(0);
  }
  return false;
}

}  // namespace

void Executor::Planner::addStep(const Node& n) {
  Step step;
  step.name = n.name();
  step.target = std::string(n.target().str());
  step.expected = n.val();
  // Grad mode on records no history: no input of the executor requires grad.
  step.grad_mode = emptyWorkspace(step.expected);
  step.any_size = workspaceValue(n);
  std::vector<uint32_t> step_reads;
  if (n.target().str() == "operator.getitem") {
    if (n.numArgs() != 2 || !n.arg(0).isNode() || !n.arg(1).isInt())
      failAt(n, "getitem takes (node, int)");
    step.kind = Step::Kind::Getitem;
    step.src_slot = slotOf(n, n.arg(0).node());
    step.index = n.arg(1).toInt();
    step_reads.push_back(static_cast<uint32_t>(step.src_slot));
  } else {
    planCall(n, step, step_reads);
  }
  step.collective = n.isCollective();
  step.out_slot = newSlot(&n);
  reads.push_back(std::move(step_reads));
  ex.steps_.push_back(std::move(step));
}

void Executor::Planner::planCall(const Node& n, Step& step, std::vector<uint32_t>& step_reads) {
  ResolvedCall rc = resolve(n);
  const c10::FunctionSchema& schema = rc.op.schema();
  const auto& sargs = schema.arguments();
  std::vector<const Arg*> bound = bindArguments(n, rc);
  step.stack.resize(sargs.size());
  for (size_t i = 0; i < sargs.size(); ++i)
    planArgument(n, schema, i, bound[i], step, step_reads);
  step.num_returns = schema.returns().size();
  step.op = rc.op;
}

// The node's argument for each schema position (nullptr: not given): positional, then keyword.
std::vector<const Arg*> Executor::Planner::bindArguments(const Node& n,
                                                         const ResolvedCall& rc) const {
  const c10::FunctionSchema& schema = rc.op.schema();
  const auto& sargs = schema.arguments();
  if (schema.is_vararg()) failAt(n, "vararg schemas are not supported");
  size_t num_positional = 0;
  while (num_positional < sargs.size() && !sargs[num_positional].kwarg_only())
    ++num_positional;
  if (rc.args.size() > num_positional)
    failAt(n, "takes at most " + std::to_string(num_positional) + " positional arguments (" +
                  schema.name() + "), got " + std::to_string(rc.args.size()));
  std::vector<const Arg*> bound(sargs.size(), nullptr);
  for (size_t i = 0; i < rc.args.size(); ++i)
    bound[i] = &rc.args[i];
  for (const auto& [key, value] : rc.kwargs) {
    auto it = std::find_if(sargs.begin(), sargs.end(),
                           [&](const c10::Argument& a) { return a.name() == key.str(); });
    if (it == sargs.end())
      failAt(n, "unknown keyword argument " + quoteForMessage(key.str()) + " for " +
                    c10::toString(schema));
    size_t i = static_cast<size_t>(it - sargs.begin());
    if (bound[i]) failAt(n, "argument " + quoteForMessage(key.str()) + " given twice");
    bound[i] = &value;
  }
  return bound;
}

// Schema position `i`: a constant in the stack, or a DynamicArg filled per run.
void Executor::Planner::planArgument(const Node& n, const c10::FunctionSchema& schema, size_t i,
                                     const Arg* bound, Step& step,
                                     std::vector<uint32_t>& step_reads) {
  const c10::Argument& sa = schema.arguments()[i];
  const c10::TypePtr& type = sa.real_type();
  if (!bound) {
    if (sa.default_value())
      step.stack[i] = *sa.default_value();
    else if (type->kind() == c10::TypeKind::OptionalType)
      step.stack[i] = c10::IValue();
    else
      failAt(n, "missing argument " + quoteForMessage(sa.name()) + " of " + c10::toString(schema));
    return;
  }
  const Arg& a = *bound;
  try {
    if (!hasNode(a)) {
      step.stack[i] = constantToIValue(a, type, ex.opts_.device);
      if (ex.opts_.check_groups && sa.name() == "group_name" && a.isStr() &&
          !groupRegistered(std::string(a.str())))
        failAt(n, unregisteredGroup(a.str()));
      return;
    }
    DynamicArg d;
    if (a.isNode()) {
      d.kind = DynamicArg::Kind::Value;
      d.slot = slotOf(n, a.node());
      step_reads.push_back(static_cast<uint32_t>(d.slot));
    } else if (a.isSequence()) {
      d = planList(n, a, type, step_reads);
    } else {
      mismatch(a, type);
    }
    d.pos = i;
    step.dynamic.push_back(std::move(d));
  } catch (const ConvertError& e) {
    failAt(n, "argument " + quoteForMessage(sa.name()) + ": " + e.message);
  }
}

// A list argument holding nodes: which list it is, and each item's slot or constant.
DynamicArg Executor::Planner::planList(const Node& n, const Arg& a, const c10::TypePtr& type,
                                       std::vector<uint32_t>& step_reads) {
  c10::TypePtr lt = type;
  if (lt->kind() == c10::TypeKind::OptionalType)
    lt = lt->castRaw<c10::OptionalType>()->getElementType();
  if (lt->kind() != c10::TypeKind::ListType) mismatch(a, type);
  const auto& elem = lt->castRaw<c10::ListType>()->getElementType();
  DynamicArg d;
  switch (elem->kind()) {
    case c10::TypeKind::TensorType:
      d.kind = DynamicArg::Kind::TensorList;
      break;
    case c10::TypeKind::OptionalType:
      d.kind = DynamicArg::Kind::OptionalTensorList;
      break;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      d.kind = DynamicArg::Kind::IntList;
      break;
    case c10::TypeKind::FloatType:
      d.kind = DynamicArg::Kind::FloatList;
      break;
    case c10::TypeKind::BoolType:
      d.kind = DynamicArg::Kind::BoolList;
      break;
    default:
      throw ConvertError{"node references inside a " + type->str() + " are not supported"};
  }
  for (const Arg& item : a.items()) {
    ListItem li;
    if (item.isNode()) {
      li.slot = slotOf(n, item.node());
      step_reads.push_back(static_cast<uint32_t>(li.slot));
    } else if (hasNode(item)) {
      throw ConvertError{"nested lists of nodes are not supported"};
    } else if (d.kind == DynamicArg::Kind::TensorList) {
      mismatch(item, elem);
    } else if (d.kind != DynamicArg::Kind::OptionalTensorList || !item.isNone()) {
      li.constant = constantToIValue(item, elem, ex.opts_.device);
    }
    d.items.push_back(std::move(li));
  }
  return d;
}

void Executor::Planner::planOutputs() {
  std::vector<Arg> outs;
  if (output->numArgs() == 1 && output->arg(0).isSequence())
    outs = output->arg(0).items();
  else
    outs = output->args();
  for (const Arg& a : outs) {
    if (a.isNode()) {
      uint32_t s = slotOf(*output, a.node());
      ex.output_slots_.push_back(s);
      output_reads.push_back(s);
    } else if (a.isNone()) {
      ex.output_slots_.push_back(-1);
    } else {
      failAt(*output, "graph outputs must be nodes or None");
    }
  }
  ex.num_outputs_ = ex.output_slots_.size();
}

// Note [Lifetimes]: the step after which each slot is freed.
void Executor::Planner::planLifetimes() {
  std::vector<Step>& steps = ex.steps_;
  const size_t num_slots = ex.num_slots_;
  // The last reader of every slot, in step positions; outputs never die.
  const size_t kNever = steps.size();
  std::vector<int64_t> last(num_slots, -1);
  for (size_t s = 0; s < steps.size(); ++s)
    for (uint32_t r : reads[s])
      last[r] = std::max<int64_t>(last[r], static_cast<int64_t>(s));
  for (uint32_t r : output_reads)
    last[r] = static_cast<int64_t>(kNever);
  std::vector<int64_t> step_of_slot(num_slots, -1);
  for (size_t s = 0; s < steps.size(); ++s)
    step_of_slot[steps[s].out_slot] = static_cast<int64_t>(s);
  extendToCompletion(step_of_slot, last);
  for (size_t slot = 0; slot < num_slots; ++slot) {
    if (last[slot] == static_cast<int64_t>(kNever)) continue;
    if (last[slot] < 0) {
      // Nobody reads it: placeholders are dropped before the first step, op results right after
      // their own step.
      int64_t own = step_of_slot[slot];
      if (own < 0)
        ex.free_after_inputs_.push_back(static_cast<uint32_t>(slot));
      else
        steps[static_cast<size_t>(own)].free_after.push_back(static_cast<uint32_t>(slot));
      continue;
    }
    steps[static_cast<size_t>(last[slot])].free_after.push_back(static_cast<uint32_t>(slot));
  }
}

// A collective's completion is its latest wait, reached directly or through getitems of a
// coalesced collective; its inputs and output live until then.
void Executor::Planner::extendToCompletion(const std::vector<int64_t>& step_of_slot,
                                           std::vector<int64_t>& last) {
  const std::vector<Step>& steps = ex.steps_;
  std::vector<int64_t> completion(ex.num_slots_, -1);  // for collective output slots
  for (size_t s = 0; s < steps.size(); ++s) {
    const Node* n = slot_node[steps[s].out_slot];
    if (!n->isWait()) continue;
    for (uint32_t r : reads[s]) {
      uint32_t src = r;
      // Walk back through getitems to the collective.
      while (step_of_slot[src] >= 0 &&
             steps[static_cast<size_t>(step_of_slot[src])].kind == Step::Kind::Getitem)
        src = static_cast<uint32_t>(steps[static_cast<size_t>(step_of_slot[src])].src_slot);
      completion[src] = std::max<int64_t>(completion[src], static_cast<int64_t>(s));
    }
  }
  for (size_t s = 0; s < steps.size(); ++s) {
    const Node* n = slot_node[steps[s].out_slot];
    int64_t done = completion[steps[s].out_slot];
    if (!n->isCollective() || done < 0) continue;
    ex.steps_[static_cast<size_t>(done)].completes.push_back(static_cast<uint32_t>(s));
    for (uint32_t r : reads[s])
      last[r] = std::max(last[r], done);
    last[steps[s].out_slot] = std::max(last[steps[s].out_slot], done);
  }
}

Executor::Executor(const Graph& g, ExecutorOptions opts) : opts_(std::move(opts)) {
  Planner p(*this, g);
  p.planNodes();
  if (!p.output) throw JfxError({}, "graph has no output node");
  p.planOutputs();
  num_slots_ = p.slot_node.size();
  p.planLifetimes();
  stats_.steps = steps_.size();
}

Executor::~Executor() = default;

namespace {

std::string describe(const c10::IValue& v) {
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    if (!t.defined()) return "undefined tensor";
    return std::string(c10::toString(t.scalar_type())) + c10::str(t.sizes());
  }
  return v.tagKind();
}

std::string describe(const TensorMeta& m) {
  std::string s(dtypeName(m.dtype));
  s += "[";
  for (size_t i = 0; i < m.shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(m.shape[i]);
  return s + "]";
}

// Empty when `v` matches the graph's meta, else what differs. `element`: `v` is one output of a
// multi-output node (an item of its tuple, or a getitem of it).
std::string checkMeta(const c10::IValue& v, const ValueMeta& m, bool element = false) {
  if (m.kind == ValueMeta::Kind::Tensor) {
    if (!v.isTensor() || !v.toTensor().defined())
      return "expected a tensor " + describe(m.tensor) + ", got " + describe(v);
    const at::Tensor& t = v.toTensor();
    if (m.tensor.dtype != ScalarType::Undefined && t.scalar_type() != toAten(m.tensor.dtype))
      return "output " + describe(v) + " does not match the graph's " + describe(m.tensor);
    // An empty tensor among a node's outputs is a workspace whose size the meta kernel cannot
    // know (emptyWorkspace): any size of its dtype matches.
    if (t.sizes() != atenSizes(m.tensor.shape) && !(element && m.tensor.numel() == 0))
      return "output " + describe(v) + " does not match the graph's " + describe(m.tensor);
    return {};
  }
  if (m.kind == ValueMeta::Kind::List) {
    std::vector<c10::IValue> items;
    if (v.isTuple()) {
      const auto& e = v.toTupleRef().elements();
      items.assign(e.begin(), e.end());
    } else if (v.isList()) {
      for (const c10::IValue& i : v.toListRef())
        items.push_back(i);
    } else {
      return "expected " + std::to_string(m.items.size()) + " outputs, got " + describe(v);
    }
    if (items.size() != m.items.size())
      return "expected " + std::to_string(m.items.size()) + " outputs, got " +
             std::to_string(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      std::string e = checkMeta(items[i], m.items[i], /*element=*/true);
      if (!e.empty()) return "output " + std::to_string(i) + ": " + e;
    }
  }
  return {};
}

// Calls f on the storage of every tensor in `v` (a tensor, or a tuple or list of values).
template <typename F>
void forEachStorage(const c10::IValue& v, const F& f) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (t.defined() && t.has_storage()) f(t.storage().unsafeGetStorageImpl());
  } else if (v.isTuple()) {
    for (const c10::IValue& e : v.toTupleRef().elements())
      forEachStorage(e, f);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef())
      forEachStorage(e, f);
  }
}

[[noreturn]] void throwStepError(const std::string& name, const std::string& target,
                                 const std::string& message) {
  throw JfxError(SourceLocation::atNode(name), target + ": " + message);
}

// The storages of a run's inputs and constants, each counted once (Note [Measured memory]).
int64_t inputStorageBytes(const std::vector<c10::IValue>& inputs,
                          const std::vector<std::pair<uint32_t, c10::IValue>>& constants) {
  std::unordered_set<const c10::StorageImpl*> seen;
  int64_t bytes = 0;
  auto count = [&](const c10::IValue& v) {
    if (!v.isTensor()) return;
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || !t.has_storage()) return;
    if (seen.insert(t.storage().unsafeGetStorageImpl()).second)
      bytes += static_cast<int64_t>(t.storage().nbytes());
  };
  for (const c10::IValue& v : inputs)
    count(v);
  for (const auto& [slot, value] : constants)
    count(value);
  return bytes;
}

}  // namespace

// One call of run(): the value table, how many values are live, and the memory window with the
// storages the run holds (Note [Measured memory]).
struct Executor::Run {
  Executor& ex;
  std::vector<c10::IValue> values;
  size_t live = 0, max_live = 0;
  int64_t input_bytes = 0;
  std::optional<MemoryWindow> window;
  bool curve = false;     // record the high-water mark of every step
  bool releases = false;  // the window counts storages out when the run lets go of them
  std::unordered_map<const c10::StorageImpl*, uint32_t> held;
  std::vector<std::vector<void*>> staging;  // per collective step: its own buffers
  std::vector<c10::IValue> stack;

  explicit Run(Executor& executor) : ex(executor) {}

  // The inputs and constants into their slots, less the placeholders nobody reads.
  void loadValues(std::vector<c10::IValue>& inputs) {
    values.resize(ex.num_slots_);
    for (size_t i = 0; i < inputs.size(); ++i) {
      values[ex.input_slots_[i]] = std::move(inputs[i]);
      ++live;
    }
    for (const auto& [slot, value] : ex.constants_) {
      values[slot] = value;
      ++live;
    }
    for (uint32_t s : ex.free_after_inputs_) {
      values[s] = c10::IValue();
      --live;
    }
    max_live = live;
  }

  void openWindow() {
    ExecutorStats& stats = ex.stats_;
    stats.input_bytes = stats.peak_bytes = -1;
    stats.memory_unmeasured.clear();
    stats.memory_curve.clear();
    if (ex.opts_.measure_memory) window.emplace(ex.opts_.device);
    curve = window && window->active() && ex.opts_.memory_curve;
    if (curve) stats.memory_curve.reserve(ex.steps_.size());
    // Note [Measured memory]: a storage stops counting when the run lets go of it, though a
    // backend thread may free it later. The values hold storages (counted per storage: views
    // share one); a collective's own buffers (staging[k]) are let go at its last wait.
    releases = window && window->releases();
    staging.resize(releases ? ex.steps_.size() : 0);
  }

  void hold(const c10::IValue& v) {
    forEachStorage(v, [&](const c10::StorageImpl* st) { ++held[st]; });
  }
  void drop(const c10::IValue& v) {
    forEachStorage(v, [&](const c10::StorageImpl* st) {
      auto it = held.find(st);
      if (it == held.end() || --it->second > 0) return;
      held.erase(it);
      window->release(st->data_ptr().get());
    });
  }

  c10::IValue getitem(const Step& step) const {
    const c10::IValue& src = values[static_cast<size_t>(step.src_slot)];
    int64_t size = src.isTuple()  ? static_cast<int64_t>(src.toTupleRef().elements().size())
                   : src.isList() ? static_cast<int64_t>(src.toListRef().size())
                                  : -1;
    if (size < 0) throwStepError(step.name, step.target, "getitem of " + describe(src));
    int64_t i = step.index < 0 ? step.index + size : step.index;
    if (i < 0 || i >= size)
      throwStepError(step.name, step.target,
                     "index " + std::to_string(step.index) + " out of range for " +
                         std::to_string(size) + " values");
    return src.isTuple() ? src.toTupleRef().elements()[static_cast<size_t>(i)]
                         : src.toListRef()[static_cast<size_t>(i)];
  }

  // The step's planned stack with this run's values in its dynamic positions.
  void fillStack(const Step& step) {
    stack = step.stack;  // copies constants: IValue copies of scalars/lists are refcount bumps
    for (const DynamicArg& d : step.dynamic) {
      switch (d.kind) {
        case DynamicArg::Kind::Value:
          stack[d.pos] = values[static_cast<size_t>(d.slot)];
          break;
        case DynamicArg::Kind::TensorList:
        case DynamicArg::Kind::OptionalTensorList: {
          const c10::IValue* bad = nullptr;
          stack[d.pos] = d.kind == DynamicArg::Kind::TensorList
                             ? tensorList<at::Tensor>(d.items, values, bad)
                             : tensorList<std::optional<at::Tensor>>(d.items, values, bad);
          if (bad)
            throwStepError(step.name, step.target,
                           "list item is " + describe(*bad) + ", not a tensor");
          break;
        }
        case DynamicArg::Kind::IntList:
          stack[d.pos] = scalarList<int64_t>(d.items, values);
          break;
        case DynamicArg::Kind::FloatList:
          stack[d.pos] = scalarList<double>(d.items, values);
          break;
        case DynamicArg::Kind::BoolList:
          stack[d.pos] = scalarList<bool>(d.items, values);
          break;
      }
    }
  }

  // Calls step k's op on its stack; a collective's own buffers go to staging[k].
  c10::IValue call(const Step& step, size_t k) {
    fillStack(step);
    const bool capture = releases && step.collective;
    if (capture) window->beginCapture();
    try {
      c10::AutoGradMode grad_mode(step.grad_mode);
      step.op->callBoxed(stack);
    } catch (const c10::Error& e) {
      throwStepError(step.name, step.target, e.what_without_backtrace());
    } catch (const std::exception& e) {
      throwStepError(step.name, step.target, e.what());
    }
    if (stack.size() != step.num_returns)
      throwStepError(step.name, step.target,
                     "returned " + std::to_string(stack.size()) + " values, schema says " +
                         std::to_string(step.num_returns));
    c10::IValue result =
        step.num_returns == 1 ? std::move(stack[0]) : c10::ivalue::Tuple::create(std::move(stack));
    stack.clear();
    if (capture) {
      // What the call allocated and still holds, other than its outputs: the backend's own.
      std::vector<void*> own = window->endCapture();
      forEachStorage(result, [&](const c10::StorageImpl* st) {
        own.erase(std::remove(own.begin(), own.end(), st->data_ptr().get()), own.end());
      });
      staging[k] = std::move(own);
    }
    return result;
  }

  // Stores step k's result and lets go of what dies after it.
  void store(const Step& step, c10::IValue result) {
    if (ex.opts_.check_meta && step.expected.kind != ValueMeta::Kind::Absent) {
      // A getitem's value is one output of a multi-output node (a workspace, maybe).
      std::string e =
          checkMeta(result, step.expected, step.kind == Step::Kind::Getitem || step.any_size);
      if (!e.empty()) throwStepError(step.name, step.target, e);
    }
    values[step.out_slot] = std::move(result);
    if (releases) hold(values[step.out_slot]);
    ++live;
    max_live = std::max(max_live, live);
    for (uint32_t s : step.free_after) {
      if (releases) drop(values[s]);
      values[s] = c10::IValue();
      --live;
    }
    if (releases)
      for (uint32_t c : step.completes) {
        for (void* p : staging[c])
          window->release(p);
        staging[c].clear();
      }
  }

  void runStep(size_t k) {
    const Step& step = ex.steps_[k];
    store(step, step.kind == Step::Kind::Getitem ? getitem(step) : call(step, k));
  }

  void recordStats() {
    ExecutorStats& stats = ex.stats_;
    stats.max_live_values = max_live;
    if (window && window->active()) {
      stats.input_bytes = input_bytes;
      stats.peak_bytes = input_bytes + window->peak();
    } else if (window) {
      stats.memory_unmeasured = window->unavailable();
    }
  }

  std::vector<c10::IValue> outputs() const {
    std::vector<c10::IValue> out;
    out.reserve(ex.output_slots_.size());
    for (int64_t s : ex.output_slots_)
      out.push_back(s < 0 ? c10::IValue() : values[static_cast<size_t>(s)]);
    return out;
  }
};

std::vector<c10::IValue> Executor::run(std::vector<c10::IValue> inputs) {
  if (inputs.size() != inputs_.size())
    throw JfxError({}, "the graph takes " + std::to_string(inputs_.size()) + " inputs, got " +
                           std::to_string(inputs.size()));
  // The graph is already the backward: nothing here may record autograd history.
  c10::AutoGradMode no_grad(false);
  // Note [Measured memory]: the inputs stay alive until the run returns (the value table drops
  // them after their last reader, which then frees nothing); their storages are counted once.
  const std::vector<c10::IValue> held_inputs =
      opts_.measure_memory ? inputs : std::vector<c10::IValue>();
  Run r(*this);
  if (opts_.measure_memory) r.input_bytes = inputStorageBytes(held_inputs, constants_);
  r.loadValues(inputs);
  r.openWindow();
  if (opts_.profile && step_seconds_.size() != steps_.size()) {
    step_seconds_.assign(steps_.size(), 0.0);
    step_calls_.assign(steps_.size(), 0);
  }
  // Relaxed: the watchdog only needs to see the counter move eventually.
  struct NotRunning {
    std::atomic<int64_t>& at;
    ~NotRunning() { at.store(-1, std::memory_order_relaxed); }
  } not_running{running_};
  for (size_t k = 0; k < steps_.size(); ++k) {
    running_.store(static_cast<int64_t>(k), std::memory_order_relaxed);
    std::chrono::steady_clock::time_point t0;
    if (opts_.profile) t0 = std::chrono::steady_clock::now();
    r.runStep(k);
    if (opts_.profile) {
      step_seconds_[k] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++step_calls_[k];
    }
    if (r.curve) stats_.memory_curve.push_back(r.input_bytes + r.window->takePeak());
    nodes_finished_.fetch_add(1, std::memory_order_relaxed);
  }
  r.recordStats();
  return r.outputs();
}

const std::string& Executor::stepName(size_t k) const {
  return steps_.at(k).name;
}

std::string Executor::runningNode() const {
  int64_t k = running_.load(std::memory_order_relaxed);
  if (k < 0 || static_cast<size_t>(k) >= steps_.size()) return "";
  const Step& s = steps_[static_cast<size_t>(k)];  // planned once, never written by run()
  return quoteForMessage(s.name) + " (" + s.target + ")";
}

std::vector<OpProfile> Executor::profile() const {
  std::map<std::string, OpProfile> by_target;
  for (size_t k = 0; k < step_seconds_.size(); ++k) {
    OpProfile& p = by_target[steps_[k].target];
    p.target = steps_[k].target;
    p.calls += step_calls_[k];
    p.seconds += step_seconds_[k];
  }
  std::vector<OpProfile> out;
  for (auto& [target, p] : by_target)
    out.push_back(std::move(p));
  std::stable_sort(out.begin(), out.end(),
                   [](const OpProfile& a, const OpProfile& b) { return a.seconds > b.seconds; });
  return out;
}

}  // namespace jfx::rt
