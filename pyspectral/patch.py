"""Route ``torch.linalg`` through pyspectral inside a scope.

``with pyspectral.patch_torch():`` replaces ``torch.linalg.svd``, ``svdvals``,
``eigh``, ``eigvalsh``, ``qr``, ``eig`` and ``eigvals`` by pyspectral's
functions of the same signatures, so that code written for ``torch.linalg``
(geotorch's layers, a model, a library that calls ``torch.linalg.svd``) gets
pyspectral's gradients unchanged, and puts back what was there on exit.
pyspectral itself calls torch's own functions, bound once (``_linalg``), so
no patching makes it call itself.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import torch

from .eig import eig, eigvals
from .eigh import eigh, eigvalsh
from .exceptions import InputError
from .qr import qr
from .svd import svd, svdvals

__all__ = ["DROP_INS", "patch_torch"]

# torch.linalg's functions that pyspectral replaces, with the same signature
_FUNCTIONS = {
    "svd": svd,
    "svdvals": svdvals,
    "eigh": eigh,
    "eigvalsh": eigvalsh,
    "qr": qr,
    "eig": eig,
    "eigvals": eigvals,
}
DROP_INS = tuple(_FUNCTIONS)

# One installation for the process: torch.linalg is one module for every
# thread. Each name counts the scopes that hold it; the first installs, the
# last restores what it found.
_lock = threading.Lock()
_holders: dict[str, int] = {}
_found: dict[str, Any] = {}


class patch_torch(contextlib.ContextDecorator):
    """``torch.linalg.<name>`` is pyspectral's function for each of ``names``
    (default: every drop-in, ``DROP_INS``) while the scope lasts; on exit
    what was there before is put back.

    A context manager, a decorator, or ``p = patch_torch(); p.start()`` ...
    ``p.stop()``. Scopes nest and overlap: a name stays patched until the last
    scope that holds it ends. The patch is process-wide, as ``torch.linalg``
    is one module: while it is active, every thread's calls of
    ``torch.linalg.svd`` run pyspectral's (installing and restoring are
    locked, so concurrent scopes are safe; a thread that must keep torch's
    own calls ``torch._C._linalg.linalg_svd``). Code that took the function
    before the scope (``from torch.linalg import svd``) keeps what it took.

    Raises:
        InputError: a name that is not a drop-in, or ``stop()`` without a
            matching ``start()``.

    Example::

        >>> import torch, pyspectral as ps
        >>> with ps.patch_torch():
        ...     torch.linalg.svd is ps.svd
        True
        >>> torch.linalg.svd is ps.svd
        False
    """

    def __init__(self, *names: str) -> None:
        unknown = [n for n in names if n not in DROP_INS]
        if unknown:
            raise InputError(
                f"patch_torch: {unknown} are not among the functions pyspectral "
                f"replaces, {DROP_INS}; name some of those, or none for all"
            )
        self.names = tuple(dict.fromkeys(names)) or DROP_INS
        self._depth = 0
        self._instance_lock = threading.Lock()

    def start(self) -> patch_torch:
        """Install (or hold again) the patch; returns this object."""
        with self._instance_lock:
            self._depth += 1
            if self._depth > 1:
                return self
        with _lock:
            for name in self.names:
                if _holders.get(name, 0) == 0:
                    _found[name] = getattr(torch.linalg, name)
                    setattr(torch.linalg, name, _FUNCTIONS[name])
                _holders[name] = _holders.get(name, 0) + 1
        return self

    def stop(self) -> None:
        """Release this scope; the last one out restores ``torch.linalg``."""
        with self._instance_lock:
            if self._depth == 0:
                raise InputError("patch_torch: stop() without a matching start()")
            self._depth -= 1
            if self._depth > 0:
                return
        with _lock:
            for name in self.names:
                _holders[name] -= 1
                if _holders[name] == 0:
                    setattr(torch.linalg, name, _found.pop(name))

    def __enter__(self) -> patch_torch:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
