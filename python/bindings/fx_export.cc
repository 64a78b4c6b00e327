// export_nodes and graph_from_fx: torch.fx nodes as the JSON v1 "nodes" array, or straight to the
// jfx::Graph that reading that JSON would give.
//
// jointfx.export._node_to_json is the definition of how an FX node becomes JSON; export_nodes is
// the same mapping for the values traced graphs are made of (nodes, ints, strings, FakeTensor
// values with concrete sizes, plain-data meta), done without building Python dicts and
// serializing them: on a 10K-node graph that Python work was most of an in-process pipeline's
// cost. Anything else (a SymInt, an Opaque, a namedtuple, an enum, the output node) goes through
// the Python function for that value, so both give the same document;
// tests/python/test_fx_export.py compares them on every traced fixture and on freshly traced
// models of each family. graph_from_fx skips the text as well (GraphBuilder below).
#include "python/bindings/fx_export.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/error.h"
#include "ir/json_format.h"
#include "ir/loader.h"

namespace py = pybind11;

namespace jfx::python {
namespace {

// What the exporter needs from jointfx.export, looked up once per call.
struct Hooks {
  PyObject* node_type;         // torch.fx.Node
  PyObject* list_type;         // torch.fx.immutable_collections.immutable_list
  PyObject* tensor_type;       // torch.Tensor
  PyObject* dropped;           // frozenset of meta keys never written
  PyObject* memo;              // dict: dtype/device/layout/memory_format argument -> JSON bytes
  PyObject* names;             // dict: a value's device or dtype -> its JSON string, as bytes
  PyObject* memo_types;        // tuple of the types memo may hold
  PyObject* target_name;       // (node) -> str
  PyObject* arg_to_json;       // (value, node name) -> JSON data
  PyObject* val_to_json;       // (val) -> (ok, JSON data)
  PyObject* enum_int;          // (value) -> int | None
  PyObject* node_to_json;      // (node, phase, include_stack_trace) -> dict
  PyObject* dtype_name;        // (dtype) -> str
  PyObject* fake_tensor_type;  // torch._subclasses.fake_tensor.FakeTensor
};

// A Python call failed: the error is already set; unwind to the caller as a Python exception.
[[noreturn]] void raise() {
  throw py::error_already_set();
}

PyObject* check(PyObject* p) {
  if (p == nullptr) raise();
  return p;
}

// A str's UTF-8 text (CPython keeps it in the object); valid while `s` lives.
std::string_view utf8(PyObject* s) {
  Py_ssize_t len;
  const char* c = PyUnicode_AsUTF8AndSize(s, &len);
  if (c == nullptr) raise();
  return {c, static_cast<size_t>(len)};
}

py::object attr(PyObject* o, const py::object& name) {
  return py::reinterpret_steal<py::object>(check(PyObject_GetAttr(o, name.ptr())));
}

template <typename... A>
py::object call(PyObject* fn, A*... a) {
  return py::reinterpret_steal<py::object>(check(PyObject_CallFunctionObjArgs(fn, a..., nullptr)));
}

// Attribute names, interned once per call. _args and _kwargs are torch.fx.Node's own slots
// (what its args/kwargs properties return), read without the property call.
struct AttrNames {
  py::object op = intern("op"), name = intern("name"), args = intern("_args"),
             kwargs = intern("_kwargs"), meta = intern("meta"), target = intern("target"),
             symbolic = intern("_has_symbolic_sizes_strides"), device = intern("device"),
             dtype = intern("dtype"), shape = intern("shape"), stride = intern("stride"),
             phase = intern("phase"), fake_mode = intern("fake_mode"),
             in_kernel = intern("in_kernel_invocation"), fake_device = intern("_fake_device"),
             module_fqn = intern("module_fqn");
  static py::object intern(const char* s) {
    return py::reinterpret_steal<py::object>(check(PyUnicode_InternFromString(s)));
  }
};

class Writer {
 public:
  Writer(const Hooks& h, bool include_stack_trace) : h_(h), stack_(include_stack_trace) {
    out_.reserve(1 << 20);
  }

  std::string& text() { return out_; }

  void node(PyObject* node, PyObject* phase) {
    py::object op = attr(node, n_.op);
    if (PyUnicode_CompareWithASCIIString(op.ptr(), "output") == 0) {
      // FX lets the output be a tuple, a list or one value; the Python exporter normalizes it.
      py::object d = call(h_.node_to_json, node, phase, stack_ ? Py_True : Py_False);
      data(d.ptr());
      return;
    }
    py::object name = attr(node, n_.name);
    out_ += "{\"args\":[";
    py::object args = attr(node, n_.args);
    const Py_ssize_t n = PyTuple_GET_SIZE(args.ptr());
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (i) out_ += ',';
      arg(PyTuple_GET_ITEM(args.ptr(), i), name.ptr());
    }
    out_ += "],\"kwargs\":{";
    py::object kwargs = attr(node, n_.kwargs);
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    bool first = true;
    while (PyDict_Next(kwargs.ptr(), &pos, &key, &value)) {
      if (!first) out_ += ',';
      first = false;
      string(key);
      out_ += ':';
      arg(value, name.ptr());
    }
    out_ += "},\"meta\":";
    meta(node, phase);
    out_ += ",\"name\":";
    string(name.ptr());
    out_ += ",\"op\":";
    string(op.ptr());
    out_ += ",\"target\":";
    target(node, op.ptr());
    out_ += '}';
  }

 private:
  const AttrNames n_;

  void target(PyObject* node, PyObject* op) {
    // Memoized per call_function target object: a graph has a few dozen distinct ones. Keyed by
    // identity (each node holds its target for the whole call), which also spares OpOverload's
    // Python __hash__.
    if (PyUnicode_CompareWithASCIIString(op, "call_function") == 0) {
      py::object t = attr(node, n_.target);
      auto [it, fresh] = targets_.try_emplace(t.ptr());
      if (fresh) {
        const size_t start = out_.size();
        py::object s = call(h_.target_name, node);
        string(s.ptr());
        it->second.assign(out_, start, std::string::npos);
      } else {
        out_ += it->second;
      }
      return;
    }
    py::object s = call(h_.target_name, node);
    string(s.ptr());
  }

