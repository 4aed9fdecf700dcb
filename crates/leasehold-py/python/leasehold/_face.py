"""What differs between the blocking face and the asyncio face, and nothing
else: how a call is answered, who owns a hold, where ``with`` keeps its
guards.

The classes of ``_surface`` are written once for both faces. A method of
theirs that talks to Redis returns an :class:`Answer`: what the native call
gave (the value on the blocking face, an awaitable of it on the asyncio one)
and how to read it. Decorated with :class:`io` or :class:`acquisition`, it
becomes, on a class of the blocking face (:class:`Blocking`), a method that
returns the value; on one of the asyncio face (:class:`Asyncio`), a
coroutine function, or for an acquisition a method that returns an
:class:`Acquiring`. The decorators' ``__get__`` overloads tell a type
checker the same, so that each face is typed as it behaves.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import sys
import threading
import weakref
from contextlib import nullcontext, suppress
from types import MethodType, TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    ClassVar,
    Coroutine,
    Generator,
    Generic,
    List,
    Optional,
    Tuple,
    Type,
    TypeVar,
    overload,
)

if sys.version_info >= (3, 10):
    from typing import Concatenate, ParamSpec
else:
    from typing_extensions import Concatenate, ParamSpec

from . import _native

if TYPE_CHECKING:
    from ._surface import Guard

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")
GuardT = TypeVar("GuardT", bound="Guard")

ExcType = Optional[Type[BaseException]]


class Face:
    """The root of the classes of ``_surface``. A face's class derives from
    one of them and from :class:`Blocking` or :class:`Asyncio`; without a
    docstring of its own it reads as the shared class (``__doc__``, ``help()``)."""

    __slots__ = ()

    _asyncio: ClassVar[bool]
    _module: ClassVar[str]
    """The face's public module, for reprs."""
    _Scopes: ClassVar[Type[Scopes]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__doc__ is None:
            cls.__doc__ = inspect.getdoc(cls)

    def _task(self) -> Optional[str]:
        """The asyncio task a call is made for (the owner of its hold), or
        None for the calling thread."""
        raise NotImplementedError


class Scopes:
    """The guards that ``with lock:`` blocks took and have not ended, last
    first, per thread: a block ends with the guard its own thread took."""

    __slots__ = ("_local",)

    def __init__(self) -> None:
        self._local = threading.local()

    def _guards(self) -> List[Guard]:
        guards: Optional[List[Guard]] = getattr(self._local, "guards", None)
        if guards is None:
            guards = self._local.guards = []
        return guards

    def push(self, guard: GuardT) -> GuardT:
        self._guards().append(guard)
        return guard

    def pop(self) -> Guard:
        return self._guards().pop()


class TaskScopes(Scopes):
    """The same per asyncio task: tasks of one thread end blocks of their own."""

    __slots__ = ("_by_task",)

    def __init__(self) -> None:
        super().__init__()
        self._by_task: "weakref.WeakKeyDictionary[asyncio.Task[Any], List[Guard]]" = (
            weakref.WeakKeyDictionary()
        )

    def _guards(self) -> List[Guard]:
        task = asyncio.current_task()
        return super()._guards() if task is None else self._by_task.setdefault(task, [])


class Blocking(Face):
    """A class of the blocking face: calls block the calling thread (the GIL
    released) until Redis answered or the wait ended; the owner of a hold is
    the calling thread."""

    __slots__ = ()
    _asyncio = False
    _module = "leasehold"
    _Scopes = Scopes

    def _task(self) -> None:
        return None


_TASK_KEYS: "weakref.WeakKeyDictionary[asyncio.Task[Any], str]" = weakref.WeakKeyDictionary()
_NEXT_KEY = itertools.count()


class Asyncio(Face):
    """A class of the asyncio face: calls return awaitables run on the
    caller's event loop; the owner of a hold is the calling task."""

    __slots__ = ()
    _asyncio = True
    _module = "leasehold.asyncio"
    _Scopes = TaskScopes

    def _task(self) -> Optional[str]:
        try:
            task = asyncio.current_task()
        except RuntimeError:
            return None
        if task is None:
            return None
        key = _TASK_KEYS.get(task)
        if key is None:
            key = _TASK_KEYS[task] = str(next(_NEXT_KEY))
        return key


class Answer(Generic[T]):
    """A native call's answer and how to read it: ``convert`` is applied to
    its value (awaited first on the asyncio face)."""

    __slots__ = ("native", "convert")

    def __init__(self, native: Any, convert: Callable[[Any], T]) -> None:
        self.native = native
        self.convert = convert


def nothing(_: Any) -> None:
    """Reads an answer that has no value."""
    return None


def release_at_exit(native: _native.Guard, failed: bool) -> None:
    """Releases at the end of a ``with`` block: not a guard a parent process
    took (the child of a fork does not hold it), not one released in the
    block; a failed release is raised unless the block raised already."""
    if not (native.forked or native.released):
        with suppress(Exception) if failed else nullcontext():
            native.release()


async def release_at_exit_async(native: _native.Guard, failed: bool) -> None:
    """:func:`release_at_exit` for ``async with``."""
    if not (native.forked or native.released):
        with suppress(Exception) if failed else nullcontext():
            await native.release()


class Acquiring(Generic[GuardT]):
    """An acquisition: await it for the guard, or use it with ``async with``
    to release at the end of the block."""

    __slots__ = ("_start", "_guard")

    def __init__(self, start: Callable[[], Awaitable[GuardT]]) -> None:
        self._start = start
        self._guard: Optional[GuardT] = None

    def __await__(self) -> Generator[Any, None, GuardT]:
        return self._start().__await__()

    async def __aenter__(self) -> GuardT:
        self._guard = await self._start()
        return self._guard

    async def __aexit__(self, exc_type: ExcType, exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if self._guard is not None:
            await release_at_exit_async(self._guard._native, exc is not None)


def _like(call: Any, method: Callable[..., Any], returns: str = "{}") -> Any:
    """``call`` named, documented and signed as ``method``, its return
    annotation ``Answer[X]`` read as ``returns`` with X in it (what
    ``help()`` and ``typing.get_type_hints`` show)."""
    functools.update_wrapper(call, method)
    answered = str(method.__annotations__["return"])
    returned = returns.format(answered[len("Answer[") : -1])
    call.__annotations__ = {**method.__annotations__, "return": returned}
    call.__signature__ = inspect.signature(method).replace(return_annotation=returned)
    return call


def _blocking(method: Callable[..., Answer[T]]) -> Callable[..., T]:
    def call(self: Any, *args: Any, **kwargs: Any) -> T:
        answer = method(self, *args, **kwargs)
        return answer.convert(answer.native)

    return _like(call, method)  # type: ignore[no-any-return]


def _awaiting(method: Callable[..., Answer[T]]) -> Callable[..., Coroutine[Any, Any, T]]:
    async def call(self: Any, *args: Any, **kwargs: Any) -> T:
        answer = method(self, *args, **kwargs)
        return answer.convert(await answer.native)

    return _like(call, method)  # type: ignore[no-any-return]


def _acquiring(method: Callable[..., Answer[GuardT]]) -> Callable[..., Acquiring[GuardT]]:
    start = _awaiting(method)

    def call(self: Any, *args: Any, **kwargs: Any) -> Acquiring[GuardT]:
        # Nothing is sent before the acquisition is awaited: then, in the
        # task that awaits it (the owner).
        return Acquiring(lambda: start(self, *args, **kwargs))

    return _like(call, method, "Acquiring[{}]")  # type: ignore[no-any-return]


class _Method(Generic[S, P, T]):
    """A method made once per face from one that returns an :class:`Answer`."""

    _calls: Tuple[Callable[..., Any], Callable[..., Any]]
    """The blocking face's method, and the asyncio face's."""

    def __init__(self, method: Callable[Concatenate[S, P], Answer[T]]) -> None:
        self.__doc__ = method.__doc__
        self.__wrapped__ = method

    def _get(self, obj: Any, owner: Any) -> Any:
        on_asyncio: Optional[bool] = getattr(owner, "_asyncio", None)
        if on_asyncio is None:
            # A class of _surface itself: of no face.
            return self
        call = self._calls[on_asyncio]
        return call if obj is None else MethodType(call, obj)


class io(_Method[S, P, T]):
    """A method that talks to Redis: it returns the value on the blocking
    face, and is a coroutine function on the asyncio face."""

    def __init__(self, method: Callable[Concatenate[S, P], Answer[T]]) -> None:
        super().__init__(method)
        self._calls = (_blocking(method), _awaiting(method))

    @overload
    def __get__(self, obj: None, owner: Type[Blocking]) -> Callable[Concatenate[S, P], T]: ...
    @overload
    def __get__(
        self, obj: None, owner: Type[Asyncio]
    ) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, obj: Blocking, owner: Any) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: Asyncio, owner: Any) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, obj: Any, owner: Any) -> Any:
        return self._get(obj, owner)


class acquisition(_Method[S, P, GuardT]):
    """A method that waits for a guard: it returns the guard on the blocking
    face, and an :class:`Acquiring` of it on the asyncio face."""

    def __init__(self, method: Callable[Concatenate[S, P], Answer[GuardT]]) -> None:
        super().__init__(method)
        self._calls = (_blocking(method), _acquiring(method))

    @overload
    def __get__(self, obj: None, owner: Type[Blocking]) -> Callable[Concatenate[S, P], GuardT]: ...
    @overload
    def __get__(self, obj: None, owner: Type[Asyncio]) -> Callable[Concatenate[S, P], Acquiring[GuardT]]: ...
    @overload
    def __get__(self, obj: Blocking, owner: Any) -> Callable[P, GuardT]: ...
    @overload
    def __get__(self, obj: Asyncio, owner: Any) -> Callable[P, Acquiring[GuardT]]: ...
    def __get__(self, obj: Any, owner: Any) -> Any:
        return self._get(obj, owner)
