"""A lock held from Python keeps the Rust library's `leasehold` command out
of the same name, and the other way round; their fences are one sequence."""

from __future__ import annotations

import subprocess
from typing import List

import leasehold
from servers import RedisServer

BUSY = 75


def cli(binary: str, server: RedisServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, "--url", server.url, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_python_holds_the_cli_waits(leasehold_bin: str, server: RedisServer, client: leasehold.Client, name: str) -> None:
    with client.mutex(name) as guard:
        busy = cli(leasehold_bin, server, "acquire", name, "--no-wait", "--quiet")
        assert busy.returncode == BUSY, busy.stderr
        run = cli(leasehold_bin, server, "run", name, "--no-wait", "--quiet", "--", "true")
        assert run.returncode == BUSY, run.stderr
    taken = cli(leasehold_bin, server, "acquire", name, "--no-wait", "--lease", "30s")
    assert taken.returncode == 0, taken.stderr
    token, fence = taken.stdout.split()[:2]
    assert int(fence) > guard.fence
    released = cli(leasehold_bin, server, "release", name, token)
    assert released.returncode == 0, released.stderr


def test_the_cli_holds_python_waits(leasehold_bin: str, server: RedisServer, client: leasehold.Client, name: str) -> None:
    taken = cli(leasehold_bin, server, "acquire", name, "--no-wait", "--lease", "30s")
    assert taken.returncode == 0, taken.stderr
    token, fence = taken.stdout.split()[:2]
    mutex = client.mutex(name)
    assert mutex.try_acquire() is None
    info = mutex.inspect()
    assert info.held and info.last_fence == int(fence)
    released = cli(leasehold_bin, server, "release", name, token)
    assert released.returncode == 0, released.stderr
    with mutex.acquire(timeout=10) as guard:
        assert guard.fence > int(fence)


def test_fences_are_one_sequence(leasehold_bin: str, server: RedisServer, client: leasehold.Client, name: str) -> None:
    fences: List[int] = []
    for _ in range(3):
        with client.mutex(name) as guard:
            fences.append(guard.fence)
        run = cli(leasehold_bin, server, "run", name, "--quiet", "--", "sh", "-c", 'echo "$LEASEHOLD_FENCE"')
        assert run.returncode == 0, run.stderr
        fences.append(int(run.stdout.strip()))
    assert fences == sorted(fences) and len(set(fences)) == len(fences)


def test_every_kind_is_one_lock(leasehold_bin: str, server: RedisServer, client: leasehold.Client, name: str) -> None:
    with client.rw_lock(f"{name}:rw").write():
        run = cli(leasehold_bin, server, "run", f"{name}:rw", "--read", "--no-wait", "--quiet", "--", "true")
        assert run.returncode == BUSY, run.stderr
    with client.semaphore(f"{name}:s", 1):
        run = cli(leasehold_bin, server, "run", f"{name}:s", "--semaphore", "1", "--no-wait", "--quiet", "--", "true")
        assert run.returncode == BUSY, run.stderr
    with client.fair_mutex(f"{name}:f"):
        run = cli(leasehold_bin, server, "run", f"{name}:f", "--fair", "--no-wait", "--quiet", "--", "true")
        assert run.returncode == BUSY, run.stderr
    # Free again, the command takes each.
    for flags in (["--read"], ["--semaphore", "1"], ["--fair"]):
        lock = f"{name}:rw" if flags == ["--read"] else f"{name}:s" if flags[0] == "--semaphore" else f"{name}:f"
        run = cli(leasehold_bin, server, "run", lock, *flags, "--no-wait", "--quiet", "--", "true")
        assert run.returncode == 0, run.stderr
