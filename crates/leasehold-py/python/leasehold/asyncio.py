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

import asyncio
import itertools
import os
import weakref
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Generic,
    List,
    Optional,
    Sequence,
    Type,
    TypeVar,
    Union,
)

from . import _native
from ._common import (
    DEFAULT,
    Leader,
    LockInfo,
    Seconds,
    _Default,
    leader,
    lock_settings,
    redlock_urls,
    resolve_url,
    tls_root,
)
from ._sync import _CLIENTS

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

Wait = Union[Seconds, None, _Default]
G = TypeVar("G", bound="Guard")

_TASK_KEYS: "weakref.WeakKeyDictionary[asyncio.Task[Any], str]" = weakref.WeakKeyDictionary()
_NEXT_KEY = itertools.count()


def _task_key() -> Optional[str]:
    """The calling task's key, for its owner id (None outside a task)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return None
    if task is None:
        return None
    key = _TASK_KEYS.get(task)
    if key is None:
        key = str(next(_NEXT_KEY))
        _TASK_KEYS[task] = key
    return key


class Guard:
    """A held lease: its fence, whether it is lost, and its release.
    ``async with`` releases it at the end of the block."""

    __slots__ = ("_native", "__weakref__")

    def __init__(self, native: _native.Guard) -> None:
        self._native = native

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._native.name

    @property
    def fence(self) -> int:
        """The fence of this acquisition: larger than every fence before it."""
        return self._native.fence

    @property
    def token(self) -> str:
        """The random token that identifies this lease in Redis."""
        return self._native.token

    @property
    def permits(self) -> int:
        """Semaphore permits this lease holds (1 for the other locks)."""
        return self._native.permits

    @property
    def lost(self) -> bool:
        """The lease was lost; once true, stays true."""
        return self._native.lost

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the lease was lost, or None while it is held."""
        return self._native.lost_reason

    @property
    def released(self) -> bool:
        """The guard was released."""
        return self._native.released

    @property
    def valid_for(self) -> float:
        """Seconds before the lease runs out if no renewal comes; 0 once lost."""
        return self._native.valid_for

    async def extend(self, lease: Seconds) -> None:
        """Sets the lease to ``lease`` from now."""
        await self._native.extend(lease)

    async def release(self) -> None:
        """Releases the lease; raises :class:`LeaseLostError` when it was lost before."""
        await self._native.release()

    async def wait_lost(self, timeout: Optional[Seconds] = None) -> bool:
        """Resolves once the lease is lost (True), or False when ``timeout``
        seconds passed first or the guard was released. Race it against the
        work with :func:`asyncio.wait`."""
        return bool(await self._native.wait_lost(timeout))

    async def __aenter__(self: G) -> G:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await _exit(self._native, exc is not None)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} fence={self.fence} lost={self.lost}>"


async def _exit(native: _native.Guard, failed: bool) -> None:
    if native.forked or native.released:
        return
    try:
        await native.release()
    except Exception:
        if not failed:
            raise


class MultiGuard(Guard):
    """Several leases taken together by a :class:`MultiLock`."""

    __slots__ = ()

    @property
    def fences(self) -> List[int]:
        """The fence of each lock, in the order the locks were given."""
        return self._native.fences


class Leadership(Guard):
    """Leadership of an :class:`Election`."""

    __slots__ = ()

    @property
    def value(self) -> str:
        """The value this leader campaigned with."""
        return self._native.value or ""

    async def resign(self) -> None:
        """Gives up the leadership."""
        await self.release()


class Acquiring(Generic[G]):
    """An acquisition: await it for the guard, or use it with ``async with``
    to release at the end of the block."""

    __slots__ = ("_start", "_guard")

    def __init__(self, start: Callable[[], Awaitable[G]]) -> None:
        self._start = start
        self._guard: Optional[G] = None

    def __await__(self) -> Generator[Any, None, G]:
        return self._start().__await__()

    async def __aenter__(self) -> G:
        self._guard = await self._start()
        return self._guard

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._guard is not None:
            await _exit(self._guard._native, exc is not None)


