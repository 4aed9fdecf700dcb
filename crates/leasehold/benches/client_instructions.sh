#!/usr/bin/env bash
# Client instructions per uncontended acquire+release cycle (W1), counted by
# callgrind in the client process itself: a figure the machine's load does
# not move, to set beside the Redis side's (cycle_instructions.sh).
#
#   crates/leasehold/benches/client_instructions.sh [leasehold|rslock|floor] [CYCLES]
#
# Starts redis-server (from $LEASEHOLD_REDIS_SERVER or PATH) on a free
# loopback port (never 6379), then runs the cycle_instructions bench under
# `valgrind --tool=callgrind` twice, for BASE (500) cycles and for BASE +
# CYCLES (2000 by default), and prints the difference per cycle: what both
# runs share (connecting, the warm-up, building the scripts) cancels out.
# User space only: the kernel's part of a round trip is not counted (it is
# about the same for every library: the same redis-rs connection). $DRIVER
# names a built bench binary to use instead of building one.
set -euo pipefail

LIBRARY=${1:-leasehold}
CYCLES=${2:-2000}
BASE=${BASE:-500}
SERVER=${LEASEHOLD_REDIS_SERVER:-redis-server}
. "$(dirname "$0")/instructions_common.sh"
needs valgrind redis-cli
find_driver

OUT=$(mktemp -d -t client-instructions.XXXXXX)
find_port

CLEANUP='rm -rf "$OUT"'
start_server

count() {
    valgrind --tool=callgrind --callgrind-out-file="$OUT/client.$1" \
        "$DRIVER" --url "redis://127.0.0.1:$PORT" --library "$LIBRARY" --cycles "$1" \
        >"$OUT/driver.$1" 2>"$OUT/valgrind.$1"
    sed -n 's/^summary: //p' "$OUT/client.$1"
}
short=$(count "$BASE")
long=$(count $((BASE + CYCLES)))
echo "$LIBRARY: client instructions per cycle: $(((long - short) / CYCLES)) ($BASE and $((BASE + CYCLES)) cycles: $short and $long)"
