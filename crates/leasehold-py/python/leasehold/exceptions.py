"""The exceptions leasehold raises.

Every error is a :class:`LeaseholdError` whose ``kind`` names the Rust
library's ``ErrorKind`` in snake case (``"timeout"``, ``"not_held"``,
``"connection"``, ...). The kinds a caller may want to catch have a class of
their own; invalid input is also a :class:`ValueError`, a wait that ran out
also a :class:`TimeoutError`, and Redis out of reach also a
:class:`ConnectionError`.
"""

from __future__ import annotations

from typing import Dict, Type

__all__ = [
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


class LeaseholdError(Exception):
    """Any leasehold error. ``kind`` says which, ``str(error)`` what to do."""

    kind: str

    def __init__(self, message: str, kind: str = "other") -> None:
        super().__init__(message)
        self.kind = kind

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (str(self), self.kind))


class InvalidInputError(LeaseholdError, ValueError):
    """An argument was refused before anything was sent to Redis (kind ``invalid_input``)."""


class LockTimeoutError(LeaseholdError, TimeoutError):
    """The wait for a lock (or a leadership) ran out before it could be taken (kind ``timeout``)."""


class LeaseLostError(LeaseholdError):
    """The lease is not held (kind ``not_held``): it was lost before the call
    (expired, removed, taken by another after a pause), released already, or
    held by the process this one forked from. Work done under a lost lease may
    have overlapped with another holder."""


class CannotConnectError(LeaseholdError, ConnectionError):
    """Redis could not be reached, did not answer in time, or was not ready
    (kind ``connection``). Worth trying again later."""


class RefusedError(LeaseholdError):
    """Redis refused the credentials or the connection's settings (kind ``auth``
    or ``config``): trying again does not help; fix the URL, the user or the TLS
    settings."""


class ConflictError(LeaseholdError):
    """The lock cannot be taken as asked and waiting would not change that
    (kind ``conflict``): the name is busy as another kind of lock, a read lock's
    owner asked for the write lock, a semaphore has another permit count, or the
    holder of a mutex asked for it again."""


class QuorumError(LeaseholdError):
    """A Redlock could not reach a majority of its masters (kind ``quorum``)."""


class OutcomeUnknownError(LeaseholdError):
    """A request sent again cannot tell whether the first try was applied
    (kind ``outcome_unknown``); nothing is held any more either way."""


class ReplicasMissingError(LeaseholdError):
    """Fewer replicas than asked acknowledged an acquisition or extend in time
    (kind ``replicas_missing``); an acquisition was undone."""


_BY_KIND: Dict[str, Type[LeaseholdError]] = {
    "invalid_input": InvalidInputError,
    "timeout": LockTimeoutError,
    "not_held": LeaseLostError,
    "connection": CannotConnectError,
    "auth": RefusedError,
    "config": RefusedError,
    "conflict": ConflictError,
    "quorum": QuorumError,
    "outcome_unknown": OutcomeUnknownError,
    "replicas_missing": ReplicasMissingError,
}


def _from_native(kind: str, message: str) -> LeaseholdError:
    """The exception of ``kind`` (called by the native module)."""
    return _BY_KIND.get(kind, LeaseholdError)(message, kind)
