"""Every primitive through the blocking client, on one server."""

from __future__ import annotations

import gc
import os
import threading
from datetime import timedelta
from typing import List

import pytest

import leasehold
from servers import RedisServer


def in_thread(call: "object") -> object:
    """Runs `call` on another thread (another owner, another holder) and
    returns what it returned."""
    out: List[object] = []
    errors: List[BaseException] = []

    def run() -> None:
        try:
            out.append(call())  # type: ignore[operator]
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return out[0]


def test_mutex_excludes_and_fences_grow(client: leasehold.Client, name: str) -> None:
    mutex = client.mutex(name)
    with mutex as first:
        assert isinstance(first, leasehold.Guard)
        assert not first.lost and first.lost_reason is None
        assert first.valid_for > 0
        assert in_thread(client.mutex(name).try_acquire) is None
        other = leasehold.Client(client.url).mutex(name)
        assert other.try_acquire() is None
    assert first.released
    second = mutex.acquire(timeout=1)
    assert second.fence > first.fence
    second.release()


def test_acquire_timeout_raises_a_timeout_error(client: leasehold.Client, name: str) -> None:
    holder = client.mutex(name).acquire()
    waiter = leasehold.Client(client.url).mutex(name)
    with pytest.raises(leasehold.LockTimeoutError) as raised:
        waiter.acquire(timeout=timedelta(milliseconds=200))
    assert raised.value.kind == "timeout"
    assert isinstance(raised.value, TimeoutError)
    holder.release()
    with waiter.acquire(timeout=5) as guard:
        assert guard.fence > holder.fence


def test_client_wait_is_the_default_bound(server: RedisServer, name: str) -> None:
    holder = leasehold.Client(server.url).mutex(name).acquire()
    bounded = leasehold.Client(server.url, wait=0.2).mutex(name)
    with pytest.raises(leasehold.LockTimeoutError):
        with bounded:
            pass
    holder.release()


def test_own_second_attempt_is_a_conflict(client: leasehold.Client, name: str) -> None:
    mutex = client.mutex(name)
    with mutex:
        with pytest.raises(leasehold.ConflictError) as raised:
            mutex.try_acquire()
        assert raised.value.kind == "conflict"


def test_guard_release_reports_a_lost_lease(client: leasehold.Client, name: str) -> None:
    mutex = client.mutex(name)
    guard = mutex.acquire()
    assert mutex.force_release()
    assert guard.wait_lost(timeout=30)
    assert guard.lost
    assert guard.lost_reason and "token" in guard.lost_reason
    with pytest.raises(leasehold.LeaseLostError) as raised:
        guard.release()
    assert raised.value.kind == "not_held"


def test_wait_lost_ends_on_release_and_timeout(client: leasehold.Client, name: str) -> None:
    guard = client.mutex(name).acquire()
    assert guard.wait_lost(timeout=0.05) is False
    results: List[bool] = []
    watcher = threading.Thread(target=lambda: results.append(guard.wait_lost()))
    watcher.start()
    guard.release()
    watcher.join()
    assert results == [False]
    assert not guard.lost


def test_extend_and_fixed_lease(client: leasehold.Client, name: str) -> None:
    guard = client.mutex(name, lease=0.5, watchdog=False).acquire()
    guard.extend(60)
    assert guard.valid_for > 30
    guard.release()
    with pytest.raises(leasehold.LeaseLostError):
        guard.extend(1)


def test_a_fixed_lease_runs_out(client: leasehold.Client, name: str) -> None:
    guard = client.mutex(name, lease=0.05, watchdog=False).acquire()
    assert guard.wait_lost(timeout=30)
    assert client.mutex(name).acquire(timeout=30).fence > guard.fence


