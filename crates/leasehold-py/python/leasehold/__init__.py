"""Distributed locks on Redis: fenced leases that tell you when they are lost.

The Python face of the leasehold Rust library: the same engine, the same
keys, the same fences. A lock held from Python keeps the Rust library and the
``leasehold`` command out of the same name, and the other way round.

>>> import leasehold
>>> client = leasehold.Client()          # $LEASEHOLD_URL, $REDIS_URL, or redis://127.0.0.1:6379
>>> with client.mutex("reports:nightly") as guard:
...     write_report(fence=guard.fence)

``leasehold.asyncio`` has the same with awaitables.
"""

from . import asyncio
from ._common import DEFAULT_URL, REDLOCK_ENV_VAR, URL_ENV_VARS, Holder, Leader, LockInfo, Seconds, url_from_env
from ._sync import *
from .exceptions import *

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
    "Leader",
    "LockInfo",
    "Holder",
    "Seconds",
    "DEFAULT_URL",
    "URL_ENV_VARS",
    "REDLOCK_ENV_VAR",
    "url_from_env",
    "asyncio",
    "LeaseholdError",
    "InvalidInputError",
    "LockTimeoutError",
    "LeaseLostError",
    "CannotConnectError",
    "RefusedError",
    "ConflictError",
    "QuorumError",
    "OutcomeUnknownError",
    "ReplicasMissingError",
]
