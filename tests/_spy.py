"""A spy on every Julia call the bridge makes, for the tests that run against
real Julia (tests/test_julia_backend.py).

Every glue call goes through one seam, ``pyspectral.julia._bridge._state["enter"]``
(the glue's ``logged``, resolved once when Julia starts: the bridge keeps the
glue functions themselves, so replacing glue names later would change
nothing). :func:`install` puts a Julia function there that records what Julia
received and returned, then calls the real ``logged``: the bridge's lock, GC
pause on foreign threads and error translation still run, only the entry is
spied on. For each call it records the glue function's name, the Python and
the Julia thread, whether GC was enabled, and every array among the
arguments and results as Julia holds it: ``"wrapped"`` for a tensor's memory
(the glue's own ``wrap`` of the ``(address, code, dims...)`` the bridge sent,
so the address is what Julia computes on), ``"Array"`` for an array Julia
allocated (a result, or one passed back as a handle), with Julia's
``pointer`` and ``size``.

A spy that sees nothing proves nothing: :meth:`Spy.take` raises unless the
spy recorded at least one call since the last take (test_julia_bridge.py
checks that it does, on a spy that recorded nothing).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NamedTuple

SPY_JL = """
module PySpectralSpy

const LOG = Any[]

# A tensor as the bridge sends it: (address, code, dims...), an address being far
# above the small integers of other tuples (top-k's d, f's (name, p)).
is_tensor(x) = x isa Tuple && length(x) in (4, 5) && all(y -> y isa Integer, x) &&
               x[1] > typemax(UInt32) && 1 <= x[2] <= 4

# (kind, address, size) of each array in an argument, as the glue holds it.
received(glue, x) = is_tensor(x) ? Any[("wrapped", glue.wrap(x))] :
                    x isa Array ? Any[("Array", x)] : Any[]
# ... and in a result: the glue's out tuples (array, address, size, code).
results(x::Array) = Any[("Array", x)]
results(x::Tuple) = reduce(vcat, map(results, x); init=Any[])
results(x) = Any[]

describe(kx) = (kx[1], UInt(pointer(kx[2])), size(kx[2]))

# GC.enable returns the previous state; setting it back changes nothing.
gc_enabled() = (on = GC.enable(false); GC.enable(on); on)

function spy(glue::Module, pythread::Integer, enter, f, args...)
    gc = gc_enabled()
    seen = reduce(vcat, (received(glue, a) for a in args); init=Any[])
    value = enter(f, args...)  # (result, logs)
    returned = results(first(value))
    push!(LOG, (String(nameof(f)), pythread, Threads.threadid(), gc,
                Tuple(map(describe, seen)), Tuple(map(describe, returned))))
    return value
end

# A copy first: Julia 1.9 and 1.10 fold `Tuple(LOG)` of this const global into the
# constant it had when first compiled, so every later call would return that.
take_log() = (log = copy(LOG); empty!(LOG); Tuple(log))

end
"""


class JArray(NamedTuple):
    """An array as Julia holds it: ``"wrapped"`` (a tensor's memory) or
    ``"Array"`` (Julia's own), its ``pointer`` and its (Julia) size."""

    kind: str
    address: int
    size: tuple


class Call(NamedTuple):
    name: str
    pythread: int
    jlthread: int
    gc_enabled: bool
    args: tuple[JArray, ...]
    results: tuple[JArray, ...]


class SpySawNothing(AssertionError):
    """The spy recorded no Julia call where the test expected some: nothing
    the test would assert about them was checked."""


class Spy:
    """The calls recorded by the Julia spy; ``read_log()`` returns (and
    clears) its log."""

    def __init__(self, read_log: Callable[[], Any]):
        self._read = read_log

    def take(self, *, allow_none: bool = False) -> list[Call]:
        """The glue calls since the last ``take``, in order. Raises
        :class:`SpySawNothing` if there is none (unless ``allow_none``)."""
        calls = [
            Call(
                str(name),
                int(pythread),
                int(jlthread),
                bool(gc),
                tuple(JArray(str(k), int(a), tuple(s)) for k, a, s in args),
                tuple(JArray(str(k), int(a), tuple(s)) for k, a, s in results),
            )
            for name, pythread, jlthread, gc, args, results in self._read()
        ]
        if not calls and not allow_none:
            raise SpySawNothing(
                "the spy recorded no Julia call: it is not on the path the bridge "
                "takes (pyspectral.julia._bridge._state['enter']), so nothing was "
                "checked"
            )
        return calls

    def clear(self) -> None:
        self.take(allow_none=True)


def data_calls(calls: list[Call]) -> list[Call]:
    """The calls that pass arrays to Julia (bookkeeping calls pass none)."""
    return [c for c in calls if c.args]


def install(monkeypatch: Any, julia_main: Any, bridge: Any) -> Spy:
    """Put the spy on the bridge's entry (``bridge._state["enter"]``) for the
    duration of a test (``monkeypatch`` undoes it); Julia must be running."""
    if not bool(julia_main.seval("isdefined(Main, :PySpectralSpy)")):
        julia_main.seval(SPY_JL)
    module = julia_main.PySpectralSpy
    spy_fn, glue, enter = module.spy, bridge.glue(), bridge._state["enter"]

    def spying_enter(f: Any, *args: Any) -> Any:
        return spy_fn(glue, threading.get_ident(), enter, f, *args)

    monkeypatch.setitem(bridge._state, "enter", spying_enter)
    spy = Spy(module.take_log)
    spy.clear()
    return spy