  void arg(PyObject* v, PyObject* node_name) {
    PyTypeObject* type = Py_TYPE(v);
    if (reinterpret_cast<PyObject*>(type) == h_.node_type) {
      out_ += "{\"node\":";
      py::object name = attr(v, n_.name);
      string(name.ptr());
      out_ += '}';
    } else if (v == Py_None) {
      out_ += "null";
    } else if (type == &PyBool_Type) {
      out_ += v == Py_True ? "true" : "false";
    } else if (type == &PyLong_Type) {
      if (!integer(v)) data(fallbackArg(v, node_name).ptr());
    } else if (type == &PyUnicode_Type) {
      string(v);
    } else if (type == &PyFloat_Type) {
      const double x = PyFloat_AS_DOUBLE(v);
      if (std::isfinite(x))
        number(x);
      else
        out_ += std::isnan(x) ? "{\"float\":\"nan\"}"
                : x > 0       ? "{\"float\":\"inf\"}"
                              : "{\"float\":\"-inf\"}";
    } else if (type == &PyList_Type || reinterpret_cast<PyObject*>(type) == h_.list_type) {
      out_ += '[';
      for (Py_ssize_t i = 0, n = PyList_GET_SIZE(v); i < n; ++i) {
        if (i) out_ += ',';
        arg(PyList_GET_ITEM(v, i), node_name);
      }
      out_ += ']';
    } else if (type == &PyTuple_Type) {
      out_ += "{\"tuple\":[";
      for (Py_ssize_t i = 0, n = PyTuple_GET_SIZE(v); i < n; ++i) {
        if (i) out_ += ',';
        arg(PyTuple_GET_ITEM(v, i), node_name);
      }
      out_ += "]}";
    } else {
      memoArg(v, node_name);
    }
  }

  // dtype, device, layout and memory_format arguments recur on many nodes: their JSON is made by
  // the Python exporter once per distinct object.
  void memoArg(PyObject* v, PyObject* node_name) {
    const int memoizable = PyObject_IsInstance(v, h_.memo_types);
    if (memoizable < 0) raise();
    if (memoizable)
      cached(h_.memo, v, [&] { data(fallbackArg(v, node_name).ptr()); });
    else
      data(fallbackArg(v, node_name).ptr());
  }

  // Appends the JSON text `cache` holds for `key`; the first time, `write` appends it and the
  // text is remembered.
  template <typename Write>
  void cached(PyObject* cache, PyObject* key, Write&& write) {
    if (PyObject* hit = PyDict_GetItemWithError(cache, key)) {
      char* s;
      Py_ssize_t len;
      if (PyBytes_AsStringAndSize(hit, &s, &len) != 0) raise();
      out_.append(s, static_cast<size_t>(len));
      return;
    }
    if (PyErr_Occurred()) raise();
    const size_t start = out_.size();
    write();
    py::bytes text(out_.data() + start, out_.size() - start);
    if (PyDict_SetItem(cache, key, text.ptr()) != 0) raise();
  }

  py::object fallbackArg(PyObject* v, PyObject* node_name) {
    return call(h_.arg_to_json, v, node_name);
  }

  void meta(PyObject* node, PyObject* phase) {
    py::object meta = attr(node, n_.meta);
    out_ += '{';
    bool first = true;
    auto key = [&](std::string_view k) {
      if (!first) out_ += ',';
      first = false;
      out_ += '"';
      out_ += k;
      out_ += "\":";
    };
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(meta.ptr(), &pos, &k, &v)) {
      if (!PyUnicode_Check(k)) continue;  // _is_json_value would reject the meta dict's key
      const int dropped = PySet_Contains(h_.dropped, k);
      if (dropped < 0) raise();
      if (dropped || PyUnicode_CompareWithASCIIString(k, "phase") == 0) continue;
      const std::string_view name = utf8(k);
      if (name == "val") {
        const size_t mark = out_.size();
        const bool was_first = first;
        key("val");
        if (!val(v)) {  // not representable: no "val" key
          out_.resize(mark);
          first = was_first;
        }
      } else if (name == "recompute") {
        py::object r = isPlainInt(v) ? py::reinterpret_borrow<py::object>(v) : call(h_.enum_int, v);
        if (r.ptr() != Py_None) key("recompute"), data(r.ptr());
      } else if (name == "ac_graph_id" || name == "seq_nr") {
        if (PyLong_Check(v) && !PyBool_Check(v)) key(name), data(v);
      } else if (name == "stack_trace") {
        if (stack_ && PyUnicode_Check(v)) key("stack_trace"), string(v);
      } else if (name == "custom") {
        if (PyDict_Check(v) && PyDict_GET_SIZE(v) > 0 && isJson(v)) key("custom"), data(v);
      } else if (isJson(v)) {
        if (!first) out_ += ',';
        first = false;
        string(k);
        out_ += ':';
        data(v);
      }
    }
    if (phase != Py_None) {
      key("phase");
      string(phase);
    }
    out_ += '}';
  }

  static bool isPlainInt(PyObject* v) { return Py_TYPE(v) == &PyLong_Type; }

  // meta["val"]; false when it has no JSON form (val_to_json's "not representable").
  bool val(PyObject* v) {
    const int is_tensor = PyObject_IsInstance(v, h_.tensor_type);
    if (is_tensor < 0) raise();
    if (is_tensor) {
      py::object symbolic = attr(v, n_.symbolic);
      if (symbolic.ptr() == Py_False) {
        py::object device = attr(v, n_.device);
        py::object dtype = attr(v, n_.dtype);
        py::object shape = attr(v, n_.shape);
        py::object stride =
            py::reinterpret_steal<py::object>(check(PyObject_CallMethodNoArgs(v, n_.stride.ptr())));
        out_ += "{\"device\":";
        memoString(device.ptr(), nullptr);
        out_ += ",\"dtype\":";
        memoString(dtype.ptr(), h_.dtype_name);
        out_ += ",\"shape\":";
        ints(shape.ptr());
        out_ += ",\"stride\":";
        ints(stride.ptr());
        out_ += '}';
        return true;
      }
    } else if (v == Py_None || PyBool_Check(v) || isPlainInt(v)) {
      data(v);
      return true;
    }
    py::object r = call(h_.val_to_json, v);
    if (PyTuple_GET_ITEM(r.ptr(), 0) != Py_True) return false;
    data(PyTuple_GET_ITEM(r.ptr(), 1));
    return true;
  }

  // The JSON string of a device (str(device)) or dtype (`name_fn(dtype)`), once per object.
  void memoString(PyObject* v, PyObject* name_fn) {
    cached(h_.names, v, [&] {
      py::object s = name_fn != nullptr ? call(name_fn, v)
                                        : py::reinterpret_steal<py::object>(check(PyObject_Str(v)));
      string(s.ptr());
    });
  }

  void ints(PyObject* seq) {
    out_ += '[';
    for (Py_ssize_t i = 0, n = PyTuple_GET_SIZE(seq); i < n; ++i) {
      if (i) out_ += ',';
      if (!integer(PyTuple_GET_ITEM(seq, i))) {
        PyErr_SetString(PyExc_OverflowError, "a tensor size or stride beyond 64 bits");
        raise();
      }
    }
    out_ += ']';
  }

