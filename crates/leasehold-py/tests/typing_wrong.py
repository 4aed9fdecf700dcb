"""Checked by mypy (test_typing.py), never run: each line marked ``# wrong``
uses one face as if it were the other, or a result as another type, and
mypy must report it; the lines not marked must pass. A face typed as Any
would let every marked line through."""

from __future__ import annotations

from typing import Optional

import leasehold
import leasehold.asyncio


def blocking(client: leasehold.Client) -> None:
    mutex = client.mutex("m")
    info: int = mutex.inspect()  # wrong
    free: bool = mutex.try_acquire()  # wrong
    mutex.acquire(permits=2)  # wrong
    client.semaphore("s", 2).acquire(permits="2")  # wrong
    leader: leasehold.Leadership = client.election("e").leader()  # wrong
    guard: leasehold.asyncio.Guard = mutex.acquire()  # wrong
    changed: str = client.election("e").observe().wait_change()  # wrong
    del info, free, leader, guard, changed


async def blocking_awaited(client: leasehold.Client) -> None:
    await client.mutex("m").inspect()  # wrong
    await client.flush()  # wrong
    async with client.mutex("m"):  # wrong
        pass


async def asynchronous(client: leasehold.asyncio.Client) -> None:
    mutex = client.mutex("m")
    info: leasehold.LockInfo = mutex.inspect()  # wrong
    guard: leasehold.Guard = await mutex.acquire()  # wrong
    held: Optional[leasehold.asyncio.Guard] = mutex.try_acquire()  # wrong
    count: str = await client.reentrant_mutex("r").hold_count()  # wrong
    await client.semaphore("s", 2).acquire(timeout=1, permits=None)  # wrong
    lost: bool = (await mutex.acquire()).wait_lost()  # wrong
    with mutex:  # wrong
        pass
    for _ in await client.election("e").observe():  # wrong
        pass
    del info, guard, held, count, lost
