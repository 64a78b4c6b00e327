#!/usr/bin/env python3
"""Bad-input checks for the jointfx CLI (ctest: bad_inputs).

usage: bad_inputs.py JOINTFX CORPUS_DIR

1. Every file in CORPUS_DIR/MANIFEST.tsv gets its expected `jointfx verify` exit code and message
   substring, and no file in the folder is left out of the manifest.
2. Generated inputs too large to keep as fixtures (deep nesting) get a clean error, not a crash.
3. `opt` and `convert` never overwrite their input, and a failed run leaves an existing output
   file untouched.
4. Usage errors (bad pipeline, unknown flag) exit 2.
"""
import os
import shutil
import subprocess
import sys
import tempfile

TIMEOUT_S = 60


def run(jointfx, *args, stdin=None):
    p = subprocess.run([jointfx, *args], capture_output=True, text=True, errors="replace",
                       timeout=TIMEOUT_S, input=stdin)
    return p.returncode, p.stdout + p.stderr


class Checker:
    def __init__(self, jointfx):
        self.jointfx = jointfx
        self.failures = []
        self.count = 0

    def expect(self, label, args, code, substring, stdin=None):
        self.count += 1
        rc, out = run(self.jointfx, *args, stdin=stdin)
        problems = []
        if rc < 0:
            problems.append(f"crashed with signal {-rc}")
        elif rc != code:
            problems.append(f"exit {rc}, expected {code}")
        if substring not in out:
            problems.append(f"output lacks {substring!r}")
        if problems:
            self.failures.append(f"{label}: {'; '.join(problems)}\n    output: {out.strip()[:600]}")

    def check(self, label, ok, detail=""):
        self.count += 1
        if not ok:
            self.failures.append(f"{label}: {detail}")


GOOD_GRAPH = """jointfx.graph 1
%x : f32[4] = placeholder
%neg : f32[4] = aten.neg.default(%x)
%exp : f32[4] = aten.exp.default(%neg)
%output = output([%neg])
"""


def check_manifest(c, corpus):
    manifest = os.path.join(corpus, "MANIFEST.tsv")
    listed = set()
    with open(manifest, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) != 3:
                c.check(f"MANIFEST.tsv:{lineno}", False, "expected file<TAB>code<TAB>message")
                continue
            name, code, substring = parts
            listed.add(name)
            path = os.path.join(corpus, name)
            if not os.path.exists(path):
                c.check(name, False, "listed in the manifest but missing")
                continue
            c.expect(name, ["verify", path], int(code), substring)
    for name in sorted(os.listdir(corpus)):
        if name not in listed and name not in ("MANIFEST.tsv", "README.md"):
            c.check(name, False, "not listed in MANIFEST.tsv")
    return len(listed)


def check_generated(c, tmp):
    depth = 100000
    deep_json = os.path.join(tmp, "deep.json")
    with open(deep_json, "w") as f:
        f.write('{"format": "jointfx.graph", "version": 1, "nodes": [{"args": [' + "[" * depth +
                "]" * depth + '], "kwargs": {}, "meta": {}, "name": "x", "op": "placeholder", '
                '"target": "x"}]}')
    c.expect("deep nesting (json)", ["verify", deep_json], 2, "deep.json: error: JSON nested more than 200 levels deep")
    deep_jfx = os.path.join(tmp, "deep.jfx")
    with open(deep_jfx, "w") as f:
        f.write("jointfx.graph 1\n%x = placeholder\n%y = aten.neg.default(" + "[" * depth +
                "]" * depth + ")\n%output = output([%y])\n")
    c.expect("deep nesting (text)", ["verify", deep_jfx], 2, "deep.jfx:3:")
    long_name = os.path.join(tmp, "long.jfx")
    with open(long_name, "w") as f:
        f.write("jointfx.graph 1\n%" + "x" * 1000000 + " = placeholder\n%output = output([])\n")
    c.expect("million-character name", ["verify", long_name], 0, "ok (2 nodes)")
    c.expect("stdin, garbage", ["verify", "-"], 2, "error", stdin="\x01\x02 not a graph")
    c.expect("missing file", ["verify", os.path.join(tmp, "nope.json")], 2, "nope.json")
    c.expect("unknown extension", ["verify", os.path.join(tmp, "graph.txt")], 2, "graph.txt")


def check_no_overwrite(c, corpus, tmp):
    src = os.path.join(tmp, "g.jfx")
    with open(src, "w") as f:
        f.write(GOOD_GRAPH)
    link = os.path.join(tmp, "link.jfx")
    os.symlink(src, link)
    for out in (src, os.path.join(tmp, ".", "g.jfx"), link):
        c.expect(f"opt -o {out}", ["opt", src, "-o", out, "--pipeline", "dce"], 2,
                 "refusing to write the output over the input file")
        c.expect(f"convert -o {out}", ["convert", src, "-o", out], 2,
                 "refusing to write the output over the input file")
    with open(src) as f:
        c.check("input untouched", f.read() == GOOD_GRAPH, "the input file changed")

    sentinel = "sentinel: must survive failed runs\n"
    out = os.path.join(tmp, "out.jfx")
    with open(out, "w") as f:
        f.write(sentinel)
    c.expect("convert of a bad file", ["convert", os.path.join(corpus, "truncated.json"), "-o",
                                       out], 2, "JSON syntax error")
    c.expect("opt of a graph that fails verification",
             ["opt", os.path.join(corpus, "arity.jfx"), "-o", out, "--pipeline", "dce"], 1,
             "input graph fails verification")
    c.expect("opt with a bad pipeline", ["opt", src, "-o", out, "--pipeline", "dce,,dce"], 2,
             "pipeline:1:5: error: expected a pass name")
    c.expect("opt with an unknown option", ["opt", src, "-o", out, "--pipeline", "dce{x=1}"], 2,
             "pass 'dce' has no option 'x'")
    with open(out) as f:
        c.check("output untouched after failures", f.read() == sentinel, "out.jfx changed")
    leftovers = [n for n in os.listdir(tmp) if n.startswith("out.jfx") and n != "out.jfx"]
    c.check("no temporary files left", not leftovers, f"found {leftovers}")

    c.expect("a successful opt", ["opt", src, "-o", out, "--pipeline", "dce"], 0, "")
    with open(out) as f:
        c.check("output written", "aten.exp.default" not in f.read(), "dce did not run")


def check_usage(c, tmp):
    c.expect("no subcommand", [], 2, "A subcommand is required")
    c.expect("unknown flag", ["verify", "--frobnicate", "x.jfx"], 2, "--frobnicate")
    c.expect("opt without --pipeline", ["opt", "x.jfx", "-o", "-"], 2, "--pipeline is required")
    c.expect("help", ["--help"], 0, "Exit codes")


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    jointfx, corpus = sys.argv[1], sys.argv[2]
    c = Checker(jointfx)
    tmp = tempfile.mkdtemp(prefix="jfx_bad_inputs_")
    try:
        files = check_manifest(c, corpus)
        check_generated(c, tmp)
        check_no_overwrite(c, corpus, tmp)
        check_usage(c, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if files < 25:
        c.check("corpus size", False, f"{files} files; the corpus should keep at least 25")
    for failure in c.failures:
        print("FAIL", failure)
    print(f"{c.count - len(c.failures)}/{c.count} checks passed ({files} corpus files)")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