  // An int that fits 64 bits; false (nothing written, no error set) otherwise.
  bool integer(PyObject* v) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) raise();
    if (overflow != 0) return false;
    out_ += std::to_string(x);
    return true;
  }

  // Python's repr of a finite float (what json.dumps writes): "1.0", "1e-05".
  void number(double x) {
    char* s = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, nullptr);
    if (s == nullptr) raise();
    out_ += s;
    PyMem_Free(s);
  }

  // jointfx.export._is_json_value: plain JSON data (finite floats, string keys).
  static bool isJson(PyObject* v) {
    if (v == Py_None || PyBool_Check(v) || PyLong_Check(v) || PyUnicode_Check(v)) return true;
    if (PyFloat_Check(v)) return std::isfinite(PyFloat_AS_DOUBLE(v));
    if (PyList_Check(v)) {
      for (Py_ssize_t i = 0, n = PyList_GET_SIZE(v); i < n; ++i)
        if (!isJson(PyList_GET_ITEM(v, i))) return false;
      return true;
    }
    if (PyDict_Check(v)) {
      PyObject *k, *x;
      Py_ssize_t pos = 0;
      while (PyDict_Next(v, &pos, &k, &x))
        if (!PyUnicode_Check(k) || !isJson(x)) return false;
      return true;
    }
    return false;
  }

  // Plain data as JSON: what the Python exporter puts into the document (dicts, lists, tuples,
  // str, int, finite float, bool, None).
  void data(PyObject* v) {
    if (v == Py_None) {
      out_ += "null";
    } else if (PyBool_Check(v)) {
      out_ += v == Py_True ? "true" : "false";
    } else if (PyLong_Check(v)) {
      if (!integer(v)) {  // beyond 64 bits: its decimal digits, as json.dumps writes them
        py::object s = py::reinterpret_steal<py::object>(check(PyLong_Type.tp_repr(v)));
        out_ += utf8(s.ptr());
      }
    } else if (PyUnicode_Check(v)) {
      string(v);
    } else if (PyFloat_Check(v)) {
      const double x = PyFloat_AS_DOUBLE(v);
      if (!std::isfinite(x)) {
        PyErr_SetString(PyExc_ValueError, "a non-finite float in plain JSON data");
        raise();
      }
      number(x);
    } else if (PyList_Check(v) || PyTuple_Check(v)) {
      py::object seq = py::reinterpret_steal<py::object>(check(PySequence_Fast(v, "")));
      out_ += '[';
      for (Py_ssize_t i = 0, n = PySequence_Fast_GET_SIZE(seq.ptr()); i < n; ++i) {
        if (i) out_ += ',';
        data(PySequence_Fast_GET_ITEM(seq.ptr(), i));
      }
      out_ += ']';
    } else if (PyDict_Check(v)) {
      out_ += '{';
      PyObject *k, *x;
      Py_ssize_t pos = 0;
      bool first = true;
      while (PyDict_Next(v, &pos, &k, &x)) {
        if (!PyUnicode_Check(k)) {
          PyErr_SetString(PyExc_TypeError, "a dict key that is not a string in plain JSON data");
          raise();
        }
        if (!first) out_ += ',';
        first = false;
        string(k);
        out_ += ':';
        data(x);
      }
      out_ += '}';
    } else {
      PyErr_Format(PyExc_TypeError, "no JSON form for a %s", Py_TYPE(v)->tp_name);
      raise();
    }
  }

  void string(PyObject* s) {
    out_ += '"';
    for (const char c : utf8(s)) {
      const unsigned char ch = static_cast<unsigned char>(c);
      switch (ch) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\r':
          out_ += "\\r";
          break;
        case '\t':
          out_ += "\\t";
          break;
        default:
          if (ch < 0x20) {
            static constexpr char kHex[] = "0123456789abcdef";
            out_ += "\\u00";
            out_ += kHex[ch >> 4];
            out_ += kHex[ch & 15];
          } else {
            out_ += static_cast<char>(ch);
          }
      }
    }
    out_ += '"';
  }

  const Hooks& h_;
  const bool stack_;
  std::string out_;
  std::unordered_map<PyObject*, std::string> targets_;  // target object -> its JSON string
};

Hooks hooksFrom(const py::dict& hooks) {
  auto get = [&](const char* k) { return py::object(hooks[k]).ptr(); };
  // Borrowed: `hooks` keeps every object alive for the call.
  const Hooks h{get("node_type"),   get("list_type"),       get("tensor_type"), get("dropped"),
                get("memo"),        get("names"),           get("memo_types"),  get("target_name"),
                get("arg_to_json"), get("val_to_json"),     get("enum_int"),    get("node_to_json"),
                get("dtype_name"),  get("fake_tensor_type")};
  if (!PyDict_Check(h.memo) || !PyDict_Check(h.names) || !PyAnySet_Check(h.dropped))
    throw py::type_error("hooks: 'memo' and 'names' must be dicts, 'dropped' a set");
  return h;
}

py::bytes exportNodes(py::sequence nodes, py::sequence phases, bool include_stack_trace,
                      py::dict hooks) {
  const Hooks h = hooksFrom(hooks);
  const size_t n = py::len(nodes);
  if (py::len(phases) != n) throw py::value_error("export_nodes: one phase per node");
  Writer w(h, include_stack_trace);
  w.text() += '[';
  for (size_t i = 0; i < n; ++i) {
    if (i) w.text() += ',';
    py::object node = nodes[i];
    py::object phase = phases[i];
    w.node(node.ptr(), phase.ptr());
  }
  w.text() += ']';
  return py::bytes(w.text());
}

