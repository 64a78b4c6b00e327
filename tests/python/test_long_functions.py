"""scripts/long_functions.py: the brace counter finds functions and their lengths in the C++ the
project writes (member initializers, raw strings, lambdas, inline members), and the limits it
enforces (ctest long_functions runs it on passes/ and tools/)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from conftest import REPO

SCRIPT = REPO / "scripts" / "long_functions.py"


def load():
    spec = importlib.util.spec_from_file_location("long_functions", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def functions(tmp_path: Path, text: str):
    f = tmp_path / "x.cc"
    f.write_text(text)
    return [(name, last - first + 1) for name, first, last in load().functions(f)]


def test_functions_and_their_lengths(tmp_path: Path) -> None:
    text = """namespace jfx {
namespace {
constexpr int kTable[] = {
    1, 2, 3,
};
struct S {
  int x{0};
  S(int a) : x{a}, y_(a) {
    call();
  }
  int get() const { return x; }
  int y_;
};
}  // namespace

// "a { brace" in a comment
int f(int a) {
  auto g = [](int b) {
    return b;
  };
  const char* s = R"(not a } brace)";
  char c = '}';
  return g(a) + 1'000;
}

template <class T>
T h(T t) noexcept {
  return t;
}
}  // namespace jfx
"""
    assert functions(tmp_path, text) == [("S", 3), ("get", 1), ("f", 8), ("h", 4)]


def test_limits(tmp_path: Path) -> None:
    body = "\n".join(f"  x += {i};" for i in range(85))
    (tmp_path / "long.cc").write_text(f"int f() {{\n  int x = 0;\n{body}\n  return x;\n}}\n")
    run = [sys.executable, str(SCRIPT), str(tmp_path)]
    out = subprocess.run(run + ["--allow", "0"], capture_output=True, text=True)
    assert out.returncode == 1
    assert "89  " in out.stdout and "without a 'long:' comment" in out.stdout
    assert subprocess.run(run + ["--allow", "0", "--report-only"]).returncode == 0
    # A justified one passes while the count allows it, and never past the hard limit.
    (tmp_path / "long.cc").write_text(
        f"// long: one line per case\nint f() {{\n  int x = 0;\n{body}\n  return x;\n}}\n")
    assert subprocess.run(run + ["--allow", "1"]).returncode == 0
    assert subprocess.run(run + ["--allow", "1", "--hard-max", "85"]).returncode == 1


def test_project_folders_meet_the_limits() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--allow", "0", str(REPO / "passes"),
                          str(REPO / "tools")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
