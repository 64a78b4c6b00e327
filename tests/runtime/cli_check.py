#!/usr/bin/env python3
"""Runs one command and checks its exit code, output and wall time (for ctest).

    cli_check.py [--rc N|nonzero] [--stdout RE]... [--not-stdout RE]... [--stdout-count RE N]
                 [--stderr RE]... [--not-stderr RE]... [--max-seconds T] [--env K=V]...
                 [--hold-port] -- COMMAND ARGS...

In COMMAND and ARGS and --env values, {port} becomes a free TCP port on 127.0.0.1 and {tmp} a
fresh temporary directory (removed afterwards). --max-seconds is for the tests whose behaviour is
a deadline (a failed rank must stop the others within the collective timeout): the run fails if
it takes longer. Without it there is no time check, only a hang guard: the command is killed
after 15 minutes (max-seconds + 30 s when given), so a hang fails the test instead of stalling
the suite.

--hold-port keeps {port} bound and listening for the whole run without ever accepting or
answering: a rendezvous master that is there and says nothing (the kernel completes the TCP
handshake on its own, so a client's connect succeeds and its first read waits).
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rc", default="0")
    p.add_argument("--stdout", action="append", default=[])
    p.add_argument("--not-stdout", action="append", default=[])
    p.add_argument("--stdout-count", nargs=2, action="append", default=[], metavar=("RE", "N"),
                   help="stdout has exactly N lines matching RE")
    p.add_argument("--stderr", action="append", default=[])
    p.add_argument("--not-stderr", action="append", default=[])
    p.add_argument("--max-seconds", type=float, default=None)
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--hold-port", action="store_true")
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    cmd = a.command[1:] if a.command and a.command[0] == "--" else a.command
    if not cmd:
        p.error("no command")

    tmp = tempfile.mkdtemp(prefix="jfx-cli-")
    port = free_port()
    subst = {"{port}": str(port), "{tmp}": tmp}
    held = None
    if a.hold_port:
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", port))
        held.listen(64)

    def fill(s: str) -> str:
        for k, v in subst.items():
            s = s.replace(k, v)
        return s

    env = dict(os.environ)
    for kv in a.env:
        k, _, v = kv.partition("=")
        env[k] = fill(v)
    cmd = [fill(c) for c in cmd]
    kill_after = a.max_seconds + 30 if a.max_seconds is not None else 900
    start = time.monotonic()
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=kill_after)
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = None, e.stdout or "", e.stderr or ""
        out = out if isinstance(out, str) else out.decode(errors="replace")
        err = err if isinstance(err, str) else err.decode(errors="replace")
    elapsed = time.monotonic() - start
    if held is not None:
        held.close()
    shutil.rmtree(tmp, ignore_errors=True)

    failures = []
    if rc is None:
        failures.append(f"hung: killed after {kill_after:.0f} s")
    elif a.rc == "nonzero":
        if rc == 0:
            failures.append("exit code 0, expected non-zero")
    elif rc != int(a.rc):
        failures.append(f"exit code {rc}, expected {a.rc}")
    if a.max_seconds is not None and elapsed > a.max_seconds:
        failures.append(f"took {elapsed:.1f} s, limit {a.max_seconds:.0f} s")
    for pat in a.stdout:
        if not re.search(pat, out, re.M):
            failures.append(f"stdout lacks /{pat}/")
    for pat in a.not_stdout:
        if re.search(pat, out, re.M):
            failures.append(f"stdout has /{pat}/")
    for pat, n in a.stdout_count:
        found = len(re.findall(pat, out, re.M))
        if found != int(n):
            failures.append(f"stdout has {found} lines matching /{pat}/, expected {n}")
    for pat in a.stderr:
        if not re.search(pat, err, re.M):
            failures.append(f"stderr lacks /{pat}/")
    for pat in a.not_stderr:
        if re.search(pat, err, re.M):
            failures.append(f"stderr has /{pat}/")
    print("$ " + " ".join(cmd))
    print(f"exit {rc} in {elapsed:.1f} s")
    print("--- stdout\n" + out + "--- stderr\n" + err, end="")
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
