#!/usr/bin/env bash
# Starts two ranks of `jointfx exec` the way torchrun would (RANK, WORLD_SIZE, LOCAL_RANK,
# MASTER_ADDR, MASTER_PORT set; no launcher): torchrun_env.sh JOINTFX GRAPH PORT [ARGS...]
set -u
jointfx=$1 graph=$2 port=$3
shift 3
export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port
RANK=1 LOCAL_RANK=1 "$jointfx" exec "$graph" "$@" &
peer=$!
RANK=0 LOCAL_RANK=0 "$jointfx" exec "$graph" "$@"
mine=$?
wait "$peer"
theirs=$?
exit $((mine | theirs))
