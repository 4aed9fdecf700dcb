#!/usr/bin/env bash
# Redis instructions per uncontended acquire+release cycle (W1), counted by
# callgrind: a figure the machine's load does not move.
#
#   crates/leasehold/benches/cycle_instructions.sh [leasehold|rslock|floor] [CYCLES]
#
# Starts redis-server (from $LEASEHOLD_REDIS_SERVER or PATH) under
# `valgrind --tool=callgrind` on a free loopback port (never 6379), counts
# what the idle server does in $IDLE seconds (10 by default), then runs the
# cycle_instructions bench against it: the library connects and warms up,
# the counts are zeroed, CYCLES cycles run (5000 by default), and the counts
# are dumped. Prints the instructions per cycle two ways, which agree when
# the idle server's work is steady:
#
#   (total - idle rate x window) / CYCLES
#   (total - serverCron's share of the window) / CYCLES
#
# serverCron is the server's timer work (about 1.2 M instructions a second
# under callgrind, mostly jemalloc statistics), which runs whether or not
# anybody calls. $DRIVER names a built bench binary to use instead of
# building one (to count another commit's library with this script). The
# dumps are left in the directory it prints.
set -euo pipefail

LIBRARY=${1:-leasehold}
CYCLES=${2:-5000}
IDLE=${IDLE:-10}
SERVER=${LEASEHOLD_REDIS_SERVER:-redis-server}
. "$(dirname "$0")/instructions_common.sh"
needs valgrind callgrind_control callgrind_annotate redis-cli
find_driver

OUT=$(mktemp -d -t cycle-instructions.XXXXXX)
find_port

start_server valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.out.%p"

# The idle server.
callgrind_control -z "$PID" >/dev/null 2>&1
idle_start=$(date +%s%N)
sleep "$IDLE"
idle_ns=$(($(date +%s%N) - idle_start))
callgrind_control -d idle "$PID" >/dev/null 2>&1

# The cycles, between a zero and a dump.
"$DRIVER" --url "redis://127.0.0.1:$PORT" --library "$LIBRARY" --cycles "$CYCLES" \
    --before "callgrind_control -z $PID >/dev/null 2>&1 && date +%s%N >$OUT/t0" \
    --after "date +%s%N >$OUT/t1 && callgrind_control -d cycles $PID >/dev/null 2>&1" |
    tee "$OUT/driver.txt"
window_ns=$(($(cat "$OUT/t1") - $(cat "$OUT/t0")))

dump() { grep -l "^desc: Trigger: dump $1\$" "$OUT"/callgrind.out.* | head -n 1; }
summary() { sed -n 's/^summary: //p' "$1"; }
cron() {
    callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
        awk '!found && /:serverCron / { gsub(",", "", $1); ir = $1; found = 1 } END { print found ? ir : 0 }'
}
idle=$(summary "$(dump idle)")
total=$(summary "$(dump cycles)")
cron_ir=$(cron "$(dump cycles)")
by_idle=$(((total - idle * window_ns / idle_ns) / CYCLES))
by_cron=$(((total - cron_ir) / CYCLES))
echo "$LIBRARY: $CYCLES cycles; window $((window_ns / 1000000)) ms; instructions in it $total, serverCron's $cron_ir; idle $idle in $((idle_ns / 1000000)) ms"
echo "$LIBRARY: Redis instructions per cycle: $by_idle (less the idle rate), $by_cron (less serverCron)"
echo "dumps in $OUT"