// Builds the jfx::Graph that readJsonGraph makes of export_text's document, straight from the
// fx.Node objects, for the values traced graphs are made of: node references, None, bool, int,
// str, float, lists and tuples of them, dtype/device/layout/memory_format arguments; a tensor,
// None, bool or int val; phase, recompute, seq_nr, ac_graph_id, stack_trace and a custom meta
// that is only the module FQN. A node with anything else (the output node, extra meta, an opaque
// argument, a symbolic shape) is written by the Writer and read by the JSON reader, node by node,
// so the reader stays the one definition of what the JSON means; tests compare the two graphs
// on every traced fixture. What the reader rejects raises its JfxError: the caller exports the
// text instead, whose reading reports the problem where it is.
// fx.Node object -> the node built for it: open addressing over the object's address, as the
// nodes outlive the build (the caller's list holds them). About twice as fast as
// std::unordered_map here, which allocates an entry per node.
class BuiltNodes {
 public:
  explicit BuiltNodes(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n)
      cap *= 2;
    slots_.resize(cap);
  }
  void add(PyObject* key, jfx::Node* n) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    place(key, n);
  }
  jfx::Node* find(PyObject* key) const {
    for (size_t i = start(key);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return slots_[i].node;
      if (slots_[i].key == nullptr) return nullptr;
    }
  }

 private:
  struct Slot {
    PyObject* key = nullptr;
    jfx::Node* node = nullptr;
  };
  size_t start(PyObject* key) const {
    const auto h = reinterpret_cast<uintptr_t>(key) * 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(h >> 20) & (slots_.size() - 1);
  }
  void place(PyObject* key, jfx::Node* n) {
    size_t i = start(key);
    while (slots_[i].key != nullptr && slots_[i].key != key)
      i = (i + 1) & (slots_.size() - 1);
    if (slots_[i].key == nullptr) ++count_;
    slots_[i] = {key, n};
  }
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    count_ = 0;
    for (const Slot& s : old)
      if (s.key != nullptr) place(s.key, s.node);
  }
  std::vector<Slot> slots_;
  size_t count_ = 0;
};

// FakeTensor metadata through PyTorch's stable C ABI for tensors (AOTInductor's shim,
// torch/csrc/inductor/aoti_torch/c/shim.h, exported by libtorch_cpu) instead of Python attribute
// reads. A traced graph's build is bound by memory, not by calls: each node's objects are far
// apart. Handles are made for a chunk of nodes' FakeTensors at once, just before the chunk is
// built, which brings their TensorImpls into the cache together; dtype, shape and stride are then
// plain loads (bench/README.md, "boundary"). `spec`
// (jointfx.export._tensor_shim): the function making handles of a list of tensors, the addresses
// of aoti_torch_get_dim, _get_sizes, _get_strides, _get_dtype and _delete_tensor_object, and
// {dtype code: torch.dtype}; None where that torch lacks them (then every tensor is read through
// its attributes, as any tensor the shim fails on is: symbolic sizes).
class TensorShim {
 public:
  explicit TensorShim(PyObject* spec) {
    if (spec == Py_None) return;
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 7 ||
        !PyDict_Check(PyTuple_GET_ITEM(spec, 6)))
      throw py::type_error("hooks: 'tensor_shim' must be None or _tensor_shim()'s 7-tuple");
    auto fn = [&](Py_ssize_t i) {
      void* p = PyLong_AsVoidPtr(PyTuple_GET_ITEM(spec, i));
      if (p == nullptr) raise();
      return p;
    };
    dim_ = reinterpret_cast<decltype(dim_)>(fn(1));
    sizes_ = reinterpret_cast<decltype(sizes_)>(fn(2));
    strides_ = reinterpret_cast<decltype(strides_)>(fn(3));
    dtype_ = reinterpret_cast<decltype(dtype_)>(fn(4));
    delete_ = reinterpret_cast<decltype(delete_)>(fn(5));
    PyObject *code, *dtype;
    Py_ssize_t pos = 0;
    while (PyDict_Next(PyTuple_GET_ITEM(spec, 6), &pos, &code, &dtype)) {
      const long c = PyLong_AsLong(code);
      if (c < 0 || c > 255) {
        if (PyErr_Occurred()) raise();
        continue;
      }
      if (static_cast<size_t>(c) >= dtypes_.size()) dtypes_.resize(static_cast<size_t>(c) + 1);
      dtypes_[static_cast<size_t>(c)] = dtype;  // held by the spec, which the hooks hold
    }
    alloc_ = PyTuple_GET_ITEM(spec, 0);
  }
  ~TensorShim() { release(); }
  TensorShim(const TensorShim&) = delete;
  TensorShim& operator=(const TensorShim&) = delete;
  explicit operator bool() const { return alloc_ != nullptr; }

  // Handles for `tensors`, in place of the last ones. Should making them fail, the shim turns
  // itself off and the tensors are read through their attributes.
  void make(py::list tensors) {
    release();
    if (!alloc_ || PyList_GET_SIZE(tensors.ptr()) == 0) return;
    try {
      py::object handles = call(alloc_, tensors.ptr());
      if (!PyList_Check(handles.ptr()) ||
          PyList_GET_SIZE(handles.ptr()) != PyList_GET_SIZE(tensors.ptr()))
        throw py::type_error("tensor_shim: one handle per tensor expected");
      handles_.reserve(static_cast<size_t>(PyList_GET_SIZE(handles.ptr())));
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(handles.ptr()); ++i) {
        // Capsules without a destructor (pybind11's form of a void*), named NULL.
        void* h = PyCapsule_GetPointer(PyList_GET_ITEM(handles.ptr(), i), nullptr);
        if (h == nullptr) raise();
        handles_.push_back(h);
      }
    } catch (const py::error_already_set&) {
      release();
      alloc_ = nullptr;
      return;
    }
    tensors_ = std::move(tensors);  // held, so no other object can take one's address
  }

  // The handle made for `t` when `t` is the next tensor of the list given to make(), else null.
  void* next(PyObject* t) {
    if (next_ >= handles_.size() || PyList_GET_ITEM(tensors_.ptr(), next_) != t) return nullptr;
    return handles_[next_++];
  }

  // Shape, stride and the torch.dtype object; false where the shim fails.
  bool read(void* h, jfx::Dims& shape, jfx::Dims& stride, PyObject*& dtype) const {
    int64_t dim = 0, *sz = nullptr, *st = nullptr;
    int32_t code = 0;
    if (dim_(h, &dim) != 0 || sizes_(h, &sz) != 0 || strides_(h, &st) != 0 ||
        dtype_(h, &code) != 0 || code < 0 || static_cast<size_t>(code) >= dtypes_.size() ||
        dtypes_[static_cast<size_t>(code)] == nullptr)
      return false;
    dtype = dtypes_[static_cast<size_t>(code)];
    shape = jfx::Dims(std::span<const int64_t>(sz, static_cast<size_t>(dim)));
    stride = jfx::Dims(std::span<const int64_t>(st, static_cast<size_t>(dim)));
    return true;
  }

 private:
  void release() {
    for (void* h : handles_)
      delete_(h);
    handles_.clear();
    tensors_ = py::list();
    next_ = 0;
  }

  using Err = int32_t;  // AOTITorchError: 0 is success
  Err (*dim_)(void*, int64_t*) = nullptr;
  Err (*sizes_)(void*, int64_t**) = nullptr;
  Err (*strides_)(void*, int64_t**) = nullptr;
  Err (*dtype_)(void*, int32_t*) = nullptr;
  Err (*delete_)(void*) = nullptr;
  PyObject* alloc_ = nullptr;
  std::vector<PyObject*> dtypes_;  // by code
  py::list tensors_;
  std::vector<void*> handles_;
  size_t next_ = 0;
};

