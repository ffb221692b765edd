"""The math of every pullback as plain torch functions, one file per
decomposition, with the names of ``julia/PySpectral/src/pullbacks/*.jl``:
``svd.py``, ``eigh.py``, ``matfun.py``, ``truncated.py``.

Nothing here knows about a backend: this layer imports only ``common``, the
base modules (``_settings``, ``_validation``, ``_autograd``, ``_second_order``,
``_warnings``), ``_fns``, ``exceptions`` and torch, and the public modules
(``svd.py``, ``eigh.py``, ``topk.py``) build their autograd Functions on top of
it.
"""

from .eigh import eigh_pullback, fold_triangle
from .matfun import matrix_function_pullback
from .svd import svd_function_pullback, svd_pullback
from .truncated import truncated_eigh_pullback, truncated_svd_pullback

__all__ = [
    "eigh_pullback",
    "fold_triangle",
    "matrix_function_pullback",
    "svd_function_pullback",
    "svd_pullback",
    "truncated_eigh_pullback",
    "truncated_svd_pullback",
]
