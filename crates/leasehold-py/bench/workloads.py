"""W1, W2 and W3 of BENCH.md from Python: leasehold beside redis-py's Lock,
python-redis-lock and pottery, in the same run, on the same server.

A program, not a test: it prints a table and one JSON line per workload.

    pip install ./crates/leasehold-py redis python-redis-lock pottery
    python crates/leasehold-py/bench/workloads.py [--seconds 10] [--quick]

The redis-server it starts (on a free port, persistence off) runs on CPU 0
and this process (every worker thread, and leasehold's runtime thread) on
CPU 1. Every worker is a client of its own with its own connections, made
and warmed up before the timing starts. Lease 10 s, no renewal.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

SERVER_CPU = 0
CLIENT_CPU = 1
LEASE = 10.0


def pin_client() -> str:
    """Pins this process (its threads to come) to CLIENT_CPU."""
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > CLIENT_CPU:
        os.sched_setaffinity(0, {CLIENT_CPU})
        return f"redis-server on CPU {SERVER_CPU}, client on CPU {CLIENT_CPU}"
    return "not pinned (needs 2 CPUs and sched_setaffinity)"


# Pinned before leasehold or any other thread starts: threads inherit it.
PINNING = pin_client()

import redis  # noqa: E402

import leasehold  # noqa: E402
from servers import RedisServer  # noqa: E402


class Worker:
    """One worker's client of one library."""

    def acquire(self, wait: float) -> Any:
        raise NotImplementedError

    def try_acquire(self, key: str) -> Any:
        raise NotImplementedError

    def release(self, held: Any) -> None:
        raise NotImplementedError


class Leasehold(Worker):
    def __init__(self, url: str, key: str, fair: bool = False) -> None:
        self.client = leasehold.Client(url, lease=LEASE, watchdog=False)
        make = self.client.fair_mutex if fair else self.client.mutex
        self.lock = make(key)
        self.make = make
        self.keys: Dict[str, leasehold.Lock] = {}

    def acquire(self, wait: float) -> Any:
        return self.lock.acquire(timeout=wait)

    def try_acquire(self, key: str) -> Any:
        lock = self.keys.get(key)
        if lock is None:
            lock = self.keys[key] = self.make(key)
        return lock.try_acquire()

    def release(self, held: Any) -> None:
        held.release()


class RedisPy(Worker):
    """redis-py's Lock: SET NX PX, a Lua release, blocking acquire polling
    every 0.1 s (its default)."""

    def __init__(self, url: str, key: str) -> None:
        self.redis = redis.Redis.from_url(url)
        self.key = key

    def acquire(self, wait: float) -> Any:
        lock = self.redis.lock(self.key, timeout=LEASE, blocking_timeout=wait, thread_local=False)
        if not lock.acquire():
            raise TimeoutError("redis-py lock wait ran out")
        return lock

    def try_acquire(self, key: str) -> Any:
        lock = self.redis.lock(key, timeout=LEASE, thread_local=False)
        return lock if lock.acquire(blocking=False) else None

    def release(self, held: Any) -> None:
        held.release()


class PythonRedisLock(Worker):
    """python-redis-lock: SET NX, waiters block on a signal list (BLPOP)."""

    def __init__(self, url: str, key: str) -> None:
        import logging

        import redis_lock

        # It logs every failed non-waiting attempt.
        logging.getLogger("redis_lock").setLevel(logging.ERROR)
        self.module = redis_lock
        self.redis = redis.Redis.from_url(url)
        self.key = key

    def acquire(self, wait: float) -> Any:
        lock = self.module.Lock(self.redis, self.key, expire=int(LEASE))
        # It refuses a wait longer than the lease.
        if not lock.acquire(timeout=min(wait, LEASE)):
            raise TimeoutError("python-redis-lock wait ran out")
        return lock

    def try_acquire(self, key: str) -> Any:
        lock = self.module.Lock(self.redis, key, expire=int(LEASE))
        return lock if lock.acquire(blocking=False) else None

    def release(self, held: Any) -> None:
        held.release()


