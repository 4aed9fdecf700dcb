"""The blocking face: every call blocks the calling thread (with the GIL
released) until Redis answered or the wait ended."""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from types import TracebackType
from typing import Any, Iterator, List, Optional, Sequence, Type, Union

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


class Guard:
    """A held lease: its fence, whether it is lost, and its release.

    A guard is a context manager: ``with lock.acquire(timeout=5) as guard:``
    releases it at the end of the block. Dropped without a release, the lock
    is released in the background; a process that ends first leaves it until
    its lease runs out.
    """

    __slots__ = ("_native", "__weakref__")

    def __init__(self, native: _native.Guard) -> None:
        self._native = native

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._native.name

    @property
    def fence(self) -> int:
        """The fence of this acquisition: larger than every fence handed out
        before for this lock. Pass it to every resource the work touches."""
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
        """The lease was lost: work done from here on is not protected. Once
        true, stays true. A guard a parent process took reads as lost in a
        child forked from it."""
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

    def extend(self, lease: Seconds) -> None:
        """Sets the lease to ``lease`` from now (the watchdog renews with this
        length from then on). Raises :class:`LeaseLostError` when it was lost."""
        self._native.extend(lease)

    def release(self) -> None:
        """Releases the lease. Raises :class:`LeaseLostError` when it was lost
        before (the work may have overlapped with another holder) or released
        already, :class:`CannotConnectError` when Redis did not answer (the
        lock then expires at the end of its lease)."""
        self._native.release()

    def wait_lost(self, timeout: Optional[Seconds] = None) -> bool:
        """Blocks until the lease is lost, as :meth:`threading.Event.wait`
        does: True once lost; False when ``timeout`` seconds passed first or
        the guard was released meanwhile."""
        return bool(self._native.wait_lost(timeout))

    def __enter__(self) -> "Guard":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        _exit(self._native, exc is not None)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} fence={self.fence} lost={self.lost}>"


def _exit(native: _native.Guard, failed: bool) -> None:
    """Releases at the end of a ``with`` block: not a guard a parent process
    took (the child of a fork does not hold it), not one released in the
    block; a failed release is raised unless the block raised already."""
    if native.forked or native.released:
        return
    try:
        native.release()
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
    """Leadership of an :class:`Election`: a lease renewed while it lives.
    ``release()`` (or :meth:`resign`) gives it up and tells the observers."""

    __slots__ = ()

    @property
    def value(self) -> str:
        """The value this leader campaigned with."""
        return self._native.value or ""

    def resign(self) -> None:
        """Gives up the leadership: the candidate that waited longest takes it."""
        self.release()


class _Held(threading.local):
    def __init__(self) -> None:
        self.guards: List[Guard] = []


class Lock:
    """What every kind of lock answers. A lock is a context manager: ``with
    lock as guard:`` waits as the client's ``wait`` says (forever by
    default), and releases at the end of the block."""

    __slots__ = ("_native", "_wait", "_held")

    def __init__(self, native: _native.Lock, wait: Wait) -> None:
        self._native = native
        self._wait = wait
        self._held = _Held()

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._native.name

    def acquire(self, timeout: Wait = DEFAULT) -> Guard:
        """Waits for the lock, at most ``timeout`` seconds (None: as long as it
        takes; left out: the client's ``wait``), and returns its guard.
        Raises :class:`LockTimeoutError` when it is still taken then."""
        return Guard(self._native.acquire(timeout=self._timeout(timeout)))

    def try_acquire(self) -> Optional[Guard]:
        """One attempt, one round trip: the guard, or None when the lock is taken."""
        native = self._native.try_acquire()
        return None if native is None else Guard(native)

    def inspect(self) -> LockInfo:
        """The lock's state as Redis sees it now: holders, fence, waiters."""
        return LockInfo._from_native(self._native.inspect())

    def force_release(self) -> bool:
        """Removes the lock whoever holds it, and wakes its waiters (an admin
        action): whether there was one."""
        return bool(self._native.force_release())

    def release_token(self, token: str) -> None:
        """Releases the lease ``token`` holds, taken elsewhere (another process,
        the command line)."""
        self._native.release_token(token)

    def extend_token(self, token: str, lease: Seconds) -> None:
        """Sets the lease left to ``token`` to ``lease``, if it still holds the lock."""
        self._native.extend_token(token, lease)

    def _timeout(self, timeout: Wait) -> Optional[Seconds]:
        chosen = self._wait if isinstance(timeout, _Default) else timeout
        return None if isinstance(chosen, _Default) else chosen

    def __enter__(self) -> Guard:
        guard = self.acquire()
        self._held.guards.append(guard)
        return guard

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        _exit(self._held.guards.pop()._native, exc is not None)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class Mutex(Lock):
    """One holder at a time, fenced. A free lock goes to whoever asks; a
    release wakes one waiter. Not reentrant: the same thread asking again
    through the same handle gets :class:`ConflictError`."""

    __slots__ = ()


