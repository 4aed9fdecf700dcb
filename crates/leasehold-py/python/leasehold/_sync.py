"""The blocking face: every call blocks the calling thread (with the GIL
released) until Redis answered or the wait ended. The classes are those of
``_surface``, with ``with`` and iteration."""

from __future__ import annotations

from types import TracebackType
from typing import Iterator, Optional, TypeVar

from . import _surface
from ._common import Leader, leader
from . import _face
from ._face import ExcType, release_at_exit

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


class Guard(_surface.Guard, _face.Blocking):
    __slots__ = ()

    def __enter__(self: GuardT) -> GuardT:
        return self

    def __exit__(self, exc_type: ExcType, exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        release_at_exit(self._native, exc is not None)


class MultiGuard(_surface.MultiGuard, Guard):
    __slots__ = ()


class Leadership(_surface.Leadership, Guard):
    __slots__ = ()


class Lock(_surface.Lock[Guard], _face.Blocking):
    __slots__ = ()
    _Guard = Guard

    def __enter__(self) -> Guard:
        return self._held.push(self.acquire())

    def __exit__(self, exc_type: ExcType, exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        release_at_exit(self._held.pop()._native, exc is not None)


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


class RwLock(_surface.RwLock[ReadLock, WriteLock], _face.Blocking):
    __slots__ = ()
    _ReadLock = ReadLock
    _WriteLock = WriteLock


class MultiLock(_surface.MultiLock[Lock, MultiGuard], _face.Blocking):
    __slots__ = ()
    _MultiGuard = MultiGuard

    def __enter__(self) -> MultiGuard:
        return self._held.push(self.acquire())

    def __exit__(self, exc_type: ExcType, exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        release_at_exit(self._held.pop()._native, exc is not None)


class LeaderWatch(_surface.LeaderWatch, _face.Blocking):
    __slots__ = ()

    def __iter__(self) -> Iterator[Optional[Leader]]:
        yield self.leader
        while True:
            _, now = self._native.changed(None)
            yield leader(now)


class Election(_surface.Election[Leadership, LeaderWatch], _face.Blocking):
    __slots__ = ()
    _Leadership = Leadership
    _LeaderWatch = LeaderWatch


class Client(_surface.Client[Mutex, FairMutex, ReentrantMutex, RwLock, Semaphore, Election], _face.Blocking):
    __slots__ = ()
    _Mutex = Mutex
    _FairMutex = FairMutex
    _ReentrantMutex = ReentrantMutex
    _RwLock = RwLock
    _Semaphore = Semaphore
    _Election = Election

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: ExcType, exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.flush()


class Redlock(_surface.Redlock[RedlockMutex], _face.Blocking):
    __slots__ = ()
    _RedlockMutex = RedlockMutex