class _HeldByTask:
    """The guards ``async with lock:`` took, per task."""

    __slots__ = ("_guards",)

    def __init__(self) -> None:
        self._guards: "weakref.WeakKeyDictionary[Any, List[Guard]]" = weakref.WeakKeyDictionary()

    def _list(self) -> List[Guard]:
        task = asyncio.current_task()
        return self._guards.setdefault(task, []) if task is not None else []

    def push(self, guard: Guard) -> None:
        self._list().append(guard)

    def pop(self) -> Guard:
        return self._list().pop()


class Lock:
    """What every kind of lock answers, with awaitables. ``async with lock as
    guard:`` waits as the client's ``wait`` says (forever by default)."""

    __slots__ = ("_native", "_wait", "_held", "_owned")

    def __init__(self, native: _native.Lock, wait: Wait, owned: bool = False) -> None:
        self._native = native
        self._wait = wait
        self._held = _HeldByTask()
        self._owned = owned

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._native.name

    def _task(self) -> Optional[str]:
        return _task_key() if self._owned else None

    def _timeout(self, timeout: Wait) -> Optional[Seconds]:
        chosen = self._wait if isinstance(timeout, _Default) else timeout
        return None if isinstance(chosen, _Default) else chosen

    def acquire(self, timeout: Wait = DEFAULT) -> Acquiring[Guard]:
        """Waits for the lock, at most ``timeout`` seconds (None: as long as it
        takes; left out: the client's ``wait``): ``await lock.acquire()`` or
        ``async with lock.acquire(timeout=5) as guard:``."""

        async def start() -> Guard:
            return Guard(await self._native.acquire(timeout=self._timeout(timeout), task=self._task()))

        return Acquiring(start)

    async def try_acquire(self) -> Optional[Guard]:
        """One attempt: the guard, or None when the lock is taken."""
        native = await self._native.try_acquire(task=self._task())
        return None if native is None else Guard(native)

    async def inspect(self) -> LockInfo:
        """The lock's state as Redis sees it now."""
        return LockInfo._from_native(await self._native.inspect())

    async def force_release(self) -> bool:
        """Removes the lock whoever holds it (an admin action)."""
        return bool(await self._native.force_release())

    async def release_token(self, token: str) -> None:
        """Releases the lease ``token`` holds, taken elsewhere."""
        await self._native.release_token(token, task=self._task())

    async def extend_token(self, token: str, lease: Seconds) -> None:
        """Sets the lease left to ``token`` to ``lease``, if it still holds the lock."""
        await self._native.extend_token(token, lease)

    async def __aenter__(self) -> Guard:
        guard = await self.acquire()
        self._held.push(guard)
        return guard

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await _exit(self._held.pop()._native, exc is not None)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class Mutex(Lock):
    """One holder at a time, fenced (see :class:`leasehold.Mutex`)."""

    __slots__ = ()


class FairMutex(Lock):
    """One holder at a time, in the order the waiters arrived."""

    __slots__ = ()


class _Owned(Lock):
    __slots__ = ()

    def __init__(self, native: _native.Lock, wait: Wait) -> None:
        super().__init__(native, wait, owned=True)

    async def hold_count(self) -> int:
        """How many levels (or read leases) the calling task's owner holds."""
        return int(await self._native.hold_count(task=self._task()))


class ReentrantMutex(_Owned):
    """One owner (the calling task, or ``owner``) at a time, who may take it again."""

    __slots__ = ()


class ReadLock(_Owned):
    """The read side of an :class:`RwLock`."""

    __slots__ = ()


class WriteLock(_Owned):
    """The write side of an :class:`RwLock`."""

    __slots__ = ()


