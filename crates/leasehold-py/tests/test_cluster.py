"""Every primitive on a Redis Cluster of three masters."""

from __future__ import annotations

import asyncio
import threading
from typing import List

import pytest

import leasehold
import leasehold.asyncio
from servers import RedisCluster


@pytest.fixture
def cclient(cluster: RedisCluster) -> leasehold.Client:
    # A seed list, as the command line takes it (any node will do).
    return leasehold.Client(cluster.urls)


def test_locks_spread_over_the_masters(cclient: leasehold.Client, cluster: RedisCluster, name: str) -> None:
    servers = set()
    for i in range(12):
        mutex = cclient.mutex(f"{name}:{i}")
        with mutex as guard:
            info = mutex.inspect()
            assert info.held and info.last_fence == guard.fence
            servers.add(info.server)
            assert leasehold.Client(cluster.urls[i % 3]).mutex(f"{name}:{i}").try_acquire() is None
    assert len(servers) == 3


def test_every_primitive_on_a_cluster(cclient: leasehold.Client, cluster: RedisCluster, name: str) -> None:
    other = leasehold.Client(cluster.urls[1])
    with cclient.fair_mutex(f"{name}:fair") as fair:
        assert other.fair_mutex(f"{name}:fair").try_acquire() is None
    assert fair.released
    with cclient.reentrant_mutex(f"{name}:re") as outer:
        with cclient.reentrant_mutex(f"{name}:re") as inner:
            assert inner.fence == outer.fence
    rw = cclient.rw_lock(f"{name}:rw")
    with rw.read(), other.rw_lock(f"{name}:rw").read():
        assert leasehold.Client(cluster.urls[2]).rw_lock(f"{name}:rw").write().try_acquire() is None
    sem = cclient.semaphore(f"{name}:sem", 2)
    with sem.acquire(permits=2):
        assert other.semaphore(f"{name}:sem", 2).try_acquire() is None
    election = cclient.election(f"{name}:e")
    with election.campaign("me", timeout=10) as leadership:
        assert other.election(f"{name}:e").leader() == leasehold.Leader("me", leadership.fence)
    multi = leasehold.MultiLock([cclient.mutex(f"{name}:a{i}") for i in range(6)])
    with multi as guard:
        assert len(guard.fences) == 6


def test_contention_on_a_cluster(cclient: leasehold.Client, name: str) -> None:
    fences: List[int] = []

    def work() -> None:
        for _ in range(10):
            with cclient.mutex(name).acquire(timeout=60) as guard:
                fences.append(guard.fence)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(fences) == 40 and fences == sorted(fences)


def test_asyncio_on_a_cluster(cluster: RedisCluster, name: str) -> None:
    async def main() -> None:
        client = leasehold.asyncio.Client(cluster.urls)
        async with client.mutex(name) as guard:
            assert await leasehold.asyncio.Client(cluster.urls[2]).mutex(name).try_acquire() is None
        assert guard.released

    asyncio.run(main())
