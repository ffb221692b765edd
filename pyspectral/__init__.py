"""pyspectral: SVD, eigh, spectral matrix functions, QR/LQ, polar and eig for
PyTorch with correct, finite gradients at degenerate spectra."""

# First: importing the Julia subpackage starts Julia before torch is loaded
# when that is asked for (see pyspectral/julia/__init__.py).
from . import julia
from ._settings import defaults, get_defaults, set_defaults
from .blocks import svd_blocks
from .eig import EigResult, eig, eigvals
from .eig_topk import EigTopKInfo, EigTopKResult, eig_topk
from .eigfun import eig_function
from .eigh import EighResult, eigh, eigvalsh, matrix_function
from .exceptions import (
    BackendError,
    ChoiceError,
    ConvergenceWarning,
    DerivativeError,
    DomainError,
    DtypeError,
    GaugeError,
    GaugeWarning,
    InputError,
    InputTypeError,
    JuliaError,
    NonFiniteError,
    PySpectralError,
    ShapeError,
    UPLOError,
)
from .fixed_point import FixedPointInfo, fixed_point
from .linsolve import LinsolveInfo, linsolve
from .operator import LinearOperator, eigh_topk, svd_topk
from .patch import patch_torch
from .polar import PolarResult, polar
from .qr import LQResult, QRResult, lq, qr
from .split import SVDSplit, TruncatedSVDSplit
from .svd import SVDResult, svd, svd_function, svdvals
from .truncation import TruncatedEighResult, TruncatedSVDResult

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "ConvergenceWarning",
    "DerivativeError",
    "DomainError",
    "DtypeError",
    "EigResult",
    "FixedPointInfo",
    "EighResult",
    "GaugeError",
    "GaugeWarning",
    "InputError",
    "InputTypeError",
    "JuliaError",
    "LQResult",
    "LinearOperator",
    "LinsolveInfo",
    "NonFiniteError",
    "PolarResult",
    "PySpectralError",
    "QRResult",
    "SVDResult",
    "SVDSplit",
    "ShapeError",
    "TruncatedEighResult",
    "TruncatedSVDResult",
    "TruncatedSVDSplit",
    "UPLOError",
    "ChoiceError",
    "EigTopKInfo",
    "EigTopKResult",
    "__version__",
    "defaults",
    "eig",
    "eig_function",
    "eig_topk",
    "eigh",
    "eigh_topk",
    "eigvals",
    "eigvalsh",
    "fixed_point",
    "get_defaults",
    "julia",
    "linsolve",
    "lq",
    "matrix_function",
    "patch_torch",
    "polar",
    "qr",
    "set_defaults",
    "svd",
    "svd_blocks",
    "svd_function",
    "svd_topk",
    "svdvals",
]
