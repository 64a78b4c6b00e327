#!/usr/bin/env python3
"""jointfx calibrate --quick --world W writes a profile that analyze --hardware loads.

    check_calibrate.py JOINTFX WORLD GRAPH [WORKLOAD]

Checks: exit 0; the profile has the measured figures (matmul rate for float32 and bfloat16,
memory bandwidth, per-node overheads, at world > 1 the collectives' busBw and hop latency), each
with a source saying it was measured by jointfx calibrate on this host; `jointfx analyze GRAPH
--hardware PROFILE --json` loads it and simulates a positive step; the written profile is
refused as its own --base's output (never overwrite an input). The per-node overheads' sources
name the workload that scaled them and the factor it gave: WORKLOAD if given, `none` for no
scaling, else calibrate's default (a synthetic tiny Llama-3 joint graph). No timing limits.
"""

import json
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    jfx, world, graph = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    workload = sys.argv[4] if len(sys.argv) > 4 else None
    with tempfile.TemporaryDirectory(prefix="jfx-calib-test-") as tmp:
        prof = Path(tmp) / "calibrated.json"
        extra = ["--workload", workload] if workload else []
        named = workload or "a synthetic tiny Llama-3 joint graph (jointfx synth's defaults)"
        r = subprocess.run([jfx, "calibrate", "--quick", "--world", str(world), "-o", str(prof),
                            *extra], capture_output=True, text=True)
        print(r.stdout, r.stderr, sep="")
        assert r.returncode == 0, f"calibrate exited {r.returncode}"
        hw = json.loads(prof.read_text())
        for dt in ("float32", "bfloat16"):
            assert hw["peak_tflops"][dt] > 0, dt
        assert hw["memory_bandwidth_gbps"] > 0
        assert hw["kernel_overhead_us"] > 0 and hw["host_overhead_us"] > 0
        assert hw["local_collective_us"] >= 0
        host = socket.gethostname()
        src = hw["sources"]
        for key in ("peak_tflops", "memory_bandwidth_gbps", "kernel_overhead_us",
                    "host_overhead_us", "local_collective_us"):
            assert src[key].startswith(f"measured by jointfx calibrate on {host}, "), (key, src[key])
        # exec's gloo backend: groups over the same ranks share a stream.
        assert hw["collective_streams"] == "per_rank_set", hw["collective_streams"]
        for key in ("kernel_overhead_us", "host_overhead_us"):
            if workload == "none":
                assert ", times " not in src[key], src[key]
            else:
                m = re.search(r", times ([0-9.e+-]+): the factor that makes the overheads explain "
                              r"the step of (.+) with its collectives made local", src[key])
                assert m and float(m.group(1)) > 0 and m.group(2) == named, src[key]
        if world > 1:
            assert hw["intra_node"]["bus_bandwidth_gbps"] > 0
            assert hw["intra_node"]["hop_latency_us"] > 0
            assert src["intra_node"].startswith("measured by jointfx calibrate"), src["intra_node"]
            assert f"on {world} ranks" in src["intra_node"]
        r = subprocess.run([jfx, "analyze", graph, "--hardware", str(prof), "--json"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        sim = json.loads(r.stdout)["simulation"]
        assert sim["hardware"] == hw["name"] and sim["step_s"] > 0, sim
        print(f"analyze {Path(graph).name} on {hw['name']}: step {sim['step_s'] * 1e3:.3f} ms")
        # Never overwrite an input: the profile as --base and -o.
        before = prof.read_bytes()
        r = subprocess.run([jfx, "calibrate", "--quick", "--base", str(prof), "-o", str(prof)],
                           capture_output=True, text=True)
        assert r.returncode == 2 and "refusing to write the output over the input" in r.stderr, r
        assert prof.read_bytes() == before
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