// Builds through the loader (ir/loader.h), which records each node's place as the torch.fx node
// of its name and reports a taken name there.
class GraphBuilder : public jfx::NodeSite {
 public:
  GraphBuilder(const Hooks& h, bool include_stack_trace, size_t nodes, TensorShim& shim)
      : h_(h),
        stack_(include_stack_trace),
        shim_(shim),
        loader_(jfx::SourceKind::Fx, kFxGraph, *this),
        built_(nodes) {
    loader_.expectNodes(nodes);
  }

  // NodeSite: a node the bridge builds is where the torch.fx node of its name is.
  jfx::SourceLocation at(uint32_t, jfx::NodePart) const override {
    jfx::SourceLocation loc;
    loc.file = kFxGraph;
    loc.node = node_name_;
    return loc;
  }

  // `phase` nullptr: the node's own meta["phase"] (export_graph's rule 1), which every
  // call_function and get_attr node must have, else NeedPhases.
  void node(PyObject* node, PyObject* phase) {
    py::object op = attr(node, n_.op), meta = attr(node, n_.meta), own;
    if (phase == nullptr) {
      own = metaPhase(op.ptr(), meta.ptr());
      phase = own.ptr();
    }
    if (!direct(node, op.ptr(), meta.ptr(), phase)) viaJson(node, phase);
  }

  struct NeedPhases {};

  std::unique_ptr<jfx::Graph> finish(std::string_view head_text) {
    // The header, with no nodes, applied to the nodes built.
    return jfx::readJsonInto(head_text, kFile, loader_.lend());
  }

  size_t direct_count = 0, json_count = 0;

 private:
  static inline const std::string kFile = "<python>";
  static inline const std::string kFxGraph = "torch.fx graph";

  const AttrNames n_;

  py::object metaPhase(PyObject* op, PyObject* meta) {
    if (!PyUnicode_Check(op) || (PyUnicode_CompareWithASCIIString(op, "call_function") != 0 &&
                                 PyUnicode_CompareWithASCIIString(op, "get_attr") != 0))
      return py::none();
    PyObject* p = PyDict_Check(meta) ? PyDict_GetItemWithError(meta, n_.phase.ptr()) : nullptr;
    if (p == nullptr && PyErr_Occurred()) raise();
    if (p == nullptr || !PyUnicode_Check(p)) throw NeedPhases{};
    const std::optional<jfx::Phase> known = jfx::phaseFromName(utf8(p));
    if (!known || *known == jfx::Phase::Unknown) throw NeedPhases{};
    return py::reinterpret_borrow<py::object>(p);
  }

  // A node the reader's way: the Writer's JSON of it, read into the graph.
  void viaJson(PyObject* node, PyObject* phase) {
    Writer w(h_, stack_);
    w.text() = R"({"format":"jointfx.graph","version":1,"nodes":[)";
    w.node(node, phase);
    w.text() += "]}";
    loader_.takeBack(jfx::readJsonInto(w.text(), kFile, loader_.lend()), position_);
    jfx::Graph& g = loader_.graph();
    remember(node, g.nodeById(g.maxId() - 1));
    ++position_;
    ++json_count;
  }

  void remember(PyObject* node, jfx::Node* n) { built_.add(node, n); }

