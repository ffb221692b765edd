"""Warnings attributed to the user's line: the innermost frame outside torch
and pyspectral, also when raised inside autograd's backward.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import Any

import torch

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
    """
    caller = sys._getframe(1)
    frame = _user_frame(caller)
    filename, lineno, globals_ = (
        _site(frame) if frame is not None else site or _site(caller)
    )
    # No module_globals, as warnings.warn passes none: with them, Python asks
    # the module's __loader__ for its source, and the loader of an
    # interactive __main__ (REPL, python -c, piped stdin) raises ImportError
    # instead of the warning. The line's text is found as warnings.warn finds
    # it, through linecache when the warning is shown.
    warnings.warn_explicit(
        message,
        category,
        filename,
        lineno,
        module=globals_.get("__name__", "<string>"),
        registry=globals_.setdefault("__warningregistry__", {}),
    )
