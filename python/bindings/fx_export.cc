// export_nodes: the "nodes" array of the JSON v1 document, written straight from torch.fx nodes.
//
// jointfx.export._node_to_json is the definition of how an FX node becomes JSON; this is the same
// mapping for the values traced graphs are made of (nodes, ints, strings, FakeTensor values with
// concrete sizes, plain-data meta), done without building Python dicts and serializing them: on a
// 10K-node graph that Python work was most of an in-process pipeline's cost. Anything else (a
// SymInt, an Opaque, a namedtuple, an enum, the output node) goes through the Python function for
// that value, so both give the same document; tests/python/test_fx_export.py compares them on
// every traced fixture and on freshly traced models of each family.
#include "python/bindings/fx_export.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace py = pybind11;

namespace jfx::python {
namespace {

// What the exporter needs from jointfx.export, looked up once per call.
struct Hooks {
  PyObject* node_type;     // torch.fx.Node
  PyObject* list_type;     // torch.fx.immutable_collections.immutable_list
  PyObject* tensor_type;   // torch.Tensor
  PyObject* dropped;       // frozenset of meta keys never written
  PyObject* memo;          // dict: dtype/device/layout/memory_format argument -> JSON bytes
  PyObject* names;         // dict: a value's device or dtype -> its JSON string, as bytes
  PyObject* memo_types;    // tuple of the types memo may hold
  PyObject* target_name;   // (node) -> str
  PyObject* arg_to_json;   // (value, node name) -> JSON data
  PyObject* val_to_json;   // (val) -> (ok, JSON data)
  PyObject* enum_int;      // (value) -> int | None
  PyObject* node_to_json;  // (node, phase, include_stack_trace) -> dict
  PyObject* dtype_name;    // (dtype) -> str
};

// A Python call failed: the error is already set; unwind to the caller as a Python exception.
[[noreturn]] void raise() {
  throw py::error_already_set();
}

PyObject* check(PyObject* p) {
  if (p == nullptr) raise();
  return p;
}

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
  static py::object attr(PyObject* o, const py::object& name) {
    return py::reinterpret_steal<py::object>(check(PyObject_GetAttr(o, name.ptr())));
  }

  // Attribute names, interned once per call. _args and _kwargs are torch.fx.Node's own slots
  // (what its args/kwargs properties return), read without the property call.
  struct Names {
    py::object op = intern("op"), name = intern("name"), args = intern("_args"),
               kwargs = intern("_kwargs"), meta = intern("meta"), target = intern("target"),
               symbolic = intern("_has_symbolic_sizes_strides"), device = intern("device"),
               dtype = intern("dtype"), shape = intern("shape"), stride = intern("stride");
    static py::object intern(const char* s) {
      return py::reinterpret_steal<py::object>(check(PyUnicode_InternFromString(s)));
    }
  } n_;

  template <typename... A>
  static py::object call(PyObject* fn, A*... a) {
    return py::reinterpret_steal<py::object>(
        check(PyObject_CallFunctionObjArgs(fn, a..., nullptr)));
  }

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
    auto key = [&](const char* k) {
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
      Py_ssize_t klen;
      const char* kc = PyUnicode_AsUTF8AndSize(k, &klen);
      if (kc == nullptr) raise();
      const std::string_view name(kc, static_cast<size_t>(klen));
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
        if (PyLong_Check(v) && !PyBool_Check(v)) key(kc), data(v);
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
        Py_ssize_t len;
        const char* c = PyUnicode_AsUTF8AndSize(s.ptr(), &len);
        if (c == nullptr) raise();
        out_.append(c, static_cast<size_t>(len));
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
    Py_ssize_t len;
    const char* c = PyUnicode_AsUTF8AndSize(s, &len);
    if (c == nullptr) raise();
    out_ += '"';
    for (Py_ssize_t i = 0; i < len; ++i) {
      const unsigned char ch = static_cast<unsigned char>(c[i]);
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

py::bytes exportNodes(py::sequence nodes, py::sequence phases, bool include_stack_trace,
                      py::dict hooks) {
  auto get = [&](const char* k) { return py::object(hooks[k]).ptr(); };
  // Borrowed: `hooks` keeps every object alive for the call.
  const Hooks h{get("node_type"),   get("list_type"),   get("tensor_type"), get("dropped"),
                get("memo"),        get("names"),       get("memo_types"),  get("target_name"),
                get("arg_to_json"), get("val_to_json"), get("enum_int"),    get("node_to_json"),
                get("dtype_name")};
  if (!PyDict_Check(h.memo) || !PyDict_Check(h.names) || !PyAnySet_Check(h.dropped))
    throw py::type_error("export_nodes: hooks 'memo' and 'names' must be dicts, 'dropped' a set");
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

}  // namespace

void registerFxExport(py::module_& m) {
  m.def("export_nodes", &exportNodes, py::arg("nodes"), py::arg("phases"),
        py::arg("include_stack_trace"), py::arg("hooks"),
        "The JSON array of `nodes` (torch.fx.Node) as jointfx.export._node_to_json writes them, "
        "as UTF-8 bytes; `phases` holds each node's phase or None.");
}

}  // namespace jfx::python
