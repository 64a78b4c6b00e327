#!/usr/bin/env python3
"""Bad-input checks for the jointfx CLI (ctest: bad_inputs).

usage: bad_inputs.py JOINTFX CORPUS_DIR

1. Every case in CORPUS_DIR/MANIFEST.tsv gets its expected exit code and message substring (the
   command is `jointfx verify FILE` unless the case names another), no output anywhere carries a
   library's raw exception text (nlohmann's "[json.exception...]", a C++ backtrace), a
   CLI11 range of hundreds of digits, a doubled "error:" prefix or an inf/nan figure, and no
   file in the folder is left out of the manifest.
   inputs/gen_inputs.py still writes the safetensors inputs byte for byte.
2. Generated inputs too large to keep as fixtures (deep nesting, /dev/zero, over the input
   limit, 100 MB values) get a clean error, not a crash or an exhausted memory; a long value is
   quoted clipped, in a message of at most 1000 characters; so are a long --device and tensor
   name in `jointfx exec` (when built with the LibTorch runtime).
3. `opt`, `convert`, `analyze` and `exec` never overwrite their inputs, `exec --log` to a file it
   cannot write fails, and a failed run leaves an existing output
   file untouched; outputs through symlinks, FIFOs, character devices and /dev/stdout are
   written, never replaced.
4. Usage errors (bad pipeline, unknown flag) exit 2.
5. A graph whose names are code (corpus code_*): every command that writes a graph refuses it
   with exit 1 (verify, opt, opt --no-verify, convert both ways) and writes nothing.
"""
import filecmp
import json
import os
import re
import shlex
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time
import threading

TIMEOUT_S = 60


# What a user must never see: a library's exception id, a C++ stack, CLI11's full-precision
# double range (PositiveNumber prints DBL_MAX as 309 digits), an error wrapped in another one's
# prefix ("out.json: error: out.json: error: ..."), a number that is not one.
LEAKS = [re.compile(r"\[json\.exception"), re.compile(r"Exception raised from"),
         re.compile(r"frame #\d"), re.compile(r"error: .*error: "),
         re.compile(r"(?<![\w.'])-?(inf|nan)(?![\w.'])"), re.compile(r"\d{30}")]


def run(jointfx, *args, stdin=None):
    p = subprocess.run([jointfx, *args], capture_output=True, text=True, errors="replace",
                       timeout=TIMEOUT_S, input=stdin if isinstance(stdin, str) else None,
                       stdin=stdin if not isinstance(stdin, (str, type(None))) else None)
    return p.returncode, p.stdout + p.stderr


class Checker:
    def __init__(self, jointfx):
        self.jointfx = jointfx
        self.failures = []
        self.count = 0

    def expect(self, label, args, code, substring, stdin=None, allow_digits=False, max_len=None):
        self.count += 1
        rc, out = run(self.jointfx, *args, stdin=stdin)
        problems = []
        if max_len is not None and len(out) > max_len:
            problems.append(f"{len(out)} characters of output, expected at most {max_len}")
        if rc < 0:
            problems.append(f"crashed with signal {-rc}")
        elif rc != code:
            problems.append(f"exit {rc}, expected {code}")
        for part in substring if isinstance(substring, tuple) else (substring,):
            if part not in out:
                problems.append(f"output lacks {part!r}")
        for leak in LEAKS[:-1] if allow_digits else LEAKS:
            if leak.search(out):
                problems.append(f"output leaks /{leak.pattern}/")
        if problems:
            self.failures.append(f"{label}: {'; '.join(problems)}\n    output: {out.strip()[:600]}")

    def check(self, label, ok, detail=""):
        self.count += 1
        if not ok:
            self.failures.append(f"{label}: {detail}")


GOOD_JFX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "bad", "inputs",
                        "good.jfx")

