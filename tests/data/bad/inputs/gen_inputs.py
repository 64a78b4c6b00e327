#!/usr/bin/env python3
"""Writes the safetensors inputs of the bad-input corpus (tests/data/bad/inputs/*.safetensors).

usage: gen_inputs.py [OUT_DIR]   (default: the folder of this script)

Plain Python, no torch: the safetensors layout is an 8-byte little-endian header length, a JSON
header {name: {dtype, shape, data_offsets}} with sorted keys, then the data. The output is the
same byte for byte on every run; tests/bad_inputs.py regenerates it and compares.

params_*: parameters for tests/runtime/data/linear_w1.jfx (parameter "w", f32[4, 4]).
batch_x_*: batches for linear_w1.jfx (user input "x", f32[2, 4]).
batch_tokens_*: batches for embed_w1.jfx (user input "tokens", i64[2, 3], rows 0..9).
"""
import json
import os
import struct
import sys

FORMATS = {"F32": "<f", "F64": "<d", "I64": "<q", "I32": "<i"}


def tensor(dtype, shape, values):
    fmt = FORMATS[dtype]
    return dtype, list(shape), b"".join(struct.pack(fmt, v) for v in values)


def write(path, tensors):
    header, data = {}, b""
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def w(dtype="F32", nan_at=None):
    values = [0.01 * (i + 1) for i in range(16)]
    if nan_at is not None:
        values[nan_at] = float("nan")
    if dtype in ("I64", "I32"):
        values = list(range(16))
    return tensor(dtype, (4, 4), values)


def x(shape=(2, 4), nan_at=None):
    n = shape[0] * shape[1]
    values = [0.5 - 0.1 * i for i in range(n)]
    if nan_at is not None:
        values[nan_at] = float("inf")
    return tensor("F32", shape, values)


def tokens(values, dtype="I64"):
    return tensor(dtype, (2, 3), values)


CASES = {
    "params_extra": {"w": w(), "unused.bias": tensor("F32", (2,), [1.0, 2.0])},
    "params_nan": {"w": w(nan_at=5)},
    "params_int64": {"w": w("I64")},
    "params_f64": {"w": w("F64")},
    "params_missing": {"v": w()},
    "params_rank": {"w": tensor("F32", (16,), [0.01 * i for i in range(16)])},
    "batch_x_nan": {"x": x(nan_at=3)},
    "batch_x_shape": {"x": x(shape=(3, 4))},
    "batch_x_extra": {"x": x(), "y": x()},
    "batch_tokens_float": {"tokens": tensor("F32", (2, 3), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])},
    "batch_tokens_range": {"tokens": tokens([0, 1, 2, 3, 9, 10])},
    "batch_tokens_negative": {"tokens": tokens([0, -1, 2, 3, 4, 5])},
    "batch_tokens_missing": {"tokenz": tokens([0, 1, 2, 3, 4, 5])},
    "batch_tokens_int32": {"tokens": tokens([0, 1, 2, 3, 4, 9], "I32")},
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, tensors in CASES.items():
        write(os.path.join(out, name + ".safetensors"), tensors)


if __name__ == "__main__":
    main()
