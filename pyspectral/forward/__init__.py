"""Forward computations that are more than a ``torch.linalg`` call: the
iterative top-k path in ``topk.py`` (as ``julia/PySpectral/src/forward/topk.jl``)
and the truncation rules in ``truncation.py`` (as ``forward/truncation.jl``).

Like ``pullbacks``, this layer imports only ``common``, the base modules,
``_fns``, ``exceptions`` and torch.
"""

from .topk import TopKConfig, TopKResult, eigh_topk, svd_topk, top_k_method
from .truncation import TruncationRule, truncation_rank

__all__ = [
    "TopKConfig",
    "TopKResult",
    "TruncationRule",
    "eigh_topk",
    "svd_topk",
    "top_k_method",
    "truncation_rank",
]