GOOD_GRAPH = """jointfx.graph 1
%x : f32[4] = placeholder
%neg : f32[4] = aten.neg.default(%x)
%exp : f32[4] = aten.exp.default(%neg)
%output = output([%neg])
"""


def has_runtime(jointfx):
    rc, out = run(jointfx, "exec", "no-such-graph.jfx")
    return "built without the LibTorch runtime" not in out


def check_manifest(c, corpus, tmp):
    """Returns (cases run, cases skipped for want of the runtime)."""
    manifest = os.path.join(corpus, "MANIFEST.tsv")
    listed = set()
    runtime = None
    cases = skipped = 0
    subst = {"{inputs}": os.path.join(corpus, "inputs"), "{tmp}": tmp,
             "{root}": os.path.abspath(os.path.join(corpus, "..", "..", ".."))}
    with open(manifest, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            parts = line.split("\t")
            if not 3 <= len(parts) <= 5:
                c.check(f"MANIFEST.tsv:{lineno}", False,
                        "expected file<TAB>code<TAB>message[<TAB>command[<TAB>runtime]]")
                continue
            name, code, substring = parts[:3]
            command = parts[3] if len(parts) > 3 and parts[3] else "verify {}"
            needs_runtime = len(parts) > 4 and parts[4] == "runtime"
            label = name if name != "-" else command
            if name != "-":
                listed.add(name)
                path = os.path.join(corpus, name)
                if not os.path.exists(path):
                    c.check(name, False, "listed in the manifest but missing")
                    continue
                subst["{}"] = path
            if needs_runtime:
                runtime = has_runtime(c.jointfx) if runtime is None else runtime
                if not runtime:
                    skipped += 1
                    continue
            args = []
            for word in shlex.split(command):
                for k, v in subst.items():
                    word = word.replace(k, v)
                args.append(word)
            cases += 1
            c.expect(label, args, int(code), substring)
    for name in sorted(os.listdir(corpus)):
        if os.path.isdir(os.path.join(corpus, name)):
            continue
        if name not in listed and name not in ("MANIFEST.tsv", "README.md"):
            c.check(name, False, "not listed in MANIFEST.tsv")
    # The generated inputs are what their script writes today.
    gen = os.path.join(corpus, "inputs", "gen_inputs.py")
    fresh = os.path.join(tmp, "gen")
    os.makedirs(fresh)
    subprocess.run([sys.executable, gen, fresh], check=True, timeout=TIMEOUT_S)
    for name in sorted(os.listdir(fresh)):
        kept = os.path.join(corpus, "inputs", name)
        c.check(f"inputs/{name} up to date", os.path.exists(kept) and
                filecmp.cmp(kept, os.path.join(fresh, name), shallow=False),
                "differs from what inputs/gen_inputs.py writes; rerun it")
    return cases, skipped


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

    # A 100 MB value is quoted as its first 200 bytes and its length, wherever it comes from: a
    # pipeline file's option, a hardware profile's key, a graph's string, an option on the
    # command line (at most 128 KiB there: the kernel's limit on one argument).
    huge = "a" * (100 << 20)
    big_pipeline = os.path.join(tmp, "huge_option.json")
    with open(big_pipeline, "w") as f:
        f.write('{"passes": [{"name": "bucket", "options": {"memory-limit": "' + huge + 'x"}}]}')
    c.expect("100 MB pipeline option value", ["opt", GOOD_JFX, "-o", "-", "-p", big_pipeline], 2,
             ("option 'memory-limit': bad byte size 'aaaa",
              "aaa...' (104857601 bytes) (expected e.g. 80GiB"), max_len=1000)
    big_profile = os.path.join(tmp, "huge_key.json")
    with open(big_profile, "w") as f:
        f.write('{"' + huge + '": 1}')
    c.expect("100 MB hardware profile key", ["analyze", GOOD_JFX, "--hardware", big_profile], 2,
             "unknown key 'aaa", max_len=1000)
    big_graph = os.path.join(tmp, "huge_dtype.json")
    with open(big_graph, "w") as f:
        f.write('{"format": "jointfx.graph", "version": 1, "nodes": [{"name": "x", "op": '
                '"placeholder", "target": "x", "args": [], "kwargs": {}, "meta": {"val": '
                '{"dtype": "' + huge + '", "shape": [1]}}}]}')
    c.expect("100 MB dtype name", ["verify", big_graph], 2, "unknown dtype 'aaa", max_len=1000)
    del huge
    for path in (big_pipeline, big_profile, big_graph):
        os.remove(path)
    arg = "a" * (100 << 10)
    c.expect("100 KB --set value", ["opt", GOOD_JFX, "-o", "-", "-p", "tag-fsdp{reshard=budget}",
                                    "--set", "tag-fsdp.memory-limit=" + arg + "x"], 2,
             "(102401 bytes)", max_len=1000)
    c.expect("100 KB --top value", ["analyze", GOOD_JFX, "--top", arg], 2,
             "(102400 bytes)", max_len=1000)
    c.expect("100 KB pipeline spec", ["opt", GOOD_JFX, "-o", "-", "-p", "dce,x" + arg], 2,
             "unknown pass 'xaaa", max_len=1000)
    # CLI11's own messages, clipped word by word.
    runtime_graph = os.path.join(os.path.dirname(GOOD_JFX), "..", "..", "..", "runtime", "data",
                                 "linear_w1.jfx")
    c.expect("100 KB --device", ["exec", runtime_graph, "--device", arg], 2,
             ("--device: aaa", "aaa... (102400 bytes) not in {cpu,cuda}"), max_len=1000)
    c.expect("100 KB --lr", ["exec", runtime_graph, "--lr", arg], 2,
             "Could not convert: --lr = aaa", max_len=1000)
    c.expect("100 KB --format", ["convert", GOOD_JFX, "-o", "-", "--format", arg], 2,
             "(102400 bytes) not in {json,text}", max_len=1000)
    c.expect("100 KB extra argument", ["verify", GOOD_JFX, arg], 2,
             "The following argument was not expected: aaa", max_len=1000)
    c.expect("missing file", ["verify", os.path.join(tmp, "nope.json")], 2, "nope.json")
    c.expect("unknown extension", ["verify", os.path.join(tmp, "graph.txt")], 2, "graph.txt")

    # Endless inputs end at once: a NUL byte (no text format has one) stops the read.
    with open("/dev/zero", "rb") as zero:
        c.expect("stdin from /dev/zero", ["verify", "-"], 2,
                 "<stdin>:1:1: error: expected the header line 'jointfx.graph 1', found byte 0x00",
                 stdin=zero)
    for ext, message in ((".jfx", "found byte 0x00"), (".json", "JSON syntax error at byte 0")):
        link = os.path.join(tmp, "zero" + ext)
        os.symlink("/dev/zero", link)
        c.expect(f"zero{ext} -> /dev/zero", ["verify", link], 2, link + ":1:1: error: " +
                 ("expected the header line 'jointfx.graph 1', " if ext == ".jfx" else "") +
                 message)
        if ext == ".json":
            c.expect("zero.json as a pipeline", ["opt", link, "-o", "-", "--pipeline", link], 2,
                     link + ":1:1: error: JSON syntax error at byte 0")
            c.expect("zero.json as a hardware profile",
                     ["analyze", os.path.join(os.path.dirname(__file__), "data", "bad", "inputs",
                                              "good.jfx"), "--hardware", link], 2,
                     link + ":1:1: error: JSON syntax error at byte 0")
    # ... and a long one at the input limit, which --max-input-mib sets.
    big = os.path.join(tmp, "big.jfx")
    with open(big, "w") as f:
        f.write(GOOD_GRAPH + ("#" * 1023 + "\n") * 2048)
    c.expect("over --max-input-mib", ["verify", big, "--max-input-mib", "1"], 2,
             big + ": error: the graph is larger than the input limit of 1 MiB (--max-input-mib "
             "raises it)")
    c.expect("--max-input-mib before the subcommand", ["--max-input-mib", "1", "verify", big], 2,
             "larger than the input limit of 1 MiB")
    c.expect("under the default limit", ["verify", big], 0, "ok (4 nodes)")
    c.expect("--max-input-mib 0", ["verify", big, "--max-input-mib", "0"], 2,
             "--max-input-mib: expected an integer in [1, 16777216], got '0'")
    yes = subprocess.Popen(["sh", "-c", "while :; do printf '%01024d\\n' 0; done"],
                           stdout=subprocess.PIPE)
    try:
        c.expect("an endless pipe", ["verify", "-", "--max-input-mib", "2"], 2,
                 "<stdin>: error: the graph is larger than the input limit of 2 MiB",
                 stdin=yes.stdout)
    finally:
        yes.kill()
        yes.wait()


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

    # analyze's reports are outputs too.
    for flag in ("--memory-csv", "--trace"):
        c.expect(f"analyze {flag} over the input graph",
                 ["analyze", src, flag, link, "--hardware", "h100"], 2,
                 "refusing to write the output over the input file")
    with open(src) as f:
        c.check("input untouched by analyze", f.read() == GOOD_GRAPH, "the input file changed")

    c.expect("a successful opt", ["opt", src, "-o", out, "--pipeline", "dce"], 0, "")
    with open(out) as f:
        c.check("output written", "aten.exp.default" not in f.read(), "dce did not run")


def check_code_in_names(c, corpus, tmp):
    """A graph file is data: names torch.fx would paste into Python source as code are refused
    by every command, which then writes nothing (rule identifier, docs/graph-format.md)."""
    files = sorted(n for n in os.listdir(corpus) if n.startswith("code_"))
    c.check("code_* cases", len(files) >= 8, f"found {files}")
    for name in files:
        path = os.path.join(corpus, name)
        c.expect(f"verify {name}", ["verify", path], 1, "[identifier]")
        for ext in ("json", "jfx"):
            out = os.path.join(tmp, f"out.{ext}")
            for args in (["opt", path, "-o", out, "--pipeline", "dce"],
                         ["opt", path, "-o", out, "--pipeline", "dce", "--no-verify"],
                         ["convert", path, "-o", out]):
                c.expect(f"{' '.join(args[:1] + args[5:])} {name} -> .{ext}", args, 1,
                         "[identifier]")
                c.check(f"{args[0]} {name} -> .{ext} wrote nothing", not os.listdir(tmp),
                        f"found {os.listdir(tmp)}")


def check_output_paths(c, tmp):
    """Where an output goes when something already sits at its path."""
    src = os.path.join(tmp, "src.jfx")
    with open(src, "w") as f:
        f.write(GOOD_GRAPH)
    rc, converted = run(c.jointfx, "convert", src, "-o", "-")  # what convert prints for src
    c.check("convert -o -", rc == 0 and "aten.exp.default" in converted, converted[:200])

    # A symlink to a regular file: the file gets the output, the link stays a link.
    target = os.path.join(tmp, "target.jfx")
    with open(target, "w") as f:
        f.write("old\n")
    link = os.path.join(tmp, "out_link.jfx")
    os.symlink("target.jfx", link)
    c.expect("opt -o symlink", ["opt", src, "-o", link, "--pipeline", "dce"], 0, "")
    c.check("symlink kept", os.path.islink(link) and os.readlink(link) == "target.jfx",
            "the link was replaced")
    with open(target) as f:
        text = f.read()
        c.check("symlink target written", "aten.neg.default" in text and
                "aten.exp.default" not in text, f"target.jfx holds {text[:100]!r}")

    # A symlink to /dev/null (the device itself is never named, so a wrong write could only
    # replace the link): written, the link and the device stay. Only while /dev/null is the
    # device: if something else already replaced it, writing through the link is not a test.
    if not stat.S_ISCHR(os.stat("/dev/null").st_mode):
        c.check("/dev/null is a character device before the test", False,
                "it is not (replaced by something else); not writing through it")
    else:
        null_link = os.path.join(tmp, "null.jfx")
        os.symlink("/dev/null", null_link)
        c.expect("convert -o symlink to /dev/null", ["convert", src, "-o", null_link], 0, "")
        c.check("/dev/null link kept", os.path.islink(null_link), "the link was replaced")
        c.check("/dev/null still a character device", stat.S_ISCHR(os.lstat("/dev/null").st_mode),
                "/dev/null is no longer a character device")

    # A FIFO: written through, never replaced by a regular file.
    fifo = os.path.join(tmp, "out.fifo")
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()))
    reader.start()
    c.expect("convert -o FIFO", ["convert", src, "-o", fifo, "--format", "text"], 0, "")
    reader.join(TIMEOUT_S)
    c.check("FIFO kept", stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced")
    c.check("FIFO carried the graph", got == [converted], f"reader got {got!r}")

    # /dev/stdout: the graph arrives on stdout (a pipe here), nothing is replaced.
    rc, out = run(c.jointfx, "convert", src, "-o", "/dev/stdout", "--format", "text")
    c.check("convert -o /dev/stdout", rc == 0 and out == converted, f"exit {rc}: {out[:200]!r}")
    # ... also when stdout is a file: appended through the descriptor, the file not replaced.
    log = os.path.join(tmp, "stdout.txt")
    with open(log, "w") as f:
        f.write("before\n")
    with open(log, "a") as f:
        rc = subprocess.run([c.jointfx, "convert", src, "-o", "/dev/stdout", "--format", "text"],
                            stdout=f, timeout=TIMEOUT_S).returncode
    with open(log) as f:
        c.check("-o /dev/stdout into an appended file", rc == 0 and f.read() == "before\n" +
                converted, "stdout file was truncated or replaced")

    # A directory or a socket: refused, left alone.
    sock_path = os.path.join(tmp, "out.sock")
    import socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(sock_path)
        c.expect("convert -o socket", ["convert", src, "-o", sock_path, "--format", "text"], 2,
                 "refusing to write to a socket")
        c.check("socket kept", stat.S_ISSOCK(os.lstat(sock_path).st_mode), "socket replaced")
    leftovers = [n for n in os.listdir(tmp) if ".tmp." in n]
    c.check("no temporary files left (output paths)", not leftovers, f"found {leftovers}")


def write_safetensors(path, tensors):
    """A safetensors file of float32 tensors: {name: (shape, values)}."""
    header, data = {}, b""
    for name, (shape, values) in tensors.items():
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def check_runtime_values(c, corpus, tmp):
    """`exec` clips a long value as the core does: a tensor name of 100 KB in --params. Returns how many checks were skipped for want of the runtime."""
    if not has_runtime(c.jointfx):
        return 2
    graph = os.path.join(corpus, "..", "..", "runtime", "data", "linear_w1.jfx")
    arg = "a" * (100 << 10)
    params = os.path.join(tmp, "long_name.safetensors")
    write_safetensors(params, {arg: ([1], [1.0])})
    c.expect("100 KB tensor name in --params", ["exec", graph, "--params", params], 2,
             ("no tensor 'w' (input 'w'); the file has 'aaa", "aaa...' (102400 bytes)"),
             max_len=1000)
    return 0


def check_exec_outputs(c, corpus, tmp):
    """`exec` never writes over its inputs (the graph, --params, --batch), through links and
    through directories it makes, and a log it cannot write fails the run. Returns how many
    checks were skipped for want of the runtime."""
    if not has_runtime(c.jointfx):
        return 9
    graph = os.path.join(tmp, "g.jfx")
    shutil.copy(os.path.join(corpus, "..", "..", "runtime", "data", "linear_w1.jfx"), graph)
    params = os.path.join(tmp, "params.safetensors")
    write_safetensors(params, {"w": ([1], [1.0])})
    link = os.path.join(tmp, "link.jfx")
    os.symlink(graph, link)
    grads = os.path.join(tmp, "grads")
    os.makedirs(grads)
    in_grads = os.path.join(grads, "grads.step1.rank0.safetensors")
    shutil.copy(params, in_grads)
    with open(graph, "rb") as f:
        graph_bytes = f.read()
    with open(params, "rb") as f:
        params_bytes = f.read()
    base = ["exec", graph, "--nproc", "1", "--steps", "1", "-q"]
    c.expect("exec --log over the input graph", base + ["--log", graph], 2,
             "--log '" + graph + "' is the input graph; refusing to overwrite an input")
    c.expect("exec --memory-csv over the input graph", base + ["--memory-csv", graph], 2,
             "is the input graph; refusing to overwrite an input")
    c.expect("exec --log over the --params file", base + ["--params", params, "--log", params],
             2, "is the --params file; refusing to overwrite an input")
    c.expect("exec --log through a link to the input graph", base + ["--log", link], 2,
             "is the input graph")
    c.expect("exec --memory-csv through a directory it would make",
             base + ["--memory-csv", os.path.join(tmp, "new{rank}", "..", "g.jfx")], 2,
             "is the input graph")
    c.expect("exec --save-grads over a --params file it would write",
             base + ["--params", in_grads, "--save-grads", grads], 2,
             "(it writes grads.step1.rank0.safetensors)")
    c.check("exec left its inputs untouched",
            open(graph, "rb").read() == graph_bytes and open(params, "rb").read() == params_bytes,
            "an input changed")
    c.expect("exec --log /dev/full", base + ["--log", "/dev/full"], 3,
             "--log /dev/full: error: cannot write")
    log = os.path.join(tmp, "r{rank}.{rank}.jsonl")
    rc, out = run(c.jointfx, *base, "--log", log)
    written = os.path.join(tmp, "r0.0.jsonl")
    c.check("exec --log replaces every {rank}", rc == 0 and os.path.exists(written) and
            json.loads(open(written).read().splitlines()[0])["step"] == 1,
            f"exit {rc}: {out.strip()[:300]}; files {sorted(os.listdir(tmp))}")
    return 0


def check_out_of_memory(c, tmp):
    """Out of memory (an address-space limit) at every point of `opt` on a graph holding a 24 MiB
    string: exit 3 with a message and no temporary left beside the output, or success; never a
    signal (mimalloc's `new` aborted with no message and left `.out.json.tmp.XXXXXX`). Returns 1
    (skipped) where the binary cannot start under a limit at all (a sanitizer's shadow memory)."""
    import resource

    graph = os.path.join(tmp, "big.json")
    with open(graph, "w") as f:
        f.write('{"format": "jointfx.graph", "version": 1, "process_groups": [], "inputs": [], '
                '"outputs": [], "meta": {"blob": "' + "a" * (24 << 20) + '"}, "nodes": ['
                '{"name": "output", "op": "output", "target": "output", "args": [[]], '
                '"kwargs": {}, "meta": {}}]}')
    out = os.path.join(tmp, "out.json")

    def limited(limit):
        def set_limit():
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        p = subprocess.run([c.jointfx, "opt", graph, "-o", out, "-p", "dce"], capture_output=True,
                           text=True, errors="replace", timeout=TIMEOUT_S, preexec_fn=set_limit)
        return p.returncode, p.stderr

    if limited(16 << 30)[0] != 0:
        return 1
    codes = set()
    limit = 64 << 20
    while limit < (16 << 30):
        rc, err = limited(limit)
        codes.add(rc)
        left = [n for n in os.listdir(tmp) if n.startswith(".out.json.tmp")]
        c.check(f"opt under a {limit >> 20} MiB address-space limit", rc in (0, 3) and not left
                and (rc == 0 or "jointfx: error: out of memory" in err),
                f"exit {rc}, temporaries left {left}, stderr {err.strip()[:300]!r}")
        if rc == 0:
            break
        limit = limit * 5 // 4
    c.check("out of memory was reached and then passed", codes >= {0, 3}, f"exit codes {codes}")
    return 0


def check_fifo_inputs(c, tmp):
    """A FIFO as an input (the graph, a pipeline file): with nobody writing to it, exit 2 naming
    it after a bounded wait (it waited forever); with a writer that starts a second later, read
    as a file."""

    graph = ('{"format": "jointfx.graph", "version": 1, "process_groups": [], "inputs": [], '
             '"outputs": [], "nodes": [{"name": "output", "op": "output", "target": "output", '
             '"args": [[]], "kwargs": {}, "meta": {}}]}')
    real = os.path.join(tmp, "g.json")
    with open(real, "w") as f:
        f.write(graph)
    for label, args in (("graph", ["verify", "{fifo}"]),
                        ("pipeline file", ["opt", real, "-p", "{fifo}", "-o", "-"])):
        fifo = os.path.join(tmp, f"in_{label.replace(' ', '_')}.json")
        os.mkfifo(fifo)
        argv = [a.replace("{fifo}", fifo) for a in args]
        p = subprocess.run([c.jointfx, *argv], capture_output=True, text=True, errors="replace",
                           timeout=TIMEOUT_S)
        c.check(f"a FIFO nobody writes to as the {label}",
                p.returncode == 2 and fifo in p.stderr and "FIFO nobody wrote to" in p.stderr,
                f"exit {p.returncode}, stderr {p.stderr.strip()[:300]!r}")
        text = graph if label == "graph" else '{"passes": [{"name": "dce"}]}'

        def write(path=fifo, text=text):
            time.sleep(1)
            with open(path, "w") as f:
                f.write(text)

        writer = threading.Thread(target=write)
        writer.start()
        p = subprocess.run([c.jointfx, *argv], capture_output=True, text=True, errors="replace",
                           timeout=TIMEOUT_S)
        writer.join()
        c.check(f"a FIFO written a second later as the {label}", p.returncode == 0,
                f"exit {p.returncode}, stderr {p.stderr.strip()[:300]!r}")


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
        cases, skipped = check_manifest(c, corpus, tmp)
        code = os.path.join(tmp, "code")
        os.makedirs(code)
        check_code_in_names(c, corpus, code)
        for name, step in (("generated", check_generated), ("paths", check_output_paths)):
            sub = os.path.join(tmp, name)
            os.makedirs(sub)
            step(c, sub)
        check_no_overwrite(c, corpus, tmp)
        fifos = os.path.join(tmp, "fifos")
        os.makedirs(fifos)
        check_fifo_inputs(c, fifos)
        check_usage(c, tmp)
        runtime_skipped = check_runtime_values(c, corpus, tmp)
        outputs = os.path.join(tmp, "exec_outputs")
        os.makedirs(outputs)
        runtime_skipped += check_exec_outputs(c, corpus, outputs)
        oom = os.path.join(tmp, "oom")
        os.makedirs(oom)
        skipped += check_out_of_memory(c, oom)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if cases + skipped < 100:
        c.check("corpus size", False,
                f"{cases + skipped} cases; the corpus should keep at least 100")
    for failure in c.failures:
        print("FAIL", failure)
    print(f"{c.count - len(c.failures)}/{c.count} checks passed ({cases} corpus cases run"
          + (f", {skipped + runtime_skipped} skipped: this jointfx has no LibTorch runtime"
             if skipped + runtime_skipped else "") +
          ")")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
