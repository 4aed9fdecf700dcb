"""The native module: the Rust library's public API, with conversion and
runtime plumbing only. Use the ``leasehold`` package, not this module.

Every I/O method returns its value when the client was made with
``asyncio=False``, and an awaitable of it with ``asyncio=True``; the stubs say
``Any`` for those and the package's typed faces say which."""

from datetime import timedelta
from typing import Any, Dict, List, Optional, Tuple, Union

_Seconds = Union[float, int, timedelta]

DEFAULT_URL: str
URL_ENV_VARS: List[str]
DEFAULT_PREFIX: str
DEFAULT_LEASE: float

class Guard:
    """A held lease, several taken together, or a leadership."""

    @property
    def name(self) -> str: ...
    @property
    def fence(self) -> int: ...
    @property
    def fences(self) -> List[int]: ...
    @property
    def token(self) -> str: ...
    @property
    def permits(self) -> int: ...
    @property
    def value(self) -> Optional[str]: ...
    @property
    def forked(self) -> bool: ...
    @property
    def lost(self) -> bool: ...
    @property
    def lost_reason(self) -> Optional[str]: ...
    @property
    def released(self) -> bool: ...
    @property
    def valid_for(self) -> float: ...
    def extend(self, lease: _Seconds) -> Any: ...
    def release(self) -> Any: ...
    def wait_lost(self, timeout: Optional[_Seconds] = None) -> Any: ...

class Lock:
    """A lock of any kind."""

    @property
    def name(self) -> str: ...
    def try_acquire(self, *, task: Optional[str] = None, permits: int = 1) -> Any: ...
    def acquire(
        self, *, timeout: Optional[_Seconds] = None, task: Optional[str] = None, permits: int = 1
    ) -> Any: ...
    def hold_count(self, *, task: Optional[str] = None) -> Any: ...
    def inspect(self) -> Any: ...
    def force_release(self) -> Any: ...
    def force_release_side(self, side: str) -> Any: ...
    def release_token(self, token: str, *, task: Optional[str] = None) -> Any: ...
    def extend_token(self, token: str, lease: _Seconds) -> Any: ...
    def available(self) -> Any: ...
    def set_permits(self, permits: int) -> Any: ...
    def try_set_permits(self, permits: int, lifetime: Optional[_Seconds] = None) -> Any: ...

class MultiLock:
    """Several locks taken together."""

    def __init__(self, locks: List[Lock]) -> None: ...
    def try_acquire(self, *, task: Optional[str] = None) -> Any: ...
    def acquire(self, *, timeout: Optional[_Seconds] = None, task: Optional[str] = None) -> Any: ...

class Election:
    """A leader election."""

    @property
    def name(self) -> str: ...
    def campaign(self, value: str, *, timeout: Optional[_Seconds] = None) -> Any: ...
    def leader(self) -> Any: ...
    def observe(self) -> Any: ...

class LeaderWatch:
    """Who leads an election, followed."""

    def current(self) -> Optional[Tuple[str, int]]: ...
    def changed(self, timeout: Optional[_Seconds] = None) -> Any: ...

class Client:
    """A client of one deployment."""

    def __init__(
        self,
        url: str,
        *,
        asyncio: bool,
        prefix: Optional[str] = None,
        lease: Optional[_Seconds] = None,
        watchdog: Optional[bool] = None,
        command_timeout: Optional[_Seconds] = None,
        connect_timeout: Optional[_Seconds] = None,
        restart_grace: Optional[_Seconds] = None,
        fence_retention: Optional[_Seconds] = None,
        name: Optional[str] = None,
        tls_root_certificate: Optional[bytes] = None,
        sentinel_username: Optional[str] = None,
        sentinel_password: Optional[str] = None,
    ) -> None: ...
    @property
    def url(self) -> str: ...
    @property
    def prefix(self) -> str: ...
    @property
    def asyncio(self) -> bool: ...
    def lock(
        self,
        kind: str,
        name: str,
        *,
        permits: int = 1,
        lease: Optional[_Seconds] = None,
        watchdog: Optional[bool] = None,
        hold_at_least: Optional[_Seconds] = None,
        max_hold: Optional[_Seconds] = None,
        replicas: int = 0,
        replica_timeout: Optional[_Seconds] = None,
        owner: Optional[str] = None,
    ) -> Lock: ...
    def election(
        self, name: str, *, lease: Optional[_Seconds] = None, max_term: Optional[_Seconds] = None
    ) -> Election: ...
    def flush(self, *, block: bool = False) -> Any: ...

class Redlock:
    """A Redlock over independent masters."""

    def __init__(
        self,
        urls: List[str],
        *,
        asyncio: bool,
        prefix: Optional[str] = None,
        lease: Optional[_Seconds] = None,
        watchdog: Optional[bool] = None,
        command_timeout: Optional[_Seconds] = None,
        node_timeout: Optional[_Seconds] = None,
        retry_delay: Optional[_Seconds] = None,
        restart_grace: Optional[_Seconds] = None,
        fence_retention: Optional[_Seconds] = None,
        name: Optional[str] = None,
    ) -> None: ...
    @property
    def addresses(self) -> List[str]: ...
    @property
    def quorum(self) -> int: ...
    def lock(
        self,
        name: str,
        *,
        lease: Optional[_Seconds] = None,
        watchdog: Optional[bool] = None,
        hold_at_least: Optional[_Seconds] = None,
        max_hold: Optional[_Seconds] = None,
    ) -> Lock: ...
    def flush(self, *, block: bool = False) -> Any: ...
