"""The asyncio client: awaitables on the caller's loop."""

from __future__ import annotations

import asyncio
from typing import List

import pytest

import leasehold
import leasehold.asyncio
from servers import RedisServer


def test_async_with_and_await(aclient: leasehold.asyncio.Client, name: str) -> None:
    async def main() -> None:
        mutex = aclient.mutex(name)
        async with mutex as guard:
            assert isinstance(guard, leasehold.asyncio.Guard)
            assert await leasehold.asyncio.Client(aclient.url).mutex(name).try_acquire() is None
        async with mutex.acquire(timeout=5) as second:
            assert second.fence > guard.fence
        assert second.released
        third = await mutex.acquire(timeout=5)
        await third.extend(10)
        await third.release()
        info = await mutex.inspect()
        assert info.held is False

    asyncio.run(main())


def test_tasks_exclude_each_other(server: RedisServer, name: str) -> None:
    async def main() -> None:
        client = leasehold.asyncio.Client(server.url)
        inside = 0
        most = 0

        async def work() -> None:
            nonlocal inside, most
            for _ in range(10):
                async with client.mutex(name).acquire(timeout=30):
                    inside += 1
                    most = max(most, inside)
                    await asyncio.sleep(0.001)
                    inside -= 1

        await asyncio.gather(*(work() for _ in range(8)))
        assert most == 1

    asyncio.run(main())


def test_timeout_and_cancel_leave_nothing_held(server: RedisServer, name: str) -> None:
    async def main() -> None:
        holder = leasehold.asyncio.Client(server.url)
        waiter = leasehold.asyncio.Client(server.url)
        guard = await holder.mutex(name).acquire()
        with pytest.raises(leasehold.LockTimeoutError):
            await waiter.mutex(name).acquire(timeout=0.1)
        task = asyncio.ensure_future(waiter.mutex(name).acquire())
        while (await holder.mutex(name).inspect()).waiting_clients == 0:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await guard.release()
        await waiter.flush()
        again = await holder.mutex(name).acquire(timeout=10)
        assert again.fence > guard.fence
        await again.release()

    asyncio.run(main())


def test_reentrant_owner_is_the_task(aclient: leasehold.asyncio.Client, name: str) -> None:
    async def main() -> None:
        lock = aclient.reentrant_mutex(name)
        async with lock as outer:
            async with aclient.reentrant_mutex(name) as inner:
                assert inner.fence == outer.fence
                assert await lock.hold_count() == 2

            async def other() -> bool:
                return await lock.try_acquire() is None

            assert await asyncio.create_task(other())

    asyncio.run(main())


def test_every_primitive(aclient: leasehold.asyncio.Client, name: str) -> None:
    async def main() -> None:
        async with aclient.fair_mutex(f"{name}:f") as fair:
            assert fair.fence > 0
        rw = aclient.rw_lock(f"{name}:rw")
        async with rw.read() as r1, rw.read() as r2:
            assert r1.fence == r2.fence
            with pytest.raises(leasehold.ConflictError):
                await rw.write().try_acquire()

            async def writer() -> bool:
                return await rw.write().try_acquire() is None

            assert await asyncio.create_task(writer())
        sem = aclient.semaphore(f"{name}:s", 2)
        async with sem.acquire(permits=2) as two:
            assert two.permits == 2
            assert await sem.try_acquire() is None
            assert await sem.available() == 0
        multi = leasehold.asyncio.MultiLock([aclient.mutex(f"{name}:a"), aclient.mutex(f"{name}:b")])
        async with multi as both:
            assert len(both.fences) == 2
        election = aclient.election(f"{name}:e")
        async with election.campaign("me", timeout=5) as leadership:
            assert (await election.leader()) == leasehold.Leader("me", leadership.fence)
        assert await election.leader() is None

    asyncio.run(main())


def test_wait_lost_is_awaitable(aclient: leasehold.asyncio.Client, name: str) -> None:
    async def main() -> None:
        guard = await aclient.mutex(name).acquire()
        assert await guard.wait_lost(timeout=0.05) is False
        assert await aclient.mutex(name).force_release()
        assert await guard.wait_lost(timeout=30)
        assert guard.lost
        with pytest.raises(leasehold.LeaseLostError):
            await guard.release()

    asyncio.run(main())


def test_the_loop_runs_while_a_call_waits(aclient: leasehold.asyncio.Client, name: str) -> None:
    async def main() -> None:
        holder = await leasehold.asyncio.Client(aclient.url).mutex(name).acquire()
        ticks: List[int] = []

        async def tick() -> None:
            while True:
                ticks.append(1)
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        waiting = asyncio.create_task(aclient.mutex(name).acquire(timeout=30).__aenter__())
        while len(ticks) < 5:
            await asyncio.sleep(0.01)
        assert not waiting.done()
        await holder.release()
        guard = await waiting
        await guard.release()
        ticker.cancel()

    asyncio.run(main())


def test_election_observe_async(aclient: leasehold.asyncio.Client, name: str) -> None:
    async def main() -> None:
        election = aclient.election(name)
        watch = await election.observe()
        assert watch.leader is None
        leadership = await leasehold.asyncio.Client(aclient.url).election(name).campaign("b")
        assert await watch.wait_change(timeout=30)
        assert watch.leader == leasehold.Leader("b", leadership.fence)
        await leadership.resign()
        seen = []
        async for leader in watch:
            seen.append(leader)
            if leader is None:
                break
        assert seen[-1] is None

    asyncio.run(main())