  // false: the node needs the JSON path (nothing was added to the graph).
  bool direct(PyObject* node, PyObject* op_obj, PyObject* meta_obj, PyObject* phase) {
    if (!PyUnicode_Check(op_obj)) return false;
    const std::string_view op_name = utf8(op_obj);
    jfx::OpKind op;
    if (op_name == "call_function")
      op = jfx::OpKind::CallFunction;
    else if (op_name == "placeholder")
      op = jfx::OpKind::Placeholder;
    else if (op_name == "get_attr")
      op = jfx::OpKind::GetAttr;
    else if (op_name == "output")
      op = jfx::OpKind::Output;
    else
      return false;  // an op the format does not have: the exporter says so

    py::object name_obj = attr(node, n_.name);
    if (!PyUnicode_Check(name_obj.ptr())) return false;
    const std::string_view name = utf8(name_obj.ptr());
    if (name.empty()) return false;

    std::vector<jfx::Arg> args;
    py::object args_obj = attr(node, n_.args);
    if (!PyTuple_Check(args_obj.ptr())) return false;
    const Py_ssize_t n_args = PyTuple_GET_SIZE(args_obj.ptr());
    args.reserve(static_cast<size_t>(n_args));
    for (Py_ssize_t i = 0; i < n_args; ++i) {
      std::optional<jfx::Arg> a = arg(PyTuple_GET_ITEM(args_obj.ptr(), i), name_obj.ptr());
      if (!a) return false;
      args.push_back(std::move(*a));
    }
    if (op == jfx::OpKind::Output && !args.empty() && args[0].kind() != jfx::Arg::Kind::List) {
      // FX allows a tuple or a single value; the format's output has one list argument.
      args[0] = args[0].kind() == jfx::Arg::Kind::Tuple
                    ? jfx::Arg::ofList(std::move(args[0].items()))
                    : jfx::Arg::ofList({std::move(args[0])});
    }
    jfx::Kwargs kwargs;
    py::object kwargs_obj = attr(node, n_.kwargs);
    if (!PyDict_Check(kwargs_obj.ptr())) return false;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs_obj.ptr(), &pos, &key, &value)) {
      if (!PyUnicode_Check(key)) return false;
      std::optional<jfx::Arg> a = arg(value, name_obj.ptr());
      if (!a) return false;
      kwargs.emplace_back(jfx::Symbol::intern(utf8(key)), std::move(*a));
    }
    // The IR keeps kwargs sorted by key, as the reader and the printers do.
    std::sort(kwargs.begin(), kwargs.end(),
              [](const auto& a, const auto& b) { return a.first.str() < b.first.str(); });
    if ((op == jfx::OpKind::Placeholder || op == jfx::OpKind::GetAttr) &&
        (!args.empty() || !kwargs.empty()))
      return false;  // the reader reports it

    jfx::NodeMeta meta;
    jfx::ValueMeta val;
    if (!this->meta(meta_obj, phase, meta, val)) return false;

    std::optional<jfx::Symbol> target = this->target(node, op);
    if (!target) return false;

    node_name_ = name;
    jfx::Node* n =
        loader_.define(op, *target, std::move(args), std::move(kwargs), name, position_++);
    n->meta() = std::move(meta);
    n->val() = std::move(val);
    remember(node, n);
    ++direct_count;
    return true;
  }

  std::optional<jfx::Symbol> target(PyObject* node, jfx::OpKind op) {
    py::object t = attr(node, n_.target);
    if (op == jfx::OpKind::CallFunction) {
      // Memoized per target object, as the Writer does (each node holds its target).
      auto it = targets_.find(t.ptr());
      if (it != targets_.end()) return it->second;
    }
    py::object s = call(h_.target_name, node);
    if (!PyUnicode_Check(s.ptr())) return std::nullopt;
    const std::string_view text = utf8(s.ptr());
    // A node that breaks a rule goes the JSON way, whose reader reports it.
    if (!jfx::GraphLoader::followsRules(op, text, false, false)) return std::nullopt;
    const jfx::Symbol sym = jfx::Symbol::intern(text);
    if (op == jfx::OpKind::CallFunction) targets_.emplace(t.ptr(), sym);
    return sym;
  }

  static std::optional<int64_t> int64(PyObject* v) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) raise();
    if (overflow != 0) return std::nullopt;
    return x;
  }

  std::optional<jfx::Arg> arg(PyObject* v, PyObject* node_name) {
    PyTypeObject* type = Py_TYPE(v);
    if (reinterpret_cast<PyObject*>(type) == h_.node_type) {
      jfx::Node* n = built_.find(v);
      if (n == nullptr) return std::nullopt;  // not defined yet: the reader says where
      return jfx::Arg::ofNode(n);
    }
    if (v == Py_None) return jfx::Arg::none();
    if (type == &PyBool_Type) return jfx::Arg::ofBool(v == Py_True);
    if (type == &PyLong_Type) {
      std::optional<int64_t> i = int64(v);
      if (!i) return std::nullopt;
      return jfx::Arg::ofInt(*i);
    }
    if (type == &PyUnicode_Type) return jfx::Arg::ofStr(utf8(v));
    if (type == &PyFloat_Type) {
      const double x = PyFloat_AS_DOUBLE(v);
      // The JSON has "nan" for any NaN, which reads back as the quiet NaN.
      return jfx::Arg::ofFloat(std::isnan(x) ? std::numeric_limits<double>::quiet_NaN() : x);
    }
    const bool list = type == &PyList_Type || reinterpret_cast<PyObject*>(type) == h_.list_type;
    if (list || type == &PyTuple_Type) {
      const Py_ssize_t n = list ? PyList_GET_SIZE(v) : PyTuple_GET_SIZE(v);
      std::vector<jfx::Arg> items;
      items.reserve(static_cast<size_t>(n));
      for (Py_ssize_t i = 0; i < n; ++i) {
        std::optional<jfx::Arg> a =
            arg(list ? PyList_GET_ITEM(v, i) : PyTuple_GET_ITEM(v, i), node_name);
        if (!a) return std::nullopt;
        items.push_back(std::move(*a));
      }
      return list ? jfx::Arg::ofList(std::move(items)) : jfx::Arg::ofTuple(std::move(items));
    }
    return memoArg(v, node_name);
  }

  // dtype, device, layout and memory_format arguments: arg_to_json's {"dtype": name} (and the
  // like), once per distinct object.
  std::optional<jfx::Arg> memoArg(PyObject* v, PyObject* node_name) {
    const int memoizable = PyObject_IsInstance(v, h_.memo_types);
    if (memoizable < 0) raise();
    if (!memoizable) return std::nullopt;
    return memo_args_.get(v, [&]() -> std::optional<jfx::Arg> {
      py::object d = call(h_.arg_to_json, v, node_name);
      if (!PyDict_Check(d.ptr()) || PyDict_GET_SIZE(d.ptr()) != 1) return std::nullopt;
      PyObject *key, *value;
      Py_ssize_t pos = 0;
      PyDict_Next(d.ptr(), &pos, &key, &value);
      if (!PyUnicode_Check(key) || !PyUnicode_Check(value)) return std::nullopt;
      const std::string_view k = utf8(key), s = utf8(value);
      if (k == "dtype") {
        if (auto t = jfx::dtypeFromName(s)) return jfx::Arg::ofDtype(*t);
      } else if (k == "device") {
        return jfx::Arg::ofDevice(s);
      } else if (k == "layout") {
        return jfx::Arg::ofLayout(s);
      } else if (k == "memory_format") {
        return jfx::Arg::ofMemoryFormat(s);
      }
      return std::nullopt;
    });
  }

  // false: a meta the JSON path must read (extra keys, a val that is not a plain tensor or
  // scalar, a value the reader would reject).
  bool meta(PyObject* meta, PyObject* phase, jfx::NodeMeta& m, jfx::ValueMeta& val) {
    if (!PyDict_Check(meta)) return false;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(meta, &pos, &k, &v)) {
      if (!PyUnicode_Check(k)) continue;  // the Writer drops it
      const MetaKey kind = metaKey(k);
      switch (kind) {
        case MetaKey::Skipped:
          continue;
        case MetaKey::Val:
          if (!this->val(v, val)) return false;
          continue;
        case MetaKey::Recompute: {
          py::object r = Py_TYPE(v) == &PyLong_Type ? py::reinterpret_borrow<py::object>(v)
                                                    : call(h_.enum_int, v);
          if (r.ptr() == Py_None) continue;
          if (Py_TYPE(r.ptr()) != &PyLong_Type) return false;
          std::optional<int64_t> i = int64(r.ptr());
          if (!i || *i < 0 || *i > jfx::kMaxRecompute) return false;
          m.recompute = static_cast<jfx::Recompute>(*i);
          continue;
        }
        case MetaKey::AcGraphId:
        case MetaKey::SeqNr: {
          if (!PyLong_Check(v) || PyBool_Check(v)) continue;  // the Writer drops it
          std::optional<int64_t> i = int64(v);
          if (!i || *i == jfx::OptionalInt64::kReserved) return false;
          (kind == MetaKey::SeqNr ? m.seq_nr : m.ac_graph_id) = *i;
          continue;
        }
        case MetaKey::StackTrace:
          if (stack_ && PyUnicode_Check(v)) m.stack_trace = utf8(v);
          continue;
        case MetaKey::Custom: {
          if (!PyDict_Check(v) || PyDict_GET_SIZE(v) == 0) continue;  // the Writer drops it
          // Only a custom meta that is the module FQN alone maps to a typed field by itself.
          PyObject* fqn = PyDict_GetItemWithError(v, n_.module_fqn.ptr());
          if (fqn == nullptr && PyErr_Occurred()) raise();
          if (PyDict_GET_SIZE(v) != 1 || fqn == nullptr || !PyUnicode_Check(fqn)) return false;
          const std::string_view s = utf8(fqn);
          if (s.empty()) return false;
          m.module_fqn = jfx::Symbol::intern(s);
          continue;
        }
        case MetaKey::Other:
          return false;  // an extra meta key: the reader's canonical form
      }
    }
    if (phase != Py_None) {
      if (!PyUnicode_Check(phase)) return false;
      std::optional<jfx::Phase> p = jfx::phaseFromName(utf8(phase));
      if (!p || *p == jfx::Phase::Unknown) return false;
      m.phase = *p;
    }
    return true;
  }

  // What a meta key means here. Skipped: a key the Writer drops, and phase (it comes from the
  // `phase` argument).
  enum class MetaKey : uint8_t {
    Skipped,
    Val,
    Recompute,
    AcGraphId,
    SeqNr,
    StackTrace,
    Custom,
    Other
  };

  // By the key object: a graph's meta dicts share a handful of key strings, so the first few
  // distinct ones are remembered (and held, so no other string can take their address).
  MetaKey metaKey(PyObject* k) {
    for (const auto& [key, kind] : meta_keys_)
      if (key.ptr() == k) return kind;
    static constexpr std::pair<std::string_view, MetaKey> kKeys[] = {
        {"phase", MetaKey::Skipped},       {"val", MetaKey::Val},
        {"recompute", MetaKey::Recompute}, {"ac_graph_id", MetaKey::AcGraphId},
        {"seq_nr", MetaKey::SeqNr},        {"stack_trace", MetaKey::StackTrace},
        {"custom", MetaKey::Custom}};
    const int dropped = PySet_Contains(h_.dropped, k);
    if (dropped < 0) raise();
    MetaKey kind = dropped ? MetaKey::Skipped : MetaKey::Other;
    for (const auto& [name, known] : kKeys)
      if (!dropped && utf8(k) == name) kind = known;
    if (meta_keys_.size() < 16)
      meta_keys_.emplace_back(py::reinterpret_borrow<py::object>(k), kind);
    return kind;
  }

  bool val(PyObject* v, jfx::ValueMeta& out) {
    if (v == Py_None) {
      out.kind = jfx::ValueMeta::Kind::None;
      return true;
    }
    if (Py_TYPE(v) == &PyBool_Type) {
      out.kind = jfx::ValueMeta::Kind::Bool;
      out.i = v == Py_True ? 1 : 0;
      return true;
    }
    if (Py_TYPE(v) == &PyLong_Type) {
      std::optional<int64_t> i = int64(v);
      if (!i) return false;
      out.kind = jfx::ValueMeta::Kind::Int;
      out.i = *i;
      return true;
    }
    if (Py_TYPE(v) == &PyList_Type || Py_TYPE(v) == &PyTuple_Type) {  // a multi-output op's
      const bool list = Py_TYPE(v) == &PyList_Type;
      const Py_ssize_t n = list ? PyList_GET_SIZE(v) : PyTuple_GET_SIZE(v);
      std::vector<jfx::ValueMeta> items(static_cast<size_t>(n));
      for (Py_ssize_t i = 0; i < n; ++i)
        if (!val(list ? PyList_GET_ITEM(v, i) : PyTuple_GET_ITEM(v, i),
                 items[static_cast<size_t>(i)]))
          return false;
      out = jfx::ValueMeta::ofList(std::move(items));
      return true;
    }
    const bool fake = reinterpret_cast<PyObject*>(Py_TYPE(v)) == h_.fake_tensor_type;
    if (!fake) {
      const int is_tensor = PyObject_IsInstance(v, h_.tensor_type);
      if (is_tensor < 0) raise();
      if (!is_tensor) return false;
    }
    py::object symbolic = attr(v, n_.symbolic);
    if (symbolic.ptr() != Py_False) return false;
    // Shape, stride and dtype from the shim where it has this tensor (a FakeTensor; it reads a
    // symbolic size as some integer without failing, hence the check above), else from the
    // tensor's attributes.
    jfx::TensorMeta t;
    py::object dtype;
    void* handle = fake ? shim_.next(v) : nullptr;
    PyObject* dt = nullptr;
    if (handle == nullptr || !shim_.read(handle, t.shape, t.stride, dt)) {
      dtype = attr(v, n_.dtype);
      dt = dtype.ptr();
      py::object shape = attr(v, n_.shape);
      py::object stride =
          py::reinterpret_steal<py::object>(check(PyObject_CallMethodNoArgs(v, n_.stride.ptr())));
      if (!ints(shape.ptr(), t.shape) || !ints(stride.ptr(), t.stride)) return false;
    }
    std::optional<jfx::ScalarType> d = this->dtype(dt);
    if (!d) return false;
    t.dtype = *d;
    py::object device = fake ? fakeDevice(v) : attr(v, n_.device);
    t.device = this->device(device.ptr());
    if (t.stride.size() != t.shape.size() || !t.sizeProblem().empty()) return false;
    out = jfx::ValueMeta::ofTensor(std::move(t));
    return true;
  }

  // FakeTensor.device without its Python property: the mode's in_kernel_invocation (read once
  // per mode; it is False outside a kernel) else the tensor's _fake_device.
  py::object fakeDevice(PyObject* v) {
    py::object mode = attr(v, n_.fake_mode);
    if (mode.ptr() != mode_) {
      py::object inside = attr(mode.ptr(), n_.in_kernel);
      mode_ = mode.ptr();
      mode_ref_ = mode;
      mode_in_kernel_ = PyObject_IsTrue(inside.ptr()) != 0;
    }
    return mode_in_kernel_ ? attr(v, n_.device) : attr(v, n_.fake_device);
  }

  static bool ints(PyObject* seq, jfx::Dims& out) {
    if (!PyTuple_Check(seq)) return false;  // torch.Size is a tuple
    const Py_ssize_t n = PyTuple_GET_SIZE(seq);
    jfx::DimsScratch dims(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* x = PyTuple_GET_ITEM(seq, i);
      if (!PyLong_Check(x)) return false;
      std::optional<int64_t> v = int64(x);
      if (!v) return false;
      dims[static_cast<size_t>(i)] = *v;
    }
    out = jfx::Dims(dims);
    return true;
  }

  // Values by Python object, made once per distinct object: `index` holds every key (so none is
  // freed and its address reused while the build runs), and the last key is checked first by
  // address, as consecutive nodes mostly share their dtype and device.
  template <typename T>
  struct Memo {
    py::dict index;  // key -> position in values
    std::vector<std::optional<T>> values;
    PyObject* last = nullptr;
    size_t last_at = 0;

    template <typename Make>
    std::optional<T> get(PyObject* key, Make&& make) {
      if (key == last) return values[last_at];
      if (PyObject* hit = PyDict_GetItemWithError(index.ptr(), key)) {
        last_at = static_cast<size_t>(PyLong_AsSsize_t(hit));
      } else {
        if (PyErr_Occurred()) raise();
        values.push_back(make());
        last_at = values.size() - 1;
        py::int_ k(static_cast<Py_ssize_t>(last_at));
        if (PyDict_SetItem(index.ptr(), key, k.ptr()) != 0) raise();
      }
      last = key;
      return values[last_at];
    }
  };

  // A value's dtype through _dtype_name and device through str(), once per distinct object.
  std::optional<jfx::ScalarType> dtype(PyObject* d) {
    return dtypes_.get(d, [&]() -> std::optional<jfx::ScalarType> {
      py::object s = call(h_.dtype_name, d);
      if (!PyUnicode_Check(s.ptr())) return std::nullopt;
      return jfx::dtypeFromName(utf8(s.ptr()));
    });
  }
  jfx::Symbol device(PyObject* d) {
    return *devices_.get(d, [&]() -> std::optional<jfx::Symbol> {
      py::object s = py::reinterpret_steal<py::object>(check(PyObject_Str(d)));
      return jfx::Symbol::intern(utf8(s.ptr()));
    });
  }

  const Hooks& h_;
  const bool stack_;
  TensorShim& shim_;  // FakeTensor metadata for the nodes being built
  jfx::GraphLoader loader_;
  BuiltNodes built_;
  std::string_view node_name_;  // the node being defined (its fx.Node holds the text)
  uint32_t position_ = 0;       // its index in graph.nodes
  PyObject* mode_ = nullptr;    // the FakeTensorMode last seen (held by mode_ref_)
  py::object mode_ref_;
  bool mode_in_kernel_ = false;
  std::unordered_map<PyObject*, jfx::Symbol> targets_;  // call_function target -> name
  Memo<jfx::Arg> memo_args_;  // dtype/device/layout/memory_format argument -> its Arg
  Memo<jfx::ScalarType> dtypes_;
  Memo<jfx::Symbol> devices_;
  std::vector<std::pair<py::object, MetaKey>> meta_keys_;
};

