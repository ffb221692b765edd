"""Forward computations that are more than a ``torch.linalg`` call: the
iterative top-k path in ``topk.py`` (as ``julia/PySpectral/src/forward/topk.jl``).

Like ``pullbacks``, this layer imports only ``_common``, ``_fns``,
``exceptions`` and torch.
"""

from .topk import randomized_eigh, randomized_svd, top_k_method

__all__ = ["randomized_eigh", "randomized_svd", "top_k_method"]
