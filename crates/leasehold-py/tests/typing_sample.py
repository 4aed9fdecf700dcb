"""Checked by mypy (test_typing.py), never run: the typed surface as a user
writes against it. ``assert_type`` asks for the exact type (an assignment
would take Any as well)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Coroutine, List, Optional

from typing_extensions import assert_type

import leasehold
import leasehold.asyncio
from leasehold.asyncio import Acquiring


def blocking(client: leasehold.Client) -> int:
    mutex: leasehold.Mutex = client.mutex("m", lease=30, watchdog=True)
    with mutex as guard:
        fence: int = guard.fence
        lost: bool = guard.lost
        reason: Optional[str] = guard.lost_reason
        guard.extend(timedelta(seconds=60))
        ended: bool = guard.wait_lost(timeout=0.1)
    attempt: Optional[leasehold.Guard] = mutex.try_acquire()
    with client.rw_lock("rw").read().acquire(timeout=5):
        pass
    permits: int = client.semaphore("s", 4).available()
    levels: int = client.reentrant_mutex("r").hold_count()
    both: leasehold.MultiGuard = leasehold.MultiLock([mutex, client.fair_mutex("f")]).acquire()
    fences: List[int] = both.fences
    leadership: leasehold.Leadership = client.election("e").campaign("me", timeout=1.5)
    leader: Optional[leasehold.Leader] = client.election("e").leader()
    watch: leasehold.LeaderWatch = client.election("e").observe()
    for now in watch:
        leader = now
        break
    changed: bool = watch.wait_change(timeout=1)
    info: leasehold.LockInfo = mutex.inspect()
    red: leasehold.RedlockMutex = leasehold.Redlock(["redis://a", "redis://b", "redis://c"]).mutex("x")
    try:
        red.acquire(timeout=1).release()
    except leasehold.LockTimeoutError as e:
        kind: str = e.kind
    del lost, reason, ended, attempt, permits, levels, fences, leadership, leader, info, changed
    assert_type(client.rw_lock("rw").write().acquire(), leasehold.Guard)
    assert_type(client.rw_lock("rw").inspect(), leasehold.LockInfo)
    assert_type(client.semaphore("s", 2).try_acquire(permits=2), Optional[leasehold.Guard])
    assert_type(client.election("e").campaign("me"), leasehold.Leadership)
    assert_type(mutex.force_release(), bool)
    assert_type(client.flush(), None)
    with client.election("e").campaign("me") as leading:
        assert_type(leading, leasehold.Leadership)
    return fence


async def asynchronous(client: leasehold.asyncio.Client) -> int:
    mutex: leasehold.asyncio.Mutex = client.mutex("m")
    async with mutex as guard:
        await guard.extend(10)
        ended: bool = await guard.wait_lost(timeout=1)
    async with mutex.acquire(timeout=5) as second:
        fence: int = second.fence
    third: leasehold.asyncio.Guard = await mutex.acquire()
    await third.release()
    attempt: Optional[leasehold.asyncio.Guard] = await mutex.try_acquire()
    both = await leasehold.asyncio.MultiLock([mutex]).acquire()
    fences: List[int] = both.fences
    async with client.election("e").campaign("me") as leadership:
        value: str = leadership.value
    awatch: leasehold.asyncio.LeaderWatch = await client.election("e").observe()
    async for following in awatch:
        value = following.value if following else ""
        break
    await client.flush()
    del ended, attempt, fences, value, guard
    assert_type(mutex.acquire(timeout=1), Acquiring[leasehold.asyncio.Guard])
    pending = assert_type(mutex.inspect(), Coroutine[Any, Any, leasehold.LockInfo])
    assert_type(await pending, leasehold.LockInfo)
    assert_type(await client.semaphore("s", 2).acquire(permits=2), leasehold.asyncio.Guard)
    assert_type(await client.rw_lock("rw").read().hold_count(), int)
    assert_type(client.election("e").campaign("me"), Acquiring[leasehold.asyncio.Leadership])
    assert_type(await client.election("e").leader(), Optional[leasehold.Leader])
    assert_type(await leasehold.asyncio.MultiLock([mutex]).try_acquire(), Optional[leasehold.asyncio.MultiGuard])
    assert_type(await leasehold.asyncio.Redlock().mutex("x").acquire(), leasehold.asyncio.Guard)
    return fence