def test_fair_mutex_serves_in_arrival_order(client: leasehold.Client, name: str) -> None:
    holder = client.fair_mutex(name).acquire()
    order: List[int] = []
    threads = []
    for i in range(3):
        waiter = leasehold.Client(client.url).fair_mutex(name)

        def wait(i: int = i, waiter: leasehold.FairMutex = waiter) -> None:
            with waiter.acquire(timeout=30):
                order.append(i)

        thread = threading.Thread(target=wait)
        thread.start()
        # Each waiter is in line before the next one starts.
        while client.fair_mutex(name).inspect().waiting_clients < i + 1:
            pass
        threads.append(thread)
    holder.release()
    for thread in threads:
        thread.join()
    assert order == [0, 1, 2]


def test_reentrant_mutex_nests_per_thread(client: leasehold.Client, name: str) -> None:
    lock = client.reentrant_mutex(name)
    with lock as outer:
        with client.reentrant_mutex(name) as inner:
            assert inner.fence == outer.fence
            assert lock.hold_count() == 2
        assert lock.hold_count() == 1
        assert in_thread(lock.try_acquire) is None
    assert lock.hold_count() == 0
    assert in_thread(lambda: lock.try_acquire() is not None)


def test_fair_reentrant_mutex_nests_per_thread(client: leasehold.Client, name: str) -> None:
    lock = client.reentrant_mutex(name, fair=True)
    with lock as outer:
        with client.reentrant_mutex(name, fair=True) as inner:
            assert inner.fence == outer.fence
            assert lock.hold_count() == 2
        assert lock.hold_count() == 1
        assert in_thread(lock.try_acquire) is None
    assert lock.hold_count() == 0
    guard = in_thread(lock.try_acquire)
    assert isinstance(guard, leasehold.Guard)
    assert guard.fence > outer.fence
    guard.release()


def test_named_owner_is_shared_across_threads(client: leasehold.Client, name: str) -> None:
    lock = client.reentrant_mutex(name, owner="job-42")
    with lock:
        nested = in_thread(lock.try_acquire)
        assert isinstance(nested, leasehold.Guard)
        nested.release()


def test_rw_lock_readers_share_writers_exclude(client: leasehold.Client, name: str) -> None:
    rw = client.rw_lock(name)
    with rw.read() as a:
        b = in_thread(rw.read().try_acquire)
        assert isinstance(b, leasehold.Guard)
        assert in_thread(rw.write().try_acquire) is None
        with pytest.raises(leasehold.ConflictError):
            rw.write().try_acquire()
        b.release()
    with rw.write() as w:
        assert in_thread(rw.read().try_acquire) is None
        # The writer's own read: a downgrade.
        with rw.read() as r:
            assert r.fence >= w.fence
        assert rw.write().hold_count() == 1
    assert rw.inspect().held is False


def test_rw_lock_one_side_released_by_force(client: leasehold.Client, name: str) -> None:
    rw = client.rw_lock(name)
    reader = in_thread(rw.read().acquire)
    assert isinstance(reader, leasehold.Guard)
    assert rw.force_release_writer() is False
    assert rw.force_release_readers() is True
    assert rw.inspect().held is False
    writer = rw.write().acquire()
    assert rw.force_release_readers() is False
    assert rw.inspect().held is True
    assert rw.force_release_writer() is True
    assert rw.inspect().held is False
    with pytest.raises(leasehold.LeaseLostError):
        writer.release()


def test_semaphore_bounds_its_holders(client: leasehold.Client, name: str) -> None:
    sem = client.semaphore(name, 3)
    assert sem.permits == 3
    two = sem.acquire(permits=2)
    assert two.permits == 2
    one = sem.try_acquire()
    assert one is not None
    assert sem.try_acquire() is None
    assert sem.available() == 0
    info = sem.inspect()
    assert info.permits == 3 and len(info.holders) == 2
    two.release()
    assert sem.available() == 2
    one.release()
    with pytest.raises(leasehold.ConflictError):
        client.semaphore(name, 4).try_acquire()


def test_semaphore_try_set_permits(client: leasehold.Client, name: str) -> None:
    sem = client.semaphore(name, 3)
    assert sem.try_set_permits(3, lifetime=timedelta(minutes=10)) is True
    assert sem.try_set_permits(5) is False
    assert sem.inspect().permits == 3
    with pytest.raises(leasehold.InvalidInputError):
        client.semaphore(name + "-x", 1).try_set_permits(1, lifetime=0)