py::object graphFromFx(py::sequence nodes, const py::object& phases, bool include_stack_trace,
                       py::dict hooks, const py::bytes& head) {
  const Hooks h = hooksFrom(hooks);
  const size_t n = py::len(nodes);
  const bool given = !phases.is_none();
  if (given && py::len(phases) != n) throw py::value_error("graph_from_fx: one phase per node");
  TensorShim shim(hooks.contains("tensor_shim") ? py::object(hooks["tensor_shim"]).ptr() : Py_None);
  GraphBuilder b(h, include_stack_trace, n, shim);
  const AttrNames names;
  py::str val_key("val");
  // The FakeTensor vals of nodes [from, to), for the shim.
  auto fakesOf = [&](size_t from, size_t to) {
    py::list fakes;
    for (size_t i = from; i < to; ++i) {
      py::object meta = attr(py::object(nodes[i]).ptr(), names.meta);
      if (!PyDict_Check(meta.ptr())) continue;
      PyObject* v = PyDict_GetItemWithError(meta.ptr(), val_key.ptr());
      if (v == nullptr && PyErr_Occurred()) raise();
      if (v != nullptr && reinterpret_cast<PyObject*>(Py_TYPE(v)) == h.fake_tensor_type)
        fakes.append(v);
    }
    return fakes;
  };
  try {
    constexpr size_t kChunk = 256;  // nodes; 32 to 512 build equally fast
    for (size_t i = 0; i < n; ++i) {
      if (shim && i % kChunk == 0) shim.make(fakesOf(i, std::min(n, i + kChunk)));
      py::object node = nodes[i];
      py::object phase = given ? py::object(phases[py::int_(i)]) : py::object();
      b.node(node.ptr(), phase.ptr());
    }
  } catch (const GraphBuilder::NeedPhases&) {
    return py::none();
  }
  char* data;
  Py_ssize_t size;
  if (PyBytes_AsStringAndSize(head.ptr(), &data, &size) != 0) raise();
  FxGraph out;
  out.graph = b.finish({data, static_cast<size_t>(size)});
  out.direct = b.direct_count;
  out.via_json = b.json_count;
  return py::cast(std::move(out));
}

}  // namespace

