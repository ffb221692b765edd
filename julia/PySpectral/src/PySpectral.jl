"""
    PySpectral

SVD, Hermitian eigendecomposition and spectral matrix functions whose pullbacks are
finite and correct at degenerate and near-degenerate spectra, zero singular values
and complex phases; the source of truth for pyspectral's rules (see MATH in the
pyspectral README). Forward functions return plain arrays; `src/pullbacks` holds the
pullbacks (and their transposes, the pushforwards) as plain functions; `src/rrules.jl`
and `src/frules.jl` are the ChainRulesCore glue.

`PySpectral.svd`, `svdvals`, `qr`, `lq` and `eigvals` are not LinearAlgebra's functions
of those names and are not exported (that would clash with LinearAlgebra's exports):
call them qualified. Nor is `PySpectral.linsolve` (KrylovKit exports a `linsolve`,
which it calls).
"""
module PySpectral

using LinearAlgebra: LinearAlgebra, Eigen, Hermitian, I, LAPACK, SVD, dot, norm
using ChainRulesCore: ChainRulesCore, AbstractZero, HasReverseMode, NoTangent, ProjectTo,
    RuleConfig, Tangent, ZeroTangent, rrule_via_ad, unthunk
using KrylovKit: KrylovKit
using PrecompileTools: @compile_workload, @setup_workload
using Random: Random

export svd_function, eigh, eigvalsh, matrix_function, svd_topk, eigh_topk
export eig, polar, eig_function, eig_topk, eig_topk_pullback!
export tsvd, teigh, truncation_rank, truncation_error, svd_split
export svd_pullback!, svdvals_pullback!, svd_function_pullback!, eigh_pullback!,
    matrix_function_pullback!
export svd_trunc_pullback!, eigh_trunc_pullback!, dense_truncated_svd_pullback!,
    dense_truncated_eigh_pullback!, svd_split_pullback!, svd_split_pushforward
export svd_pushforward, svd_function_pushforward, eigh_pushforward,
    matrix_function_pushforward
export qr_pullback!, lq_pullback!, polar_pullback!, eig_pullback!, qr_pushforward,
    lq_pushforward, polar_pushforward, eig_pushforward
export eig_function_pullback!, eig_function_pushforward
export truncated_svd_pushforward, truncated_eigh_pushforward,
    dense_truncated_svd_pushforward, dense_truncated_eigh_pushforward
export fixed_point, linsolve_pullback!, fixed_point_pullback!
export GaugeError, GaugeRecorder, DerivativeError
export SpectralValues

include("common/defaults.jl")
include("common/safemethods.jl")
include("common/gauge.jl")
include("forward/truncation.jl")
include("forward/svd.jl")
include("forward/eigh.jl")
include("forward/topk.jl")
include("forward/qr.jl")
include("forward/eig.jl")
include("forward/polar.jl")
include("forward/eigfun.jl")
include("forward/eig_topk.jl")
include("forward/linsolve.jl")
include("forward/fixed_point.jl")
include("pullbacks/svd.jl")
include("pullbacks/eigh.jl")
include("pullbacks/matfun.jl")
include("pullbacks/truncated.jl")
include("pullbacks/split.jl")
include("pullbacks/qr.jl")
include("pullbacks/lq.jl")
include("pullbacks/polar.jl")
include("pullbacks/eig.jl")
include("pullbacks/eigfun.jl")
include("pullbacks/eig_topk.jl")
include("pullbacks/linsolve.jl")
include("pullbacks/fixed_point.jl")
include("rrules.jl")
include("frules.jl")
include("precompile.jl")

end # module