def test_election(client: leasehold.Client, name: str) -> None:
    election = client.election(name, lease=5)
    assert election.leader() is None
    with election.campaign("host-a:8080", timeout=5) as leadership:
        assert isinstance(leadership, leasehold.Leadership)
        assert leadership.value == "host-a:8080"
        leader = election.leader()
        assert leader == leasehold.Leader("host-a:8080", leadership.fence)
        rival = leasehold.Client(client.url).election(name)
        with pytest.raises(leasehold.LockTimeoutError):
            rival.campaign("host-b:8080", timeout=0.2)
    assert election.leader() is None


def test_multi_lock_takes_all_or_none(client: leasehold.Client, name: str) -> None:
    a, b = client.mutex(f"{name}:a"), client.mutex(f"{name}:b")
    multi = leasehold.MultiLock([b, a])
    with multi as guard:
        assert isinstance(guard, leasehold.MultiGuard)
        assert len(guard.fences) == 2
        other = leasehold.Client(client.url)
        assert other.mutex(f"{name}:a").try_acquire() is None
    blocker = leasehold.Client(client.url).mutex(f"{name}:b").acquire()
    assert multi.try_acquire() is None
    # Nothing of the failed attempt is left held.
    assert a.try_acquire() is not None
    blocker.release()
    with pytest.raises(leasehold.InvalidInputError):
        leasehold.MultiLock([a, client.mutex(f"{name}:a")]).try_acquire()


def test_redlock_over_three_masters(name: str) -> None:
    masters = [RedisServer() for _ in range(3)]
    try:
        redlock = leasehold.Redlock([m.url for m in masters], lease=10)
        assert redlock.quorum == 2
        assert len(redlock.addresses) == 3
        mutex = redlock.mutex(name)
        with mutex as guard:
            assert isinstance(mutex, leasehold.RedlockMutex)
            other = leasehold.Redlock([m.url for m in masters]).mutex(name)
            assert other.try_acquire() is None
        with mutex.acquire(timeout=5) as second:
            assert second.fence > guard.fence
        masters[0].stop()
        masters[1].stop()
        with pytest.raises(leasehold.QuorumError):
            mutex.acquire(timeout=5)
    finally:
        for master in masters:
            master.stop()


def test_release_token_from_elsewhere(client: leasehold.Client, name: str) -> None:
    guard = client.mutex(name, watchdog=False).acquire()
    other = leasehold.Client(client.url).mutex(name)
    other.extend_token(guard.token, 60)
    other.release_token(guard.token)
    assert other.try_acquire() is not None


def test_inspect_names_the_holder(client: leasehold.Client, name: str) -> None:
    mutex = client.mutex(name)
    info = mutex.inspect()
    assert info.held is False and info.holders == ()
    with mutex as guard:
        info = mutex.inspect()
        assert info.held and info.kind == "mutex"
        assert info.last_fence == guard.fence
        assert info.holders[0].pid == os.getpid()
        assert info.read_at is not None



def test_election_observe_follows_the_leader(client: leasehold.Client, name: str) -> None:
    election = client.election(name)
    watch = election.observe()
    assert watch.leader is None
    assert watch.wait_change(timeout=0.05) is False
    seen = iter(watch)
    assert next(seen) is None
    leadership = leasehold.Client(client.url).election(name).campaign("host-a", timeout=5)
    assert next(seen) == leasehold.Leader("host-a", leadership.fence)
    leadership.resign()
    assert next(seen) is None


def test_a_dropped_guard_is_released_in_the_background(client: leasehold.Client, name: str) -> None:
    guard = client.mutex(name).acquire()
    fence = guard.fence
    del guard
    gc.collect()
    client.flush()
    taken = leasehold.Client(client.url).mutex(name).try_acquire()
    assert taken is not None and taken.fence > fence
