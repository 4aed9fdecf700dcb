"""A client made before os.fork() works in the child, which never shares a
socket or a thread with its parent and does not hold its parent's locks."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
import traceback
from typing import Any, Callable, Dict

import pytest

import leasehold
from servers import RedisServer

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def in_child(body: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
    """Runs `body` in a forked child and returns what it reported."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            report = body()
        except BaseException:  # noqa: BLE001
            report = {"error": traceback.format_exc()}
        with os.fdopen(write, "w") as out:
            json.dump(report, out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as got:
        text = got.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    got_report: Dict[str, Any] = json.loads(text)
    assert "error" not in got_report, got_report.get("error")
    return got_report


def test_child_uses_the_client_but_not_the_parents_holds(client: leasehold.Client, name: str) -> None:
    held = client.mutex(name).acquire()
    owned = client.reentrant_mutex(f"{name}:r").acquire()

    def child() -> Dict[str, Any]:
        report: Dict[str, Any] = {
            "lost": held.lost,
            "reason": held.lost_reason,
            # The parent's lock is someone else's here.
            "try_parents": client.mutex(name).try_acquire() is None,
            # The parent's reentrant hold is not this thread's in the child.
            "try_reentrant": client.reentrant_mutex(f"{name}:r").try_acquire() is None,
        }
        try:
            held.release()
            report["release"] = "released"
        except leasehold.LeaseLostError as e:
            report["release"] = e.kind
        with client.mutex(f"{name}:child") as mine:
            report["child_fence"] = mine.fence
        return report

    report = in_child(child)
    assert report["lost"] is True
    assert "forked" in report["reason"]
    assert report["try_parents"] and report["try_reentrant"]
    assert report["release"] == "not_held"
    assert report["child_fence"] > 0
    # The parent still holds both, and its client still works.
    assert not held.lost
    assert client.mutex(name).inspect().held
    held.release()
    owned.release()


class _Leave(Exception):
    pass


def test_a_with_block_left_in_the_child_releases_nothing(client: leasehold.Client, name: str) -> None:
    mutex = client.mutex(name)
    pid = -1
    try:
        with mutex as guard:
            pid = os.fork()
            if pid == 0:
                # The child leaves the parent's with block, as an exception would.
                raise _Leave()
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            assert not guard.lost
            assert mutex.inspect().held
    except _Leave:
        os._exit(0 if pid == 0 and guard.lost and not guard.released else 1)
    except BaseException:
        if pid == 0:
            os._exit(2)
        raise
    assert guard.released and not guard.lost


def test_child_of_a_child(client: leasehold.Client, name: str) -> None:
    client.mutex(name).acquire().release()

    def child() -> Dict[str, Any]:
        fence = client.mutex(name).acquire(timeout=10)
        fence.release()
        return in_child(lambda: {"fence": client.mutex(name).acquire(timeout=10).fence}) | {
            "first": fence.fence
        }

    report = in_child(child)
    assert report["fence"] > report["first"]


def test_a_guard_dropped_in_the_child_stays_the_parents(client: leasehold.Client, name: str) -> None:
    guard = client.mutex(name).acquire()

    def child() -> Dict[str, Any]:
        nonlocal guard
        del guard
        import gc

        gc.collect()
        leasehold.Client(client.url).flush()
        return {}

    in_child(child)
    assert client.mutex(name).inspect().held


_COUNTED: Dict[str, Any] = {}


def _count(_: int) -> int:
    client: leasehold.Client = _COUNTED["client"]
    server = _COUNTED["server"]
    name: str = _COUNTED["name"]
    for _ in range(10):
        with client.mutex(name).acquire(timeout=60):
            value = int(server.get(f"{name}:n") or 0)
            server.set(f"{name}:n", value + 1)
    return os.getpid()


@pytest.mark.skipif(sys.platform != "linux", reason="the fork start method")
def test_multiprocessing_fork_pool(client: leasehold.Client, server: RedisServer, name: str) -> None:
    # The client has connections and a runtime thread before the fork.
    client.mutex(name).acquire().release()
    _COUNTED.update(client=client, server=server.client, name=name)
    context = multiprocessing.get_context("fork")
    with context.Pool(4) as pool:
        pids = pool.map(_count, range(8))
    assert os.getpid() not in pids
    assert int(server.client.get(f"{name}:n") or 0) == 80
    assert threading.active_count() >= 1