class RwLock:
    """Many readers or one writer."""

    __slots__ = ("_read", "_write")

    def __init__(self, read: ReadLock, write: WriteLock) -> None:
        self._read = read
        self._write = write

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._read.name

    def read(self) -> ReadLock:
        """The read side."""
        return self._read

    def write(self) -> WriteLock:
        """The write side."""
        return self._write

    async def inspect(self) -> LockInfo:
        """The lock's state as Redis sees it now."""
        return await self._read.inspect()

    async def force_release(self) -> bool:
        """Removes every reader and writer (an admin action)."""
        return await self._read.force_release()


class Semaphore(Lock):
    """At most ``permits`` holders at once."""

    __slots__ = ("_permits",)

    def __init__(self, native: _native.Lock, wait: Wait, permits: int) -> None:
        super().__init__(native, wait)
        self._permits = permits

    @property
    def permits(self) -> int:
        """The permit count this handle expects the semaphore to have."""
        return self._permits

    def acquire(self, timeout: Wait = DEFAULT, permits: int = 1) -> Acquiring[Guard]:
        """Waits for ``permits`` permits held by one lease."""

        async def start() -> Guard:
            native = await self._native.acquire(timeout=self._timeout(timeout), permits=permits)
            return Guard(native)

        return Acquiring(start)

    async def try_acquire(self, permits: int = 1) -> Optional[Guard]:
        """One attempt at ``permits`` permits: the guard, or None."""
        native = await self._native.try_acquire(permits=permits)
        return None if native is None else Guard(native)

    async def available(self) -> int:
        """Permits free now, as Redis sees it."""
        return int(await self._native.available())

    async def set_permits(self, permits: int) -> None:
        """Sets the permit count for every user (an admin action)."""
        await self._native.set_permits(permits)


class RedlockMutex(Lock):
    """A mutex over a :class:`Redlock`'s masters."""

    __slots__ = ()


class MultiLock:
    """Several locks taken together, all or none, in the order of their keys."""

    __slots__ = ("_native", "_wait", "_held")

    def __init__(self, locks: Sequence[Lock], *, wait: Wait = DEFAULT) -> None:
        self._native = _native.MultiLock([lock._native for lock in locks])
        self._wait = locks[0]._wait if isinstance(wait, _Default) else wait
        self._held = _HeldByTask()

    def acquire(self, timeout: Wait = DEFAULT) -> Acquiring[MultiGuard]:
        """Waits for every lock, at most ``timeout`` seconds for all of them."""

        async def start() -> MultiGuard:
            chosen = self._wait if isinstance(timeout, _Default) else timeout
            wait = None if isinstance(chosen, _Default) else chosen
            return MultiGuard(await self._native.acquire(timeout=wait, task=_task_key()))

        return Acquiring(start)

    async def try_acquire(self) -> Optional[MultiGuard]:
        """One attempt at every lock: the guard, or None."""
        native = await self._native.try_acquire(task=_task_key())
        return None if native is None else MultiGuard(native)

    async def __aenter__(self) -> MultiGuard:
        guard = await self.acquire()
        self._held.push(guard)
        return guard

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await _exit(self._held.pop()._native, exc is not None)


class Election:
    """One election: at most one leader at a time."""

    __slots__ = ("_native",)

    def __init__(self, native: _native.Election) -> None:
        self._native = native

    @property
    def name(self) -> str:
        """The election's name."""
        return self._native.name

    def campaign(self, value: str, timeout: Optional[Seconds] = None) -> Acquiring[Leadership]:
        """Waits to lead (at most ``timeout`` seconds), then records ``value``."""

        async def start() -> Leadership:
            return Leadership(await self._native.campaign(value, timeout=timeout))

        return Acquiring(start)

    async def leader(self) -> Optional[Leader]:
        """Who leads now, or None."""
        return leader(await self._native.leader())

    async def observe(self) -> "LeaderWatch":
        """Follows who leads (see :meth:`leasehold.Election.observe`)."""
        return LeaderWatch(await self._native.observe())


