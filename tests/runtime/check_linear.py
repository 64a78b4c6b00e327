#!/usr/bin/env python3
"""2-rank gloo run of tests/runtime/data/linear_w2.jfx against a float64 reference.

    check_linear.py JOINTFX GRAPH

Writes the full parameter W and the global batch X as safetensors (pure Python: this test needs
no torch), runs `jointfx exec GRAPH --nproc 2 --steps 3` with SGD, and checks that
  * both ranks report the same loss, bit for bit, every step (the graph all-reduces it);
  * the step-1 loss and each rank's gradient shard match loss = sum((X W^T)^2),
    dW = 2 (X W^T)^T X (rows split across ranks);
  * the saved shards after 3 SGD steps match the same SGD in float64.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

N, D = 4, 4  # global batch rows, features
LR = 0.01
STEPS = 3


def write_safetensors(path, tensors):
    header, data = {}, b""
    for name in sorted(tensors):
        shape, values = tensors[name]
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = blob[8 + n + b:8 + n + end]
        assert e["dtype"] == "F32", e
        out[name] = (e["shape"], list(struct.unpack(f"<{len(raw) // 4}f", raw)), raw)
    return out


def matmul(a, b, n, k, m):
    return [sum(a[i * k + p] * b[p * m + j] for p in range(k)) for i in range(n) for j in range(m)]


def transpose(a, n, m):
    return [a[i * m + j] for j in range(m) for i in range(n)]


def close(a, b, tol=1e-5):
    return abs(a - b) <= tol * max(1.0, abs(b))


def main():
    jointfx, graph = sys.argv[1], sys.argv[2]
    W = [((i * 7 + 3) % 11 - 5) / 10.0 for i in range(D * D)]
    X = [((i * 5 + 1) % 13 - 6) / 8.0 for i in range(N * D)]
    # float32-round the inputs so the reference starts from what the executor reads
    W = list(struct.unpack(f"<{len(W)}f", struct.pack(f"<{len(W)}f", *W)))
    X = list(struct.unpack(f"<{len(X)}f", struct.pack(f"<{len(X)}f", *X)))
    failures = []
    with tempfile.TemporaryDirectory(prefix="jfx-linear-") as tmp:
        params, batch = os.path.join(tmp, "params.safetensors"), os.path.join(tmp, "batch.safetensors")
        write_safetensors(params, {"w": ([D, D], W)})
        write_safetensors(batch, {"x": ([N, D], X)})
        out = os.path.join(tmp, "out")
        cmd = [jointfx, "exec", graph, "--nproc", "2", "--steps", str(STEPS), "--optimizer", "sgd",
               "--lr", str(LR), "--params", params, "--batch", batch, "--save-grads", out,
               "--save", out, "--log", os.path.join(out, "loss.{rank}.jsonl"), "--timeout-s", "60"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        print("$ " + " ".join(cmd))
        print(r.stdout + r.stderr)
        if r.returncode != 0:
            print(f"FAILED: exit code {r.returncode}")
            return 1

        logs = [[json.loads(l) for l in open(os.path.join(out, f"loss.{k}.jsonl"))] for k in range(2)]
        w = list(W)
        for step in range(1, STEPS + 1):
            a, b = logs[0][step - 1], logs[1][step - 1]
            if a["loss_bits"] != b["loss_bits"]:
                failures.append(f"step {step}: loss bits differ across ranks: {a} vs {b}")
            g = [read_safetensors(os.path.join(out, f"grads.step{step}.rank{k}.safetensors")) for k in range(2)]
            if g[0]["__loss__"][2] != g[1]["__loss__"][2]:
                failures.append(f"step {step}: saved __loss__ differs across ranks")
            # reference in float64
            Y = matmul(X, transpose(w, D, D), N, D, D)
            loss = sum(v * v for v in Y)
            dW = matmul(transpose([2 * v for v in Y], N, D), X, D, N, D)
            if not close(a["loss"], loss):
                failures.append(f"step {step}: loss {a['loss']} vs reference {loss}")
            for k in range(2):
                shard = g[k]["w"][1]
                ref = dW[k * (D // 2) * D:(k + 1) * (D // 2) * D]
                if not all(close(x, y) for x, y in zip(shard, ref)):
                    failures.append(f"step {step} rank {k}: gradient {shard} vs reference {ref}")
            w = [wi - LR * gi for wi, gi in zip(w, dW)]
        for k in range(2):
            state = read_safetensors(os.path.join(out, f"state.rank{k}.safetensors"))
            shard = state["w"][1]
            ref = w[k * (D // 2) * D:(k + 1) * (D // 2) * D]
            if not all(close(x, y, 1e-4) for x, y in zip(shard, ref)):
                failures.append(f"rank {k}: parameters after {STEPS} SGD steps {shard} vs {ref}")
    for f in failures:
        print("FAILED: " + f)
    if not failures:
        print("ok: losses identical on both ranks; loss, gradients and SGD match the reference")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
