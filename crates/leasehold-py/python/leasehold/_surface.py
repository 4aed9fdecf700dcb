"""Every class of the package written once for both faces: guards, locks,
elections and clients, with their arguments, defaults and docstrings.

Each face (``leasehold``, blocking; ``leasehold.asyncio``) subclasses each
class here under the same name and adds only its protocol (``with`` or
``async with``, iteration). Where one class makes another (a lock its
guards, a client its locks), the type parameters name the face's class for
a type checker, and the ``_Guard``, ``_Mutex``, ... attributes name it at
run time. ``_face`` says how a call that talks to Redis is answered on
each face.
"""

from __future__ import annotations

import atexit
import os
import weakref
from typing import Any, Generic, List, Optional, Sequence, Tuple, Type, TypeVar, Union

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
from ._face import Acquiring  # noqa: F401  (named by the asyncio face's return annotations)
from ._face import Answer, Face, acquisition, io, nothing

Wait = Union[Seconds, None, _Default]

GuardT = TypeVar("GuardT", bound="Guard")
MultiGuardT = TypeVar("MultiGuardT", bound="MultiGuard")
LeadershipT = TypeVar("LeadershipT", bound="Leadership")
LockT = TypeVar("LockT", bound="Lock[Any]")
ReadLockT = TypeVar("ReadLockT", bound="ReadLock[Any]")
WriteLockT = TypeVar("WriteLockT", bound="WriteLock[Any]")
LeaderWatchT = TypeVar("LeaderWatchT", bound="LeaderWatch")
MutexT = TypeVar("MutexT", bound="Mutex[Any]")
FairMutexT = TypeVar("FairMutexT", bound="FairMutex[Any]")
ReentrantMutexT = TypeVar("ReentrantMutexT", bound="ReentrantMutex[Any]")
RwLockT = TypeVar("RwLockT", bound="RwLock[Any, Any]")
SemaphoreT = TypeVar("SemaphoreT", bound="Semaphore[Any]")
ElectionT = TypeVar("ElectionT", bound="Election[Any, Any]")
RedlockMutexT = TypeVar("RedlockMutexT", bound="RedlockMutex[Any]")


def _chosen(timeout: Wait, default: Wait) -> Optional[Seconds]:
    """The wait of a call: ``timeout`` if given, else the default."""
    chosen = default if isinstance(timeout, _Default) else timeout
    return None if isinstance(chosen, _Default) else chosen


