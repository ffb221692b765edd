"""Warnings attributed to the user's line: the innermost frame outside torch
and pyspectral, also when raised inside autograd's backward; a repeated one
with a stable text, so that Python's once-per-location rule collapses it.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import warnings
from typing import Any

import torch

# Library code a warning must not be attributed to: torch, pyspectral, and the
# thread machinery (a thread that runs ``loss.backward`` directly has no frame
# of the user's).
_LIBRARY = (
    *(os.path.dirname(os.path.abspath(p)) + os.sep for p in (torch.__file__, __file__)),
    os.path.abspath(threading.__file__),
)
_INTERNAL: dict[str, bool] = {}  # co_filename -> library code


def _internal(filename: str) -> bool:
    """Whether code in ``filename`` is library code (see ``_LIBRARY``)."""
    known = _INTERNAL.get(filename)
    if known is None:
        known = _INTERNAL[filename] = os.path.abspath(filename).startswith(_LIBRARY)
    return known


def _user_frame(frame: Any) -> Any:
    """The innermost frame at or above ``frame`` outside library code (None if
    there is none: a thread that only runs library code)."""
    while frame is not None and _internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_frame_site() -> tuple[str, int, dict[str, Any]] | None:
    """``(filename, lineno, globals)`` of the user's line calling pyspectral."""
    frame = _user_frame(sys._getframe(1))
    return None if frame is None else _site(frame)


def _site(frame: Any) -> tuple[str, int, dict[str, Any]]:
    return frame.f_code.co_filename, frame.f_lineno, frame.f_globals


# A measured value in a message: a number as f"{x:.3g}" writes it (0.138,
# 4.76e-13, 1e-10, -0.5, inf, nan, 123), standing alone. Not one inside code
# (eps**(3/4), 2048³, s[2], k=10, n_iter=1, float64, ('pow', 1)): no word
# character, ".", bracket, operator, "=", ":" or quote next to it, nor
# "', " before it.
_NUMBER = re.compile(
    r"""(?<![\w.\[\]*/^=:'"`+-])(?<!',[ ])(?<!",[ ])
    (?P<num>[-+]?(?:\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|inf|nan))
    (?![\w\[\]*/^(=:'"`]|[.+-]\w)""",
    re.VERBOSE,
)
# An integer-looking number is a measured value (f"{123.4:.3g}" is "123") where
# a comparison or a measure names it ("measured 123 >", "> 12)", "gap 5,",
# "value 100 is", "needed is 1 (") and no formula goes on ("gap 2 |w_i -
# w_j|"); other integers ("in 200 iterations", "(rank 5)", "k = 2") are kept.
_CUE_BEFORE = re.compile(
    r"(?:[<>≤≥]|\b(?:measured|spread|allowed|gap|residual|tolerance|gauge_atol"
    r"|coupling|about|limit|resolution|value|is))\s+$"
)
_CUE_AFTER = re.compile(r"\s+[<>≤≥]")
_FORMULA_AFTER = re.compile(r"\s*[|*/^]")
PLACEHOLDER = "<value>"
# Appended to a repeated warning's stable text.
REPEATED = (
    " [Repeated: the values of each occurrence are on the warning object, "
    "w.message.measured and w.message.detail.]"
)


def stable_text(message: str) -> tuple[str, tuple[float, ...]]:
    """``message`` with its measured values replaced by ``PLACEHOLDER``, and
    those values, in order: the same text for every occurrence of one cause."""
    parts: list[str] = []
    values: list[float] = []
    end = 0
    for m in _NUMBER.finditer(message):
        num = m.group("num")
        integer = num.lstrip("+-").isdigit()
        if integer and (
            _FORMULA_AFTER.match(message, m.end())
            or not (
                _CUE_BEFORE.search(message[max(m.start() - 24, 0) : m.start()])
                or _CUE_AFTER.match(message, m.end())
            )
        ):
            continue
        parts += (message[end : m.start()], PLACEHOLDER)
        values.append(float(num))
        end = m.end()
    if not values:
        return message, ()
    parts.append(message[end:])
    return "".join(parts), tuple(values)


# The actions of Python's warnings filter that show a warning once per
# registry key (text, category, line): "default" (per line), "module", "once".
# Only under them does a repeated warning take its stable text; under "always"
# (and "all"), "error" and "ignore" every occurrence has its full text.
_COLLAPSING = frozenset({"default", "module", "once"})