class Pottery(Worker):
    """pottery's Redlock over the one server (its single-master form)."""

    def __init__(self, url: str, key: str) -> None:
        import pottery

        self.module = pottery
        self.redis = redis.Redis.from_url(url)
        self.key = key

    def acquire(self, wait: float) -> Any:
        lock = self.module.Redlock(key=self.key, masters={self.redis}, auto_release_time=LEASE)
        if not lock.acquire(timeout=wait):
            raise TimeoutError("pottery wait ran out")
        return lock

    def try_acquire(self, key: str) -> Any:
        lock = self.module.Redlock(key=key, masters={self.redis}, auto_release_time=LEASE)
        return lock if lock.acquire(blocking=False) else None

    def release(self, held: Any) -> None:
        held.release()


LIBRARIES: Dict[str, Callable[[str, str], Worker]] = {
    "leasehold": lambda url, key: Leasehold(url, key),
    "leasehold-fair": lambda url, key: Leasehold(url, key, fair=True),
    "redis-py": RedisPy,
    "python-redis-lock": PythonRedisLock,
    "pottery": Pottery,
}


def pct(values: List[float], p: float) -> float:
    """Nearest-rank percentile."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, int(-(-p * len(ordered) // 100)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class ServerCost:
    calls: int = 0
    cpu_us: float = 0.0
    by_command: Dict[str, int] = field(default_factory=dict)


def server_reading(r: "redis.Redis[bytes]") -> Tuple[Dict[str, int], float]:
    stats = r.info("commandstats")
    calls = {k.replace("cmdstat_", ""): int(v["calls"]) for k, v in stats.items()}
    cpu = r.info("cpu")
    return calls, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def server_cost(r: "redis.Redis[bytes]", before: Tuple[Dict[str, int], float]) -> ServerCost:
    calls, cpu = server_reading(r)
    by = {k: v - before[0].get(k, 0) for k, v in calls.items() if v != before[0].get(k, 0)}
    # The readings themselves are INFO calls.
    by.pop("info", None)
    return ServerCost(sum(by.values()), (cpu - before[1]) * 1e6, by)


def on_threads(
    server: RedisServer, workers: int, seconds: float, run: Callable[[int, float], None]
) -> Tuple[float, float, ServerCost]:
    """Runs ``run(i, until)`` on ``workers`` threads started together, each
    until ``time.perf_counter()`` passes ``until``: the seconds the run took,
    this process's CPU seconds, and the server's cost meanwhile."""
    gate = threading.Barrier(workers + 1)
    end = [0.0]

    def worker(i: int) -> None:
        gate.wait()
        # Read after the gate: the clock starts before the gate opens.
        run(i, end[0])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    before = server_reading(server.client)
    cpu0 = time.process_time()
    begin = time.perf_counter()
    end[0] = begin + seconds
    gate.wait()
    for thread in threads:
        thread.join()
    return time.perf_counter() - begin, time.process_time() - cpu0, server_cost(server.client, before)


def floor(server: RedisServer, n: int) -> Dict[str, float]:
    """The round trip of this machine, same run: PING on one connection, and
    a bare SET NX PX + Lua compare-and-delete."""
    r = redis.Redis.from_url(server.url)
    release = r.register_script(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
    )
    for _ in range(100):
        r.ping()
    pings = []
    for _ in range(n):
        t = time.perf_counter()
        r.ping()
        pings.append((time.perf_counter() - t) * 1e6)
    start = time.perf_counter()
    for i in range(n):
        token = os.urandom(8).hex()
        r.set("floor:lock", token, nx=True, px=int(LEASE * 1000))
        release(keys=["floor:lock"], args=[token])
    elapsed = time.perf_counter() - start
    return {"ping_p50_us": pct(pings, 50), "set_release_ops_per_s": n / elapsed}


def w1(server: RedisServer, lib: str, cycles: int) -> Dict[str, Any]:
    worker = LIBRARIES[lib](server.url, "w1:lock")
    for _ in range(100):
        worker.release(worker.acquire(30))
    acquire_us: List[float] = []
    release_us: List[float] = []
    before = server_reading(server.client)
    cpu0 = time.process_time()
    start = time.perf_counter()
    for _ in range(cycles):
        t0 = time.perf_counter()
        held = worker.acquire(30)
        t1 = time.perf_counter()
        worker.release(held)
        t2 = time.perf_counter()
        acquire_us.append((t1 - t0) * 1e6)
        release_us.append((t2 - t1) * 1e6)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    cost = server_cost(server.client, before)
    return {
        "workload": "W1",
        "library": lib,
        "ops_per_s": cycles / elapsed,
        "acquire_p50_us": pct(acquire_us, 50),
        "acquire_p99_us": pct(acquire_us, 99),
        "release_p50_us": pct(release_us, 50),
        "release_p99_us": pct(release_us, 99),
        "redis_calls_per_op": cost.calls / cycles,
        "redis_cpu_us_per_op": cost.cpu_us / cycles,
        "client_cpu_us_per_op": cpu * 1e6 / cycles,
        "redis_commands": cost.by_command,
    }


def w2(server: RedisServer, lib: str, seconds: float, workers: int = 8) -> Dict[str, Any]:
    key = f"w2:lock:{lib}"
    counter = f"w2:counter:{lib}"
    server.client.set(counter, 0)
    clients = [LIBRARIES[lib](server.url, key) for _ in range(workers)]
    conns = [redis.Redis.from_url(server.url) for _ in range(workers)]
    for worker, conn in zip(clients, conns):
        worker.release(worker.acquire(30))
        conn.ping()
    events: List[Tuple[float, float, int, float]] = []  # acquired, released, worker, waited
    lock = threading.Lock()
    timeouts = [0]

    def run(i: int, until: float) -> None:
        worker, conn = clients[i], conns[i]
        while time.perf_counter() < until:
            asked = time.perf_counter()
            try:
                held = worker.acquire(30)
            except Exception:  # noqa: BLE001
                with lock:
                    timeouts[0] += 1
                continue
            acquired = time.perf_counter()
            value = int(conn.get(counter) or 0)
            time.sleep(0.001)
            conn.set(counter, value + 1)
            released_at = time.perf_counter()
            worker.release(held)
            with lock:
                events.append((acquired, released_at, i, acquired - asked))

    elapsed, cpu, cost = on_threads(server, workers, seconds, run)
    n = len(events)
    events.sort()
    shares = [sum(1 for e in events if e[2] == i) / max(n, 1) for i in range(workers)]
    gaps = [(b[0] - a[1]) * 1e6 for a, b in zip(events, events[1:])]
    retook = sum(1 for a, b in zip(events, events[1:]) if a[2] == b[2])
    waits = [e[3] * 1e6 for e in events]
    return {
        "workload": "W2",
        "library": lib,
        "acquisitions_per_s": n / elapsed,
        "acquisitions": n,
        "share_min": min(shares),
        "share_max": max(shares),
        "wait_p50_us": pct(waits, 50),
        "wait_p99_us": pct(waits, 99),
        "wait_max_us": max(waits) if waits else float("nan"),
        "idle_gap_mean_us": statistics.fmean(gaps) if gaps else float("nan"),
        "releaser_retook": retook / max(n - 1, 1),
        "timeouts": timeouts[0],
        "counter_ok": int(server.client.get(counter) or 0) == n,
        "redis_calls_per_acq": cost.calls / max(n, 1),
        "redis_cpu_us_per_acq": cost.cpu_us / max(n, 1),
        "client_cpu_us_per_acq": cpu * 1e6 / max(n, 1),
    }


def w3(server: RedisServer, lib: str, seconds: float, workers: int = 8, keys: int = 1000) -> Dict[str, Any]:
    clients = [LIBRARIES[lib](server.url, "w3:warm") for _ in range(workers)]
    names = [f"w3:{lib}:{k}" for k in range(keys)]
    for worker in clients:
        for name in names[:50]:
            held = worker.try_acquire(name)
            if held is not None:
                worker.release(held)
    attempts = [0] * workers
    successes = [0] * workers

    def run(i: int, until: float) -> None:
        worker = clients[i]
        rng = random.Random(i)
        while time.perf_counter() < until:
            held = worker.try_acquire(names[rng.randrange(keys)])
            attempts[i] += 1
            if held is not None:
                successes[i] += 1
                worker.release(held)

    elapsed, cpu, cost = on_threads(server, workers, seconds, run)
    total = sum(attempts)
    return {
        "workload": "W3",
        "library": lib,
        "attempts_per_s": total / elapsed,
        "success_ratio": sum(successes) / max(total, 1),
        "redis_calls_per_attempt": cost.calls / max(total, 1),
        "redis_cpu_us_per_attempt": cost.cpu_us / max(total, 1),
        "client_cpu_us_per_attempt": cpu * 1e6 / max(total, 1),
    }


def available(lib: str) -> Optional[str]:
    try:
        if lib == "python-redis-lock":
            import redis_lock  # noqa: F401
        if lib == "pottery":
            import pottery  # noqa: F401
    except ImportError as e:
        return str(e)
    return None


def table(rows: List[Dict[str, Any]], columns: List[str], base: str, key: str) -> str:
    reference = next((r for r in rows if r["library"] == base), None)
    head = ["library", *columns, f"{key} vs {base}"]
    lines = [head]
    for row in rows:
        ratio = row[key] / reference[key] if reference and reference[key] else float("nan")
        cells = [row["library"]]
        for c in columns:
            v = row[c]
            cells.append(f"{v:.3f}" if isinstance(v, float) and abs(v) < 10 else f"{v:.0f}" if isinstance(v, float) else str(v))
        cells.append(f"{ratio:.2f}x")
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(line, widths)) for line in lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of W2 and W3 (10)")
    parser.add_argument("--cycles", type=int, default=5000, help="W1 cycles (5000)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 s, 500 cycles")
    parser.add_argument("--only", default="", help="comma-separated libraries to run")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.cycles = 1.0, 500
    libs = [lib for lib in LIBRARIES if not args.only or lib in args.only.split(",")]
    skipped = {lib: why for lib in libs if (why := available(lib))}
    libs = [lib for lib in libs if lib not in skipped]
    server = RedisServer(cpu=SERVER_CPU)
    results: List[Dict[str, Any]] = []
    try:
        print(f"pinning: {PINNING}; redis-server {server.url}; leasehold {leasehold.__file__}")
        for lib, why in skipped.items():
            print(f"skipped {lib}: {why}")
        base = floor(server, args.cycles)
        print(f"floor: PING p50 {base['ping_p50_us']:.0f} us, bare SET NX PX + Lua release "
              f"{base['set_release_ops_per_s']:.0f} cycles/s (redis-py, one connection)")
        results.append({"workload": "floor", **base})
        w1_rows = [w1(server, lib, args.cycles) for lib in libs]
        w2_rows = [w2(server, lib, args.seconds) for lib in libs]
        w3_rows = [w3(server, lib, args.seconds) for lib in libs if lib != "leasehold-fair"]
        results += w1_rows + w2_rows + w3_rows
    finally:
        server.stop()
    print("\nW1: 1 worker, acquire+release back to back")
    print(table(w1_rows, ["ops_per_s", "acquire_p50_us", "acquire_p99_us", "release_p50_us",
                          "release_p99_us", "redis_calls_per_op", "redis_cpu_us_per_op",
                          "client_cpu_us_per_op"], "redis-py", "ops_per_s"))
    print("\nW2: 8 workers, one lock, GET + 1 ms + SET under it")
    print(table(w2_rows, ["acquisitions_per_s", "share_min", "share_max", "wait_p50_us", "wait_p99_us",
                          "wait_max_us", "idle_gap_mean_us", "releaser_retook", "timeouts", "counter_ok",
                          "redis_calls_per_acq", "redis_cpu_us_per_acq", "client_cpu_us_per_acq"],
                "redis-py", "acquisitions_per_s"))
    print("\nW3: 8 workers, 1,000 keys, one non-waiting attempt each")
    print(table(w3_rows, ["attempts_per_s", "success_ratio", "redis_calls_per_attempt",
                          "redis_cpu_us_per_attempt", "client_cpu_us_per_attempt"],
                "redis-py", "attempts_per_s"))
    print()
    for row in results:
        print(json.dumps({"pinning": PINNING, **row}))


if __name__ == "__main__":
    main()
