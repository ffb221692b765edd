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
    added = prepare_start()
    try:
        juliacall = importlib.import_module("juliacall")
    finally:
        forget_options(added)
    _sysimage.warm_up(juliacall.Main)
    return juliacall


def forget_options(
    added: dict[str, str], environ: MutableMapping[str, str] = os.environ
) -> None:
    """After juliacall's import (which reads them once): remove the options
    :func:`prepare_start` ``added`` that still hold its values, so that a
    subprocess (another environment, another image) does not inherit this
    process's Julia settings; where pyspectral starts Julia there, it chooses
    them anew."""
    for key, value in added.items():
        if environ.get(key) == value:
            del environ[key]


def prepare_start(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """juliacall's options where pyspectral starts Julia (before juliacall's
    import; the user's own settings win): Julia handles signals
    (``PYTHON_JULIACALL_HANDLE_SIGNALS=yes``, what juliacall asks for with
    threads), one Julia thread per CPU this process may use, as torch's
    intra-op threads (a batch of small matrices runs on them; set
    ``PYTHON_JULIACALL_THREADS=1`` for one), and pyspectral's system image
    when one is built and fresh (:mod:`pyspectral.julia._sysimage`). Returns
    the options it added (for :func:`forget_options`)."""
    before = dict(environ)
    environ.setdefault("PYTHON_JULIACALL_HANDLE_SIGNALS", "yes")
    if "PYTHON_JULIACALL_THREADS" not in environ and "JULIA_NUM_THREADS" not in environ:
        environ["PYTHON_JULIACALL_THREADS"] = str(cpus())
    _sysimage.prepare(environ)
    return {k: v for k, v in environ.items() if k not in before}


def cpus() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