class LeaderWatch:
    """Who leads an election, kept up to date: ``async for leader in watch``
    gives the leader now and then each change (None: nobody leads)."""

    __slots__ = ("_native",)

    def __init__(self, native: _native.LeaderWatch) -> None:
        self._native = native

    @property
    def leader(self) -> Optional[Leader]:
        """The leader as last seen, or None."""
        return leader(self._native.current())

    async def wait_change(self, timeout: Optional[Seconds] = None) -> bool:
        """Resolves when the leader changes (True), or False when ``timeout``
        seconds passed first."""
        changed, _ = await self._native.changed(timeout)
        return bool(changed)

    async def __aiter__(self) -> AsyncIterator[Optional[Leader]]:
        yield self.leader
        while True:
            _, now = await self._native.changed(None)
            yield leader(now)


class Client:
    """A client of one Redis deployment whose calls return awaitables: the
    same settings as :class:`leasehold.Client`."""

    __slots__ = ("_native", "_wait", "__weakref__")

    def __init__(
        self,
        url: Union[str, Sequence[str], None] = None,
        *,
        prefix: Optional[str] = None,
        lease: Optional[Seconds] = None,
        watchdog: Optional[bool] = None,
        wait: Optional[Seconds] = None,
        command_timeout: Optional[Seconds] = None,
        connect_timeout: Optional[Seconds] = None,
        restart_grace: Optional[Seconds] = None,
        fence_retention: Optional[Seconds] = None,
        name: Optional[str] = None,
        tls_root_certificate: Union[bytes, str, "os.PathLike[str]", None] = None,
        sentinel_username: Optional[str] = None,
        sentinel_password: Optional[str] = None,
    ) -> None:
        self._native = _native.Client(
            resolve_url(url),
            asyncio=True,
            prefix=prefix,
            lease=lease,
            watchdog=watchdog,
            command_timeout=command_timeout,
            connect_timeout=connect_timeout,
            restart_grace=restart_grace,
            fence_retention=fence_retention,
            name=name,
            tls_root_certificate=tls_root(tls_root_certificate),
            sentinel_username=sentinel_username,
            sentinel_password=sentinel_password,
        )
        self._wait: Wait = wait
        _CLIENTS.add(self._native)

    @property
    def url(self) -> str:
        """The URL the client was made with."""
        return self._native.url

    @property
    def prefix(self) -> str:
        """The first part of every key this client writes."""
        return self._native.prefix

    def mutex(
        self,
        name: str,
        *,
        lease: Optional[Seconds] = None,
        watchdog: Optional[bool] = None,
        hold_at_least: Optional[Seconds] = None,
        max_hold: Optional[Seconds] = None,
        replicas: int = 0,
        replica_timeout: Optional[Seconds] = None,
    ) -> Mutex:
        """The mutex called ``name``."""
        settings = lock_settings(lease, watchdog, hold_at_least, max_hold, replicas, replica_timeout)
        return Mutex(self._native.lock("mutex", name, **settings), self._wait)

    def fair_mutex(
        self,
        name: str,
        *,
        lease: Optional[Seconds] = None,
        watchdog: Optional[bool] = None,
        hold_at_least: Optional[Seconds] = None,
        max_hold: Optional[Seconds] = None,
        replicas: int = 0,
        replica_timeout: Optional[Seconds] = None,
    ) -> FairMutex:
        """The fair mutex called ``name``."""
        settings = lock_settings(lease, watchdog, hold_at_least, max_hold, replicas, replica_timeout)
        return FairMutex(self._native.lock("fair_mutex", name, **settings), self._wait)

    def reentrant_mutex(
        self,
        name: str,
        *,
        owner: Optional[str] = None,
        lease: Optional[Seconds] = None,
        watchdog: Optional[bool] = None,
        hold_at_least: Optional[Seconds] = None,
        max_hold: Optional[Seconds] = None,
        replicas: int = 0,
        replica_timeout: Optional[Seconds] = None,
    ) -> ReentrantMutex:
        """The reentrant mutex called ``name``; its owner is the calling task, or ``owner``."""
        settings = lock_settings(lease, watchdog, hold_at_least, max_hold, replicas, replica_timeout)
        native = self._native.lock("reentrant_mutex", name, owner=owner, **settings)
        return ReentrantMutex(native, self._wait)

    def rw_lock(
        self,
        name: str,
        *,
        owner: Optional[str] = None,
        lease: Optional[Seconds] = None,
        watchdog: Optional[bool] = None,
        hold_at_least: Optional[Seconds] = None,
        max_hold: Optional[Seconds] = None,
        replicas: int = 0,
        replica_timeout: Optional[Seconds] = None,
    ) -> RwLock:
        """The read-write lock called ``name``."""
        settings = lock_settings(lease, watchdog, hold_at_least, max_hold, replicas, replica_timeout)
        read = self._native.lock("read", name, owner=owner, **settings)
        write = self._native.lock("write", name, owner=owner, **settings)
        return RwLock(ReadLock(read, self._wait), WriteLock(write, self._wait))

    def semaphore(
        self,
        name: str,
        permits: int,
        *,
        lease: Optional[Seconds] = None,
        watchdog: Optional[bool] = None,
        hold_at_least: Optional[Seconds] = None,
        max_hold: Optional[Seconds] = None,
        replicas: int = 0,
        replica_timeout: Optional[Seconds] = None,
    ) -> Semaphore:
        """The semaphore called ``name`` with ``permits`` permits."""
        settings = lock_settings(lease, watchdog, hold_at_least, max_hold, replicas, replica_timeout)
        native = self._native.lock("semaphore", name, permits=permits, **settings)
        return Semaphore(native, self._wait, permits)

    def election(
        self, name: str, *, lease: Optional[Seconds] = None, max_term: Optional[Seconds] = None
    ) -> Election:
        """The leader election called ``name``."""
        return Election(self._native.election(name, lease=lease, max_term=max_term))

    async def flush(self) -> None:
        """Waits until the releases left to the background are done."""
        await self._native.flush()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.flush()

    def __repr__(self) -> str:
        return f"<leasehold.asyncio.Client {self.url!r}>"