def _action(
    filters: list[Any], text: str, category: type[Warning], module: str, lineno: int
) -> str:
    """The action ``warnings.warn_explicit`` takes for this warning: that of the
    first filter matching it, as Python's lookup does, else
    ``warnings.defaultaction`` ("default" where a filter is of no known form)."""
    for item in filters:
        try:
            action, msg, cat, mod, ln = item
            if (
                (msg is None or msg.match(text))
                and issubclass(category, cat)
                and (
                    mod is None
                    or (mod == module if isinstance(mod, str) else mod.match(module))
                )
                and (ln == 0 or ln == lineno)
            ):
                return str(action)
        except (TypeError, ValueError, AttributeError):
            return "default"
    return str(getattr(warnings, "defaultaction", "default"))


# The causes warned under a collapsing action since the filters last changed,
# (category, filename, lineno, stable text), each with the full message of its
# first occurrence. Python forgets what it has shown when the filters change
# (catch_warnings, simplefilter, pytest.warns), and so does this: it belongs
# to the list warnings.filters and its contents at the time (the list held,
# so that a new one cannot take its id). Bounded, and guarded by a lock
# (warnings come from autograd's device threads too).
_MAX_SEEN = 4096
_seen: dict[tuple[Any, ...], str] = {}
_seen_under: tuple[Any, tuple[Any, ...]] = (None, ())
_lock = threading.Lock()


def _repeated(filters: list[Any], key: tuple[Any, ...], message: str) -> bool:
    """Whether ``message`` repeats the cause ``key`` under ``filters`` with
    other values than its first occurrence (which it records)."""
    global _seen_under
    under = (filters, tuple(filters))
    with _lock:
        if under[0] is not _seen_under[0] or under[1] != _seen_under[1]:
            _seen.clear()
            _seen_under = under
        first = _seen.get(key)
        if first is None:
            if len(_seen) >= _MAX_SEEN:
                _seen.clear()
            _seen[key] = message
        # the first's very text again: Python's registry has it
        return first is not None and first != message


def _reset() -> None:
    """Forget the warnings warned so far (for tests): the next occurrence of
    each cause has its full text again."""
    global _seen_under
    with _lock:
        _seen.clear()
        _seen_under = (None, ())


def warn(message: str, category: type[Warning], site: Any = None) -> None:
    """``warnings.warn`` attributed to the user's line: the innermost frame
    outside torch and pyspectral.

    A fixed ``stacklevel`` cannot do it: a warning from a pullback is raised
    inside torch's autograd engine (``loss.backward()``, ``torch.autograd.grad``,
    ``torch.func``), at a depth that depends on the entry point and the torch
    version; the user's frame is still on the stack, below them. Where none is
    (a backward run by an autograd device thread, as for CUDA tensors), the
    warning names ``site``, the user's line of the forward call
    (``Options.site``), else the pyspectral line that raised it. Filters and
    the once-per-location registry work as for ``warnings.warn``.

    Python's registry is keyed by the text, and a message carries measured
    values, different at each occurrence (each step of an optimisation). So,
    under a filter action that shows a warning once ("default", Python's,
    "module", "once"), the first occurrence of a cause (category, line,
    :func:`stable_text`) has the full ``message`` and every later one with
    other values the stable text plus ``REPEATED`` (one with the same values
    keeps the text Python has shown): each cause shows at most twice per
    line. Under ``"always"`` and ``"error"`` every occurrence is warned /
    raised with its full text. The warning is an instance of ``category``
    with the values on it either way: ``detail`` (the full message) and
    ``measured`` (its values, as floats).
    """
    caller = sys._getframe(1)
    frame = _user_frame(caller)
    filename, lineno, globals_ = (
        _site(frame) if frame is not None else site or _site(caller)
    )
    module = globals_.get("__name__", "<string>")
    stable, measured = stable_text(message)
    text = message
    if measured:
        filters = warnings.filters
        if _action(filters, message, category, module, lineno) in _COLLAPSING:
            if _repeated(filters, (category, filename, lineno, stable), message):
                text = stable + REPEATED
    warning = category(text)
    warning.detail = message  # type: ignore[attr-defined]
    warning.measured = measured  # type: ignore[attr-defined]
    # No module_globals, as warnings.warn passes none: with them, Python asks
    # the module's __loader__ for its source, and the loader of an
    # interactive __main__ (REPL, python -c, piped stdin) raises ImportError
    # instead of the warning. The line's text is found as warnings.warn finds
    # it, through linecache when the warning is shown.
    warnings.warn_explicit(
        warning,
        category,
        filename,
        lineno,
        module=module,
        registry=globals_.setdefault("__warningregistry__", {}),
    )