class FairMutex(Lock):
    """One holder at a time, granted in the order the waiters reached Redis,
    across every process: a release hands the lock to the first in line."""

    __slots__ = ()


class _Owned(Lock):
    __slots__ = ()

    def hold_count(self) -> int:
        """How many levels (or read leases) the calling thread's owner holds,
        as Redis sees it."""
        return int(self._native.hold_count())


class ReentrantMutex(_Owned):
    """One owner at a time, who may take it again; each release undoes one
    level. The owner is the calling thread on this client (every handle of the
    same name), or the ``owner`` the lock was made with."""

    __slots__ = ()


class ReadLock(_Owned):
    """The read side of an :class:`RwLock`: shared with other readers."""

    __slots__ = ()


class WriteLock(_Owned):
    """The write side of an :class:`RwLock`: exclusive. Its owner may then take
    the read side too (a downgrade); a reader asking for it gets
    :class:`ConflictError` (an upgrade could deadlock)."""

    __slots__ = ()


class RwLock:
    """Many readers or one writer, writers not starved by readers."""

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

    def inspect(self) -> LockInfo:
        """The lock's state as Redis sees it now: every reader and the writer."""
        return self._read.inspect()

    def force_release(self) -> bool:
        """Removes every reader and writer (an admin action)."""
        return self._read.force_release()

    def __repr__(self) -> str:
        return f"<RwLock {self.name!r}>"


class Semaphore(Lock):
    """At most ``permits`` holders at once, every permit with its own lease,
    waiters served in turn."""

    __slots__ = ("_permits",)

    def __init__(self, native: _native.Lock, wait: Wait, permits: int) -> None:
        super().__init__(native, wait)
        self._permits = permits

    @property
    def permits(self) -> int:
        """The permit count this handle expects the semaphore to have."""
        return self._permits

    def acquire(self, timeout: Wait = DEFAULT, permits: int = 1) -> Guard:
        """Waits for ``permits`` permits held by one lease (see :meth:`Lock.acquire`)."""
        return Guard(self._native.acquire(timeout=self._timeout(timeout), permits=permits))

    def try_acquire(self, permits: int = 1) -> Optional[Guard]:
        """One attempt at ``permits`` permits: the guard, or None."""
        native = self._native.try_acquire(permits=permits)
        return None if native is None else Guard(native)

    def available(self) -> int:
        """Permits free now, as Redis sees it."""
        return int(self._native.available())

    def set_permits(self, permits: int) -> None:
        """Sets the permit count for every user (an admin action)."""
        self._native.set_permits(permits)


class RedlockMutex(Lock):
    """A mutex over a :class:`Redlock`'s masters, held while a majority holds it."""

    __slots__ = ()


class MultiLock:
    """Several locks taken together, all or none, in the order of their keys
    (so two callers naming them in opposite orders never deadlock)."""

    __slots__ = ("_native", "_wait", "_held")

    def __init__(self, locks: Sequence[Lock], *, wait: Wait = DEFAULT) -> None:
        natives = [lock._native for lock in locks]
        self._native = _native.MultiLock(natives)
        self._wait = locks[0]._wait if isinstance(wait, _Default) else wait
        self._held = _Held()

    def acquire(self, timeout: Wait = DEFAULT) -> MultiGuard:
        """Waits for every lock, at most ``timeout`` seconds for all of them."""
        chosen = self._wait if isinstance(timeout, _Default) else timeout
        native = self._native.acquire(timeout=None if isinstance(chosen, _Default) else chosen)
        return MultiGuard(native)

    def try_acquire(self) -> Optional[MultiGuard]:
        """One attempt at every lock: the guard, or None when one is taken
        (those taken before it are released)."""
        native = self._native.try_acquire()
        return None if native is None else MultiGuard(native)

    def __enter__(self) -> MultiGuard:
        guard = self.acquire()
        self._held.guards.append(guard)
        return guard

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        _exit(self._held.guards.pop()._native, exc is not None)


