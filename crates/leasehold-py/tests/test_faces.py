"""The blocking client and ``leasehold.asyncio`` are one surface: the same
classes, methods, parameters and docstrings; the asyncio face answers with
coroutines (and acquisitions to await or enter) where the blocking face
answers with values."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Dict

import pytest

import leasehold
import leasehold.asyncio
from leasehold import _sync

# What the asyncio face awaits; acquisitions return an Acquiring instead.
AWAITED = {
    "extend", "release", "wait_lost", "resign", "try_acquire", "inspect", "force_release",
    "force_release_readers", "force_release_writer", "try_set_permits",
    "release_token", "extend_token", "hold_count", "available", "set_permits", "leader",
    "observe", "wait_change", "flush",
}
ACQUISITIONS = {"acquire", "campaign"}
# Each face's own protocol: with, async with, for, async for.
PROTOCOL = {"__enter__", "__exit__", "__aenter__", "__aexit__", "__iter__", "__aiter__"}


def public(cls: type) -> Dict[str, Any]:
    """The public members of ``cls`` as the class gives them (``__init__`` included)."""
    return {
        name: inspect.getattr_static(cls, name)
        for name in dir(cls)
        if (not name.startswith("_") or name == "__init__") and name not in PROTOCOL
    }


@pytest.mark.parametrize("name", _sync.__all__)
def test_each_class_has_the_same_members_on_both_faces(name: str) -> None:
    blocking, awaiting = getattr(leasehold, name), getattr(leasehold.asyncio, name)
    assert blocking is not awaiting
    assert blocking.__name__ == awaiting.__name__ == name
    ours, theirs = public(blocking), public(awaiting)
    assert ours.keys() == theirs.keys()
    for member, attribute in ours.items():
        if isinstance(attribute, property):
            assert isinstance(theirs[member], property), member
            continue
        there = getattr(awaiting, member)
        here = getattr(blocking, member)
        assert inspect.signature(here).parameters == inspect.signature(there).parameters, member
        assert not inspect.iscoroutinefunction(here), member
        assert inspect.iscoroutinefunction(there) == (member in AWAITED), member


@pytest.mark.parametrize("face", [leasehold, leasehold.asyncio], ids=["blocking", "asyncio"])
def test_every_public_name_is_documented(face: Any) -> None:
    for name in face.__all__:
        obj = getattr(face, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj)):
            continue  # data: Seconds, DEFAULT_URL, ... (documented where defined)
        assert obj.__doc__ and obj.__doc__.strip(), name
        if not inspect.isclass(obj) or issubclass(obj, BaseException):
            continue
        for member, attribute in public(obj).items():
            if member == "__init__":
                continue
            assert attribute.__doc__ and attribute.__doc__.strip(), f"{name}.{member}"


def test_both_faces_name_the_same_classes(client: leasehold.Client) -> None:
    assert leasehold.asyncio.__all__ == _sync.__all__
    assert set(_sync.__all__) <= set(leasehold.__all__)
    for name in _sync.__all__:
        assert getattr(leasehold, name) is getattr(_sync, name)
    assert isinstance(client.rw_lock("x").read(), leasehold.ReadLock)
    assert isinstance(client.semaphore("x", 2), leasehold.Lock)
    assert not isinstance(client.mutex("x"), leasehold.asyncio.Lock)


def test_asyncio_calls_are_coroutines_and_acquisitions_wait_to_be_awaited(
    aclient: leasehold.asyncio.Client, name: str
) -> None:
    async def main() -> None:
        mutex = aclient.mutex(name)
        pending = mutex.acquire(timeout=5)
        assert isinstance(pending, leasehold.asyncio.Acquiring)
        # Not awaited yet: nothing was asked of Redis.
        assert not (await mutex.inspect()).held
        guard = await pending
        assert (await asyncio.create_task(mutex.inspect())).held
        assert await asyncio.create_task(leasehold.asyncio.Client(aclient.url).mutex(name).try_acquire()) is None
        await guard.release()

    asyncio.run(main())
