# Shared by cycle_instructions.sh and client_instructions.sh (sourced):
# the tools they need, the bench binary they drive, and a free port.

# Exits unless every tool named is on PATH.
needs() {
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "$0: needs $tool" >&2; exit 2; }
    done
}

# Sets DRIVER to the cycle_instructions bench binary, built if $DRIVER
# does not name one already.
find_driver() {
    if [ -z "${DRIVER:-}" ]; then
        DRIVER=$(cargo bench -p leasehold --bench cycle_instructions --no-run 2>&1 |
            sed -n 's/.*Executable .*(\(.*\))$/\1/p')
    fi
    [ -x "$DRIVER" ] || { echo "$0: no bench binary at '$DRIVER'" >&2; exit 2; }
}

# Starts redis-server on $PORT with its files in $OUT, behind the command
# words given first (`valgrind ...`, or none), waits until it answers PING
# (at most 60 s), and sets PID; the server is killed when the script exits.
start_server() {
    "$@" "$SERVER" --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$OUT" --daemonize no >"$OUT/server.log" 2>&1 &
    PID=$!
    trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; ${CLEANUP:-}' EXIT
    for _ in $(seq 1 120); do
        redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
        sleep 0.5
    done
    redis-cli -p "$PORT" ping >/dev/null
}

# Sets PORT to a loopback port nothing listens on (never 6379).
find_port() {
    PORT=
    for _ in $(seq 1 50); do
        candidate=$((20000 + RANDOM % 40000))
        if [ "$candidate" != 6379 ] && ! (: >"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
            PORT=$candidate
            break
        fi
    done
    [ -n "$PORT" ] || { echo "$0: found no free port" >&2; exit 2; }
}