class Election:
    """One election: at most one leader at a time among the candidates,
    served in the order they started to campaign."""

    __slots__ = ("_native",)

    def __init__(self, native: _native.Election) -> None:
        self._native = native

    @property
    def name(self) -> str:
        """The election's name."""
        return self._native.name

    def campaign(self, value: str, timeout: Optional[Seconds] = None) -> Leadership:
        """Waits to lead (at most ``timeout`` seconds), then records ``value``
        as the leader's. Raises :class:`LockTimeoutError` when not won in time."""
        return Leadership(self._native.campaign(value, timeout=timeout))

    def leader(self) -> Optional[Leader]:
        """Who leads now, or None."""
        return leader(self._native.leader())

    def observe(self) -> "LeaderWatch":
        """Follows who leads: each win and resignation is announced, and a
        leader that died is noticed when its lease runs out."""
        return LeaderWatch(self._native.observe())


class LeaderWatch:
    """Who leads an election, kept up to date. Iterate for the leader now
    and then each change (None: nobody leads); a slow reader skips states
    it did not look at in time, as any watch does."""

    __slots__ = ("_native",)

    def __init__(self, native: _native.LeaderWatch) -> None:
        self._native = native

    @property
    def leader(self) -> Optional[Leader]:
        """The leader as last seen, or None."""
        return leader(self._native.current())

    def wait_change(self, timeout: Optional[Seconds] = None) -> bool:
        """Blocks until the leader changes: True then (read :attr:`leader`),
        False when ``timeout`` seconds passed first."""
        changed, _ = self._native.changed(timeout)
        return bool(changed)

    def __iter__(self) -> Iterator[Optional[Leader]]:
        yield self.leader
        while True:
            _, now = self._native.changed(None)
            yield leader(now)


_CLIENTS: "weakref.WeakSet[Any]" = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:
    # Releases left to the background (guards dropped without a release)
    # finish before the interpreter goes.
    for native in list(_CLIENTS):
        try:
            native.flush(block=True)
        except Exception:
            pass


class Client:
    """A client of one Redis deployment, from which locks are made.

    ``url`` is what the ``leasehold`` command takes: ``redis://`` or
    ``rediss://``, several seeds of a Cluster (a list, or separated by commas),
    ``redis+sentinel://``; None reads ``$LEASEHOLD_URL``, else ``$REDIS_URL``,
    else ``redis://127.0.0.1:6379``. Durations are seconds or timedeltas.

    One client serves every thread of a process; after ``os.fork()`` the
    child builds its own connections on first use (it never shares a socket
    or a thread with its parent, and does not hold the parent's locks).
    """

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
            asyncio=False,
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
        """The first part of every key this client writes (``leasehold``)."""
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
        """The mutex called ``name``: one holder at a time, fenced."""
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
        """The fair mutex called ``name``: granted in the order waiters arrived."""
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
        """The reentrant mutex called ``name``; its owner is the calling thread,
        or ``owner`` (an id several threads or processes share)."""
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
        """The read-write lock called ``name``: ``.read()`` and ``.write()``;
        its owner is the calling thread, or ``owner``."""
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
        """The semaphore called ``name`` with ``permits`` permits (every user
        gives the same count)."""
        settings = lock_settings(lease, watchdog, hold_at_least, max_hold, replicas, replica_timeout)
        native = self._native.lock("semaphore", name, permits=permits, **settings)
        return Semaphore(native, self._wait, permits)

    def election(
        self, name: str, *, lease: Optional[Seconds] = None, max_term: Optional[Seconds] = None
    ) -> Election:
        """The leader election called ``name``."""
        return Election(self._native.election(name, lease=lease, max_term=max_term))

    def flush(self) -> None:
        """Waits until the releases left to the background are done (at most
        four command timeouts). Also done when the interpreter exits."""
        self._native.flush()

    def __enter__(self) -> "Client":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.flush()

    def __repr__(self) -> str:
        return f"<leasehold.Client {self.url!r}>"


class Redlock:
    """A mutex over N >= 3 independent Redis masters, held while a majority
    holds it, with fences that never go back. ``urls`` None reads
    ``$LEASEHOLD_REDLOCK`` (comma-separated)."""

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
            asyncio=False,
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
        """The mutex called ``name`` over these masters (the keys of a
        :class:`Mutex` of the same name on each)."""
        native = self._native.lock(
            name, lease=lease, watchdog=watchdog, hold_at_least=hold_at_least, max_hold=max_hold
        )
        return RedlockMutex(native, self._wait)

    def flush(self) -> None:
        """Waits until what this Redlock left to the background is done."""
        self._native.flush()
