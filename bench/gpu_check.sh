#!/usr/bin/env bash
# The executor on a GPU: what bench/README.md's "On a GPU" figures came from.
#
#   bench/gpu_check.sh [JOINTFX] [OUT_DIR]
#
# JOINTFX is a jointfx built with -DJFX_WITH_CUDA=ON against the LibTorch of the machine's torch
# (default build-cuda/tools/jointfx); OUT_DIR gets the graphs and the validation results
# (default bench/results). Needs one CUDA device and python3 (the bench script's standard library).
#  1. A graph traced on CPU (its SDPA is CPU-only) must be refused before any step.
#  2. Three joint graphs made by `jointfx synth --device cuda` (the traced fixtures carry CPU-only
#     ops): a small float32 model with efficient attention, the same in bf16 with flash
#     attention, and a 4-layer dim-2048 bf16 model. Each runs 5 steps, then `parity` compares it
#     with itself (-p none: the run-to-run baseline), the default and the auto pipelines.
#  3. bench/calibrate_validate.py --device cuda on the three graphs (calibrated profile vs exec).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jfx="${1:-$repo/build-cuda/tools/jointfx}"
out="${2:-$repo/bench/results}"
mkdir -p "$out"
graphs="$(mktemp -d /tmp/jfx-gpu-check.XXXXXX)"
status=0

echo "== 1. a CPU-traced graph on cuda"
if msg="$("$jfx" exec "$repo/tests/data/traced/fsdp_w1.json" --device cuda 2>&1)"; then
  echo "ran, but should have been refused"
  status=1
else
  echo "refused (exit $?): $msg"
fi

echo "== 2. synth CUDA graphs: exec and parity"
small=(--preset tiny --world-size 1 --device cuda --dim 128 --heads 4 --kv-heads 4 --ffn-dim 256
  --vocab 512 --seq 128)
"$jfx" synth "${small[@]}" --attention efficient -o "$graphs/small_f32_w1.json" &&
  "$jfx" synth "${small[@]}" --attention flash --param-dtype bf16 -o "$graphs/small_bf16_w1.json" &&
  "$jfx" synth --preset tiny --world-size 1 --device cuda --attention flash --param-dtype bf16 \
    --layers 4 --dim 2048 --heads 16 --kv-heads 16 --ffn-dim 8192 --vocab 32000 --seq 2048 \
    --batch 2 -o "$graphs/mid_bf16_w1.json" || exit 2
fixtures=()
for g in small_f32_w1 small_bf16_w1 mid_bf16_w1; do
  "$jfx" exec "$graphs/$g.json" --device cuda --steps 5 || { status=1; continue; }
  fixtures+=(--fixture "$graphs/$g.json")
  "$jfx" parity "$graphs/$g.json" -p none -p "$repo/configs/pipelines/default.json" \
    -p "$repo/configs/pipelines/auto.json" --device cuda --steps 2 || status=1
done

echo "== 3. calibrated prediction vs measurement"
if ((${#fixtures[@]})); then
  python3 "$repo/bench/calibrate_validate.py" --jointfx "$jfx" --device cuda "${fixtures[@]}" \
    --repeat 3 --steps 30 --out "$out/calibrate_validate_gpu" || status=1
fi
rm -rf "$graphs"
exit $status
