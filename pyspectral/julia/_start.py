"""How pyspectral starts Julia: juliacall's options (signal handling, Julia's
threads, pyspectral's system image), set before juliacall's import. Imports
neither torch nor juliacall (``pyspectral.julia`` runs it before torch loads)."""

from __future__ import annotations

import importlib
import os
from collections.abc import MutableMapping
from typing import Any

from . import _sysimage


def import_juliacall() -> Any:
    """Import juliacall, which starts Julia as :func:`prepare_start` sets up,
    and start the image's warm-up (:func:`pyspectral.julia._sysimage.warm_up`)."""
    prepare_start()
    juliacall = importlib.import_module("juliacall")
    _sysimage.warm_up(juliacall.Main)
    return juliacall


def prepare_start(environ: MutableMapping[str, str] = os.environ) -> None:
    """juliacall's options where pyspectral starts Julia (before juliacall's
    import; the user's own settings win): Julia handles signals
    (``PYTHON_JULIACALL_HANDLE_SIGNALS=yes``, what juliacall asks for with
    threads), one Julia thread per CPU this process may use, as torch's
    intra-op threads (a batch of small matrices runs on them; set
    ``PYTHON_JULIACALL_THREADS=1`` for one), and pyspectral's system image
    when one is built and fresh (:mod:`pyspectral.julia._sysimage`)."""
    environ.setdefault("PYTHON_JULIACALL_HANDLE_SIGNALS", "yes")
    if "PYTHON_JULIACALL_THREADS" not in environ and "JULIA_NUM_THREADS" not in environ:
        environ["PYTHON_JULIACALL_THREADS"] = str(cpus())
    _sysimage.prepare(environ)


def cpus() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
