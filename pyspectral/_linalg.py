"""torch's own linear algebra, bound once at import.

Every ``torch.linalg`` function pyspectral calls is taken here from
``torch._C._linalg``, the builtins ``torch.linalg`` re-exports, not looked up
on ``torch.linalg`` at call time: code that routes ``torch.linalg.svd`` (and
the rest) to pyspectral, by :func:`pyspectral.patch_torch` or by assigning
``torch.linalg.svd = pyspectral.svd`` itself, before or after pyspectral is
imported, can never make pyspectral call itself.
"""

from __future__ import annotations

from torch._C import _linalg as _builtins

eig = _builtins.linalg_eig
eigh = _builtins.linalg_eigh
eigvals = _builtins.linalg_eigvals
eigvalsh = _builtins.linalg_eigvalsh
inv = _builtins.linalg_inv
lu_factor = _builtins.linalg_lu_factor
lu_factor_ex = _builtins.linalg_lu_factor_ex
lu_solve = _builtins.linalg_lu_solve
matrix_exp = _builtins.linalg_matrix_exp
matrix_norm = _builtins.linalg_matrix_norm
matrix_power = _builtins.linalg_matrix_power
matrix_rank = _builtins.linalg_matrix_rank
qr = _builtins.linalg_qr
solve = _builtins.linalg_solve
solve_triangular = _builtins.linalg_solve_triangular
svd = _builtins.linalg_svd
svdvals = _builtins.linalg_svdvals
vector_norm = _builtins.linalg_vector_norm
