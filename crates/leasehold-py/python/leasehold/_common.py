"""What the blocking and the asyncio faces share: settings, URLs, records."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from . import _native
from .exceptions import InvalidInputError

Seconds = Union[float, int, timedelta]
"""A duration: seconds as a number, or a :class:`datetime.timedelta`."""

DEFAULT_URL: str = _native.DEFAULT_URL
"""The Redis leasehold talks to when neither the call nor the environment names one."""

URL_ENV_VARS: Tuple[str, ...] = tuple(_native.URL_ENV_VARS)
"""The environment variables the URL is read from, in order, when none is given."""

REDLOCK_ENV_VAR = "LEASEHOLD_REDLOCK"
"""The environment variable a Redlock's masters are read from when none are given."""


class _Default:
    """The default of an argument left out (as opposed to ``None``)."""

    _instance: Optional["_Default"] = None

    def __new__(cls) -> "_Default":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = _Default()


def url_from_env() -> str:
    """The URL the ``leasehold`` command would use: ``$LEASEHOLD_URL``, else
    ``$REDIS_URL``, else ``redis://127.0.0.1:6379`` (empty values skipped)."""
    for var in URL_ENV_VARS:
        value = os.environ.get(var)
        if value:
            return value
    return DEFAULT_URL


def resolve_url(url: Union[str, Sequence[str], None]) -> str:
    """One URL string from a URL, a list of cluster seeds, or the environment."""
    if url is None:
        return url_from_env()
    if isinstance(url, str):
        return url
    seeds = list(url)
    if not seeds or not all(isinstance(seed, str) for seed in seeds):
        raise InvalidInputError(
            "give a URL, or a non-empty list of seed URLs of one cluster", "invalid_input"
        )
    return ",".join(seeds)


def redlock_urls(urls: Union[str, Sequence[str], None]) -> list[str]:
    """The masters of a Redlock from a list, a comma-separated string, or the environment."""
    if urls is None:
        urls = os.environ.get(REDLOCK_ENV_VAR, "")
    if isinstance(urls, str):
        return [u.strip() for u in urls.split(",") if u.strip()]
    return list(urls)


def tls_root(certificate: Union[bytes, str, "os.PathLike[str]", None]) -> Optional[bytes]:
    """PEM bytes from PEM bytes or a path to a PEM file."""
    if certificate is None or isinstance(certificate, bytes):
        return certificate
    with open(certificate, "rb") as pem:
        return pem.read()


def _time(seconds: Optional[float]) -> Optional[datetime]:
    return None if seconds is None else datetime.fromtimestamp(seconds, timezone.utc)


@dataclass(frozen=True)
class Holder:
    """One holder of a lock, as :meth:`inspect` reports it."""

    pid: Optional[int]
    """The holder's process id, if it recorded one."""
    host: str
    """The host the holder runs on."""
    client_name: str
    """The holder's client name (``Client(name=...)``, the program's name by default)."""
    acquired_at: Optional[datetime]
    """When Redis granted the lease, by the Redis server's clock."""
    remaining: Optional[float]
    """Seconds left on this holder's lease."""
    mode: str
    """``"exclusive"``, ``"read"``, ``"write"`` or ``"permits"``."""
    permits: int
    """Semaphore permits this lease holds (1 for the other kinds)."""
    levels: int
    """Levels of a reentrant hold (1 for the other kinds)."""
    owner: Optional[str]
    """The owner of a reentrant or read-write lease."""
    fence: Optional[int]
    """The fence of the acquisition, where the record keeps one."""


@dataclass(frozen=True)
class LockInfo:
    """A lock's state as Redis saw it, from :meth:`inspect`."""

    name: str
    """The lock's name."""
    held: bool
    """Someone holds the lock."""
    remaining: Optional[float]
    """Seconds left on the holder's lease; None when free."""
    last_fence: Optional[int]
    """The last fence handed out, if any ever was."""
    waiting_clients: int
    """Waiters in the lock's queue."""
    kind: Optional[str]
    """``"mutex"``, ``"reentrant"``, ``"rwlock"`` or ``"semaphore"``; None when nothing is there."""
    permits: Optional[int]
    """A semaphore's permit count."""
    read_at: Optional[datetime]
    """When Redis read this state, by its own clock."""
    server: str
    """The server that answered, as ``host:port``."""
    holders: Tuple[Holder, ...]
    """Every live lease."""

    @classmethod
    def _from_native(cls, info: Mapping[str, Any]) -> "LockInfo":
        fields: Dict[str, Any] = dict(info)
        fields["read_at"] = _time(fields["read_at"])
        fields["holders"] = tuple(
            Holder(**{**h, "acquired_at": _time(h["acquired_at"])}) for h in info["holders"]
        )
        return cls(**fields)


@dataclass(frozen=True)
class Leader:
    """Who leads an election: the value it campaigned with, and its fence."""

    value: str
    """What the leader campaigned with (an address, a host name)."""
    fence: int
    """The fence of its leadership: larger than that of every leader before."""


def leader(found: Optional[Tuple[str, int]]) -> Optional[Leader]:
    return None if found is None else Leader(*found)


def lock_settings(
    lease: Optional[Seconds],
    watchdog: Optional[bool],
    hold_at_least: Optional[Seconds],
    max_hold: Optional[Seconds],
    replicas: int,
    replica_timeout: Optional[Seconds],
) -> Dict[str, Any]:
    return {
        "lease": lease,
        "watchdog": watchdog,
        "hold_at_least": hold_at_least,
        "max_hold": max_hold,
        "replicas": replicas,
        "replica_timeout": replica_timeout,
    }
