"""The asyncio face, as ``redis.asyncio`` is redis-py's: the same locks with
awaitables, ``async with lock as guard:``, running on the caller's event
loop (the I/O runs on leasehold's own thread; results come back to the loop).

>>> async def main() -> None:
...     client = leasehold.asyncio.Client("redis://127.0.0.1:6379")
...     async with client.mutex("reports:nightly") as guard:
...         await write_report(guard.fence)

The owner of a reentrant or read-write hold is the calling asyncio task (or
the ``owner`` the lock was made with). Cancelling a task that waits for a
lock leaves nothing held. Unlike the blocking client, a task that holds a
``Mutex`` and asks for it again is not refused with ``ConflictError``: it
waits for itself, so bound such a wait with ``timeout``.
"""

from __future__ import annotations

from types import TracebackType
from typing import AsyncIterator, Optional, TypeVar

from . import _surface
from ._common import Leader, leader
from ._face import Acquiring as Acquiring
from . import _face
from ._face import ExcType, release_at_exit_async

__all__ = [
    "Client",
    "Redlock",
    "Lock",
    "Mutex",
    "FairMutex",
    "ReentrantMutex",
    "RwLock",
    "ReadLock",
    "WriteLock",
    "Semaphore",
    "RedlockMutex",
    "MultiLock",
    "Guard",
    "MultiGuard",
    "Leadership",
    "Election",
    "LeaderWatch",
]

GuardT = TypeVar("GuardT", bound="Guard")


class Guard(_surface.Guard, _face.Asyncio):
    __slots__ = ()

    async def __aenter__(self: GuardT) -> GuardT:
        return self

    async def __aexit__(self, exc_type: ExcType, exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await release_at_exit_async(self._native, exc is not None)


class MultiGuard(_surface.MultiGuard, Guard):
    __slots__ = ()


class Leadership(_surface.Leadership, Guard):
    __slots__ = ()


class Lock(_surface.Lock[Guard], _face.Asyncio):
    __slots__ = ()
    _Guard = Guard

    async def __aenter__(self) -> Guard:
        return self._held.push(await self.acquire())

    async def __aexit__(self, exc_type: ExcType, exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await release_at_exit_async(self._held.pop()._native, exc is not None)


class Mutex(_surface.Mutex[Guard], Lock):
    __slots__ = ()


class FairMutex(_surface.FairMutex[Guard], Lock):
    __slots__ = ()


class ReentrantMutex(_surface.ReentrantMutex[Guard], Lock):
    __slots__ = ()


class ReadLock(_surface.ReadLock[Guard], Lock):
    __slots__ = ()


class WriteLock(_surface.WriteLock[Guard], Lock):
    __slots__ = ()


class Semaphore(_surface.Semaphore[Guard], Lock):
    __slots__ = ()


class RedlockMutex(_surface.RedlockMutex[Guard], Lock):
    __slots__ = ()


class RwLock(_surface.RwLock[ReadLock, WriteLock], _face.Asyncio):
    __slots__ = ()
    _ReadLock = ReadLock
    _WriteLock = WriteLock


class MultiLock(_surface.MultiLock[Lock, MultiGuard], _face.Asyncio):
    __slots__ = ()
    _MultiGuard = MultiGuard

    async def __aenter__(self) -> MultiGuard:
        return self._held.push(await self.acquire())

    async def __aexit__(self, exc_type: ExcType, exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await release_at_exit_async(self._held.pop()._native, exc is not None)


class LeaderWatch(_surface.LeaderWatch, _face.Asyncio):
    __slots__ = ()

    async def __aiter__(self) -> AsyncIterator[Optional[Leader]]:
        yield self.leader
        while True:
            _, now = await self._native.changed(None)
            yield leader(now)


class Election(_surface.Election[Leadership, LeaderWatch], _face.Asyncio):
    __slots__ = ()
    _Leadership = Leadership
    _LeaderWatch = LeaderWatch


class Client(_surface.Client[Mutex, FairMutex, ReentrantMutex, RwLock, Semaphore, Election], _face.Asyncio):
    __slots__ = ()
    _Mutex = Mutex
    _FairMutex = FairMutex
    _ReentrantMutex = ReentrantMutex
    _RwLock = RwLock
    _Semaphore = Semaphore
    _Election = Election

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, exc_type: ExcType, exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await self.flush()


class Redlock(_surface.Redlock[RedlockMutex], _face.Asyncio):
    __slots__ = ()
    _RedlockMutex = RedlockMutex