class Guard(Face):
    """A held lease: its fence, whether it is lost, and its release.

    A guard is a context manager: ``with lock.acquire(timeout=5) as guard:``
    (``async with`` on the asyncio face) releases it at the end of the
    block. Dropped without a release, the lock is released in the
    background; a process that ends first leaves it until its lease runs
    out.
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

    @io
    def extend(self, lease: Seconds) -> Answer[None]:
        """Sets the lease to ``lease`` from now (the watchdog renews with this
        length from then on). Raises :class:`LeaseLostError` when it was lost."""
        return Answer(self._native.extend(lease), nothing)

    @io
    def release(self) -> Answer[None]:
        """Releases the lease. Raises :class:`LeaseLostError` when it was lost
        before (the work may have overlapped with another holder) or released
        already, :class:`CannotConnectError` when Redis did not answer (the
        lock then expires at the end of its lease)."""
        return Answer(self._native.release(), nothing)

    @io
    def wait_lost(self, timeout: Optional[Seconds] = None) -> Answer[bool]:
        """Waits until the lease is lost, as :meth:`threading.Event.wait`
        does: True once lost; False when ``timeout`` seconds passed first or
        the guard was released meanwhile. On the asyncio face, race it
        against the work with :func:`asyncio.wait`."""
        return Answer(self._native.wait_lost(timeout), bool)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} fence={self.fence} lost={self.lost}>"


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

    @io
    def resign(self) -> Answer[None]:
        """Gives up the leadership: the candidate that waited longest takes it."""
        return Answer(self._native.release(), nothing)


class Lock(Face, Generic[GuardT]):
    """What every kind of lock answers. A lock is a context manager: ``with
    lock as guard:`` (``async with`` on the asyncio face) waits as the
    client's ``wait`` says (forever by default), and releases at the end of
    the block."""

    __slots__ = ("_native", "_wait", "_held")

    _Guard: Type[GuardT]

    def __init__(self, native: _native.Lock, wait: Wait) -> None:
        self._native = native
        self._wait = wait
        self._held = self._Scopes()

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._native.name

    @acquisition
    def acquire(self, timeout: Wait = DEFAULT) -> Answer[GuardT]:
        """Waits for the lock, at most ``timeout`` seconds (None: as long as it
        takes; left out: the client's ``wait``), and returns its guard. On
        the asyncio face: ``await lock.acquire()``, or ``async with
        lock.acquire(timeout=5) as guard:``. Raises :class:`LockTimeoutError`
        when it is still taken then."""
        wait = _chosen(timeout, self._wait)
        return Answer(self._native.acquire(timeout=wait, task=self._task()), self._Guard)

    @io
    def try_acquire(self) -> Answer[Optional[GuardT]]:
        """One attempt, one round trip: the guard, or None when the lock is taken."""
        return Answer(self._native.try_acquire(task=self._task()), self._guard_or_none)

    @io
    def inspect(self) -> Answer[LockInfo]:
        """The lock's state as Redis sees it now: holders, fence, waiters."""
        return Answer(self._native.inspect(), LockInfo._from_native)

    @io
    def force_release(self) -> Answer[bool]:
        """Removes the lock whoever holds it, and wakes its waiters (an admin
        action): whether there was one."""
        return Answer(self._native.force_release(), bool)

    @io
    def release_token(self, token: str) -> Answer[None]:
        """Releases the lease ``token`` holds, taken elsewhere (another process,
        the command line)."""
        return Answer(self._native.release_token(token, task=self._task()), nothing)

    @io
    def extend_token(self, token: str, lease: Seconds) -> Answer[None]:
        """Sets the lease left to ``token`` to ``lease``, if it still holds the lock."""
        return Answer(self._native.extend_token(token, lease), nothing)

    def _guard_or_none(self, native: Optional[_native.Guard]) -> Optional[GuardT]:
        return None if native is None else self._Guard(native)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class Mutex(Lock[GuardT]):
    """One holder at a time, fenced. A free lock goes to whoever asks; a
    release wakes one waiter. Not reentrant: on the blocking face, the same
    thread asking again through the same handle gets :class:`ConflictError`;
    on the asyncio face, a task that asks again waits for itself, so bound
    such a wait with ``timeout``."""

    __slots__ = ()


class FairMutex(Lock[GuardT]):
    """One holder at a time, granted in the order the waiters reached Redis,
    across every process: a release hands the lock to the first in line."""

    __slots__ = ()


class _Owned(Lock[GuardT]):
    __slots__ = ()

    @io
    def hold_count(self) -> Answer[int]:
        """How many levels (or read leases) the caller's owner holds, as Redis
        sees it."""
        return Answer(self._native.hold_count(task=self._task()), int)


class ReentrantMutex(_Owned[GuardT]):
    """One owner at a time, who may take it again; each release undoes one
    level. The owner is the calling thread on this client (the calling task
    on the asyncio face), across every handle of the same name, or the
    ``owner`` the lock was made with."""

    __slots__ = ()


class ReadLock(_Owned[GuardT]):
    """The read side of an :class:`RwLock`: shared with other readers."""

    __slots__ = ()


class WriteLock(_Owned[GuardT]):
    """The write side of an :class:`RwLock`: exclusive. Its owner may then take
    the read side too (a downgrade); a reader asking for it gets
    :class:`ConflictError` (an upgrade could deadlock)."""

    __slots__ = ()


class RwLock(Face, Generic[ReadLockT, WriteLockT]):
    """Many readers or one writer, writers not starved by readers."""

    __slots__ = ("_read", "_write")

    _ReadLock: Type[ReadLockT]
    _WriteLock: Type[WriteLockT]

    def __init__(self, read: ReadLockT, write: WriteLockT) -> None:
        self._read = read
        self._write = write

    @classmethod
    def _of(cls: Type[RwLockT], read: _native.Lock, write: _native.Lock, wait: Wait) -> RwLockT:
        return cls(cls._ReadLock(read, wait), cls._WriteLock(write, wait))

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._read.name

    def read(self) -> ReadLockT:
        """The read side."""
        return self._read

    def write(self) -> WriteLockT:
        """The write side."""
        return self._write

    @io
    def inspect(self) -> Answer[LockInfo]:
        """The lock's state as Redis sees it now: every reader and the writer."""
        return Answer(self._read._native.inspect(), LockInfo._from_native)

    @io
    def force_release(self) -> Answer[bool]:
        """Removes every reader and writer (an admin action)."""
        return Answer(self._read._native.force_release(), bool)

    @io
    def force_release_readers(self) -> Answer[bool]:
        """Removes every reader and nothing else (an admin action), as Redisson's
        ``readLock().forceUnlock()``: whether a reader was removed."""
        return Answer(self._read._native.force_release_side("read"), bool)

    @io
    def force_release_writer(self) -> Answer[bool]:
        """Removes the writer and nothing else (an admin action), as Redisson's
        ``writeLock().forceUnlock()``: whether a writer was removed."""
        return Answer(self._read._native.force_release_side("write"), bool)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class Semaphore(Lock[GuardT]):
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

    @acquisition
    def acquire(self, timeout: Wait = DEFAULT, permits: int = 1) -> Answer[GuardT]:
        """Waits for ``permits`` permits held by one lease (see :meth:`Lock.acquire`)."""
        wait = _chosen(timeout, self._wait)
        return Answer(self._native.acquire(timeout=wait, permits=permits), self._Guard)

    @io
    def try_acquire(self, permits: int = 1) -> Answer[Optional[GuardT]]:
        """One attempt at ``permits`` permits: the guard, or None."""
        return Answer(self._native.try_acquire(permits=permits), self._guard_or_none)

    @io
    def available(self) -> Answer[int]:
        """Permits free now, as Redis sees it."""
        return Answer(self._native.available(), int)

    @io
    def set_permits(self, permits: int) -> Answer[None]:
        """Sets the permit count for every user (an admin action)."""
        return Answer(self._native.set_permits(permits), nothing)

    @io
    def try_set_permits(self, permits: int, lifetime: Optional[Seconds] = None) -> Answer[bool]:
        """Sets the permit count only if none is set yet, as Redisson's
        ``trySetPermits``: whether it was set. With ``lifetime`` (seconds, or a
        ``timedelta``), the count goes at its end; permits held then run on
        until released and count against the next count, which the next
        acquisition sets."""
        return Answer(self._native.try_set_permits(permits, lifetime), bool)


class RedlockMutex(Lock[GuardT]):
    """A mutex over a :class:`Redlock`'s masters, held while a majority holds it."""

    __slots__ = ()


class MultiLock(Face, Generic[LockT, MultiGuardT]):
    """Several locks taken together, all or none, in the order of their keys
    (so two callers naming them in opposite orders never deadlock). Like a
    lock, a context manager (``async with`` on the asyncio face)."""

    __slots__ = ("_native", "_wait", "_held")

    _MultiGuard: Type[MultiGuardT]

    def __init__(self, locks: Sequence[LockT], *, wait: Wait = DEFAULT) -> None:
        self._native = _native.MultiLock([lock._native for lock in locks])
        self._wait = locks[0]._wait if isinstance(wait, _Default) else wait
        self._held = self._Scopes()

    @acquisition
    def acquire(self, timeout: Wait = DEFAULT) -> Answer[MultiGuardT]:
        """Waits for every lock, at most ``timeout`` seconds for all of them."""
        wait = _chosen(timeout, self._wait)
        return Answer(self._native.acquire(timeout=wait, task=self._task()), self._MultiGuard)

    @io
    def try_acquire(self) -> Answer[Optional[MultiGuardT]]:
        """One attempt at every lock: the guard, or None when one is taken
        (those taken before it are released)."""
        return Answer(self._native.try_acquire(task=self._task()), self._guard_or_none)

    def _guard_or_none(self, native: Optional[_native.Guard]) -> Optional[MultiGuardT]:
        return None if native is None else self._MultiGuard(native)


def _changed(answer: Tuple[bool, Any]) -> bool:
    return bool(answer[0])


class LeaderWatch(Face):
    """Who leads an election, kept up to date. Iterate (``async for`` on the
    asyncio face) for the leader now and then each change (None: nobody
    leads); a slow reader skips states it did not look at in time, as any
    watch does."""

    __slots__ = ("_native",)

    def __init__(self, native: _native.LeaderWatch) -> None:
        self._native = native

    @property
    def leader(self) -> Optional[Leader]:
        """The leader as last seen, or None."""
        return leader(self._native.current())

    @io
    def wait_change(self, timeout: Optional[Seconds] = None) -> Answer[bool]:
        """Waits until the leader changes: True then (read :attr:`leader`),
        False when ``timeout`` seconds passed first."""
        return Answer(self._native.changed(timeout), _changed)


class Election(Face, Generic[LeadershipT, LeaderWatchT]):
    """One election: at most one leader at a time among the candidates,
    served in the order they started to campaign."""

    __slots__ = ("_native",)

    _Leadership: Type[LeadershipT]
    _LeaderWatch: Type[LeaderWatchT]

    def __init__(self, native: _native.Election) -> None:
        self._native = native

    @property
    def name(self) -> str:
        """The election's name."""
        return self._native.name

    @acquisition
    def campaign(self, value: str, timeout: Optional[Seconds] = None) -> Answer[LeadershipT]:
        """Waits to lead (at most ``timeout`` seconds), then records ``value``
        as the leader's. Raises :class:`LockTimeoutError` when not won in time."""
        return Answer(self._native.campaign(value, timeout=timeout), self._Leadership)

    @io
    def leader(self) -> Answer[Optional[Leader]]:
        """Who leads now, or None."""
        return Answer(self._native.leader(), leader)

    @io
    def observe(self) -> Answer[LeaderWatchT]:
        """Follows who leads: each win and resignation is announced, and a
        leader that died is noticed when its lease runs out."""
        return Answer(self._native.observe(), self._LeaderWatch)


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


class Client(Face, Generic[MutexT, FairMutexT, ReentrantMutexT, RwLockT, SemaphoreT, ElectionT]):
    """A client of one Redis deployment, from which locks are made.

    ``url`` is what the ``leasehold`` command takes: ``redis://`` or
    ``rediss://``, several seeds of a Cluster (a list, or separated by commas),
    ``redis+sentinel://``; None reads ``$LEASEHOLD_URL``, else ``$REDIS_URL``,
    else ``redis://127.0.0.1:6379``. Durations are seconds or timedeltas.

    One client serves every thread (every task) of a process; after
    ``os.fork()`` the child builds its own connections on first use (it
    never shares a socket or a thread with its parent, and does not hold
    the parent's locks). A context manager (``async with`` on the asyncio
    face) that flushes at the end of its block.
    """

    __slots__ = ("_native", "_wait", "__weakref__")

    _Mutex: Type[MutexT]
    _FairMutex: Type[FairMutexT]
    _ReentrantMutex: Type[ReentrantMutexT]
    _RwLock: Type[RwLockT]
    _Semaphore: Type[SemaphoreT]
    _Election: Type[ElectionT]

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
            asyncio=self._asyncio,
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
    ) -> MutexT:
        """The mutex called ``name``: one holder at a time, fenced."""
        settings = lock_settings(lease, watchdog, hold_at_least, max_hold, replicas, replica_timeout)
        return self._Mutex(self._native.lock("mutex", name, **settings), self._wait)

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
    ) -> FairMutexT:
        """The fair mutex called ``name``: granted in the order waiters arrived."""
        settings = lock_settings(lease, watchdog, hold_at_least, max_hold, replicas, replica_timeout)
        return self._FairMutex(self._native.lock("fair_mutex", name, **settings), self._wait)

    def reentrant_mutex(
        self,
        name: str,
        *,
        owner: Optional[str] = None,
        fair: bool = False,
        lease: Optional[Seconds] = None,
        watchdog: Optional[bool] = None,
        hold_at_least: Optional[Seconds] = None,
        max_hold: Optional[Seconds] = None,
        replicas: int = 0,
        replica_timeout: Optional[Seconds] = None,
    ) -> ReentrantMutexT:
        """The reentrant mutex called ``name``; its owner is the calling thread
        (task), or ``owner`` (an id several threads or processes share). With
        ``fair``, owners are served in the order they arrived (Redisson's fair
        lock); nesting is the same."""
        settings = lock_settings(lease, watchdog, hold_at_least, max_hold, replicas, replica_timeout)
        kind = "fair_reentrant_mutex" if fair else "reentrant_mutex"
        native = self._native.lock(kind, name, owner=owner, **settings)
        return self._ReentrantMutex(native, self._wait)

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
    ) -> RwLockT:
        """The read-write lock called ``name``: ``.read()`` and ``.write()``;
        its owner is the calling thread (task), or ``owner``."""
        settings = lock_settings(lease, watchdog, hold_at_least, max_hold, replicas, replica_timeout)
        read = self._native.lock("read", name, owner=owner, **settings)
        write = self._native.lock("write", name, owner=owner, **settings)
        return self._RwLock._of(read, write, self._wait)

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
    ) -> SemaphoreT:
        """The semaphore called ``name`` with ``permits`` permits (every user
        gives the same count)."""
        settings = lock_settings(lease, watchdog, hold_at_least, max_hold, replicas, replica_timeout)
        native = self._native.lock("semaphore", name, permits=permits, **settings)
        return self._Semaphore(native, self._wait, permits)

    def election(
        self, name: str, *, lease: Optional[Seconds] = None, max_term: Optional[Seconds] = None
    ) -> ElectionT:
        """The leader election called ``name``."""
        return self._Election(self._native.election(name, lease=lease, max_term=max_term))

    @io
    def flush(self) -> Answer[None]:
        """Waits until the releases left to the background are done (at most
        four command timeouts). Also done when the interpreter exits."""
        return Answer(self._native.flush(), nothing)

    def __repr__(self) -> str:
        return f"<{self._module}.Client {self.url!r}>"


class Redlock(Face, Generic[RedlockMutexT]):
    """A mutex over N >= 3 independent Redis masters, held while a majority
    holds it, with fences that never go back. ``urls`` None reads
    ``$LEASEHOLD_REDLOCK`` (comma-separated)."""

    __slots__ = ("_native", "_wait", "__weakref__")

    _RedlockMutex: Type[RedlockMutexT]

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
            asyncio=self._asyncio,
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
    ) -> RedlockMutexT:
        """The mutex called ``name`` over these masters (the keys of a
        :class:`Mutex` of the same name on each)."""
        native = self._native.lock(
            name, lease=lease, watchdog=watchdog, hold_at_least=hold_at_least, max_hold=max_hold
        )
        return self._RedlockMutex(native, self._wait)

    @io
    def flush(self) -> Answer[None]:
        """Waits until what this Redlock left to the background is done."""
        return Answer(self._native.flush(), nothing)