class Redlock:
    """A mutex over independent masters, with awaitables (see :class:`leasehold.Redlock`)."""

    __slots__ = ("_native", "_wait", "__weakref__")

    def __init__(
        self,
        urls: Union[str, Sequence[str], None] = None,
        *,
        prefix: Optional[str] = None,
        lease: Optional[Seconds] = None,
        watchdog: Optional[bool] = None,
        wait: Optional[Seconds] = None,
        command_timeout: Optional[Seconds] = None,
        node_timeout: Optional[Seconds] = None,
        retry_delay: Optional[Seconds] = None,
        restart_grace: Optional[Seconds] = None,
        fence_retention: Optional[Seconds] = None,
        name: Optional[str] = None,
    ) -> None:
        self._native = _native.Redlock(
            redlock_urls(urls),
            asyncio=True,
            prefix=prefix,
            lease=lease,
            watchdog=watchdog,
            command_timeout=command_timeout,
            node_timeout=node_timeout,
            retry_delay=retry_delay,
            restart_grace=restart_grace,
            fence_retention=fence_retention,
            name=name,
        )
        self._wait: Wait = wait
        _CLIENTS.add(self._native)

    @property
    def addresses(self) -> List[str]:
        """The masters, as ``host:port``."""
        return self._native.addresses

    @property
    def quorum(self) -> int:
        """How many masters must hold a lock for it to be held."""
        return self._native.quorum

    def mutex(
        self,
        name: str,
        *,
        lease: Optional[Seconds] = None,
        watchdog: Optional[bool] = None,
        hold_at_least: Optional[Seconds] = None,
        max_hold: Optional[Seconds] = None,
    ) -> RedlockMutex:
        """The mutex called ``name`` over these masters."""
        native = self._native.lock(
            name, lease=lease, watchdog=watchdog, hold_at_least=hold_at_least, max_hold=max_hold
        )
        return RedlockMutex(native, self._wait)

    async def flush(self) -> None:
        """Waits until what this Redlock left to the background is done."""
        await self._native.flush()