void registerFxExport(py::module_& m) {
  py::class_<FxGraph>(m, "FxGraph",
                      "A graph built by graph_from_fx, for EditScript (which takes it over).")
      .def_readonly("direct", &FxGraph::direct, "nodes built from the FX objects directly")
      .def_readonly("via_json", &FxGraph::via_json, "nodes read as JSON")
      .def(
          "json",
          [](const FxGraph& g) {
            if (!g.graph) throw py::value_error("FxGraph: already taken by an EditScript");
            return py::bytes(jfx::writeJsonGraph(*g.graph));
          },
          "The canonical JSON document (writeJsonGraph), for tests.")
      .def(
          "location",
          [](const FxGraph& g, const std::string& name) -> py::object {
            if (!g.graph) throw py::value_error("FxGraph: already taken by an EditScript");
            const jfx::Node* n = g.graph->findNode(name);
            if (n == nullptr) return py::none();
            return py::str(g.graph->location(n).str());
          },
          py::arg("name"),
          "Where the node named `name` was read from, as errors about it name it (None: no such "
          "node), for tests.");
  m.def("graph_from_fx", &graphFromFx, py::arg("nodes"), py::arg("phases"),
        py::arg("include_stack_trace"), py::arg("hooks"), py::arg("head"),
        "The graph readJsonGraph makes of export_text's document, built from `nodes` "
        "(torch.fx.Node) with `phases` (each node's phase or None; None: each call_function and "
        "get_attr node's meta['phase'], and the result is None if one has none) and `head` (the "
        "document without nodes, JSON bytes). Raises JointfxError or another error where the "
        "reader would reject the document: export the text then, whose reading says where.");
  m.def("export_nodes", &exportNodes, py::arg("nodes"), py::arg("phases"),
        py::arg("include_stack_trace"), py::arg("hooks"),
        "The JSON array of `nodes` (torch.fx.Node) as jointfx.export._node_to_json writes them, "
        "as UTF-8 bytes; `phases` holds each node's phase or None.");
}

}  // namespace jfx::python
