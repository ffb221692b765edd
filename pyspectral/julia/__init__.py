"""Julia from PyTorch: prototype a rule in Julia and call it on tensors, and run
Julia rule tests; and, in this subpackage, the Julia backend itself.

Workflow: write a function (and, if you like, its ``ChainRulesCore.rrule``) in
a ``.jl`` file; ``ps.julia.include("rules.jl")``; ``f = ps.julia.function("f")``;
call ``f(x)`` on tensors and backpropagate. Edit the file and ``include`` it
again: the next call uses the new rule. Test it with ChainRulesTestUtils'
``test_rrule`` in a ``@testset`` and run ``python -m pyspectral test-julia
file.jl``.

Julia starts on first use. Inputs are CPU tensors (copied into Julia
``Array``s, which rules may dispatch on or mutate); outputs are arrays or
numbers, returned as tensors sharing Julia's memory.

The backend's modules, one concern each: ``_probe`` (whether Julia can start;
starting it before torch), ``_bridge`` (the only importer of juliacall: start,
lock, calls, errors), ``_convert`` (tensors across, zero copy), ``_svd`` and
``_eigh`` (the ops), ``_events`` (Julia's warnings as the native ones),
``_blas`` (Julia's BLAS), ``_start`` and ``_sysimage`` (how Julia starts,
its system image), ``_install``, ``_functions`` and ``_testsets`` (the
API below) and ``glue.jl`` (the Julia side of the bridge).
"""

from . import _probe

if _probe.julia_first():
    # Start Julia before torch loads (the modules below import it), the order
    # that avoids the crashes of PythonCall.jl #215/#384: when
    # PYSPECTRAL_START_JULIA asks for it, or for pyspectral's own Julia
    # commands. pyspectral/__init__.py imports this subpackage first.
    from . import _start

    _probe.start_julia(start=_start.import_juliacall)

from ._functions import JuliaFunction, function, include  # noqa: E402
from ._testsets import (  # noqa: E402
    PACKAGE_TESTS,
    TEST_PACKAGES,
    missing_test_packages,
    run_tests,
    run_testset,
    testset_names,
)

__all__ = [
    "function",
    "include",
    "JuliaFunction",
    "testset_names",
    "run_testset",
    "run_tests",
    "PACKAGE_TESTS",
    "TEST_PACKAGES",
    "missing_test_packages",
]
