"""pyspectral: SVD, eigh and spectral matrix functions for PyTorch with correct,
finite gradients at degenerate spectra."""

from ._common import defaults, get_defaults, set_defaults
from .eigh import EighResult, eigh, eigvalsh, matrix_function
from .exceptions import (
    BackendError,
    DomainError,
    GaugeError,
    GaugeWarning,
    InputError,
    InputTypeError,
    JuliaError,
    PySpectralError,
)
from .svd import SVDResult, svd, svd_function, svdvals

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "DomainError",
    "EighResult",
    "GaugeError",
    "GaugeWarning",
    "InputError",
    "InputTypeError",
    "JuliaError",
    "PySpectralError",
    "SVDResult",
    "__version__",
    "defaults",
    "eigh",
    "eigvalsh",
    "get_defaults",
    "matrix_function",
    "set_defaults",
    "svd",
    "svd_function",
    "svdvals",
]
