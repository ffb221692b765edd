# Forward SVD. LAPACK overwrites its input, so it gets a private dense copy of `A`
# (which may be any AbstractMatrix, e.g. a strided view of foreign memory); the
# results are plain Matrix/Vector fields of a LinearAlgebra.SVD.
#
# `PySpectral.svd` is a function of its own, not a method of `LinearAlgebra.svd`:
# adding our rrule to `LinearAlgebra.svd` would be type piracy and would clash with
# ChainRules.jl's rule. With `using LinearAlgebra, PySpectral` call it qualified.

# LAPACK element type for `A`: Float32/Float64/ComplexF32/ComplexF64 (integers and
# Float16 are promoted).
_lapack_eltype(A) = promote_type(Float32, float(eltype(A)))

function _check_finite(op, A)
    all(isfinite, A) && return nothing
    throw(ArgumentError("$op: A contains NaN or Inf entries (size $(size(A))); " *
                        "the decomposition of such a matrix is undefined"))
end

"""
    svd(A; full=false, k=nothing, atol=nothing, rtol=nothing, error_atol=nothing,
        error_rtol=nothing, multiplets=:cut, min_rank=nothing, degeneracy_atol=nothing,
        broadening=nothing, gauge=:warn, gauge_atol=nothing) -> LinearAlgebra.SVD

Singular value decomposition `A = U Diagonal(S) Vᴴ`, `S` descending, with a stable
pullback. `F.U`, `F.S`, `F.Vt` are a plain `Matrix`, `Vector`, `Matrix` (`F.V` is
`F.Vt'`, as in LinearAlgebra). Thin by default; `full=true` gives square `U`, `Vᴴ`
(their extra columns count through their span).

Truncation (see [`truncation_rank`](@ref)): `k` keeps at most `k` triplets (any
`k >= 0`: past `min(m, n)` every triplet, as tensor-network codes clamp a bond
dimension); `atol`, `rtol` the `Sᵢ > max(atol, rtol S₁)`; `error_atol`, `error_rtol` the
fewest whose discarded values have `norm(S_discarded) <= max(error_atol, error_rtol
norm(S))`; `multiplets` (`:cut`, `:down`, `:up`) moves the cut to a multiplet boundary;
`min_rank` is a floor (at least `min(min_rank, min(m, n))` triplets, zeros included; at
most `k`). The pullback of the kept triplets
includes the exact coupling to the discarded ones (the rank is piecewise constant: the
gradient of the fixed-rank problem). [`tsvd`](@ref) also returns the truncation error.

The remaining keywords only configure the pullback (see [`svd_pullback!`](@ref)):
singular values closer than `degeneracy_atol` (default `maximum(S) eps^(3/4)`) form a
degenerate cluster; `broadening = η` replaces the cutoff `1/x` by `x/(x²+η²)`; `gauge`
(`:warn`, `:raise`, `:ignore` or a function) is what happens when the loss depends on
the basis inside a cluster.

Gradients are finite at every spectrum and exact for losses that see `U`, `V` through
complete degenerate clusters (projectors, the polar factor `U Vᴴ`) and `S` through
symmetric functions; for `U f(S) Vᴴ` use [`svd_function`](@ref).

Not `LinearAlgebra.svd`: call it as `PySpectral.svd` when both are loaded.
"""
function svd(A::AbstractMatrix; full::Bool=false, k::Union{Nothing,Integer}=nothing,
             atol=nothing, rtol=nothing, error_atol=nothing, error_rtol=nothing,
             multiplets::Symbol=:cut, min_rank=nothing, degeneracy_atol=nothing,
             broadening=nothing, gauge=:warn, gauge_atol=nothing)
    _check_options("svd"; degeneracy_atol, broadening, gauge, gauge_atol)
    trunc = (; k, atol, rtol, error_atol, error_rtol, multiplets, min_rank)
    _check_truncation("svd", min(size(A)...), full; trunc...)
    _check_finite("svd", A)
    F = LinearAlgebra.svd!(Matrix{_lapack_eltype(A)}(A); full=full)
    _truncates(k, atol, rtol, error_atol, error_rtol) || return F
    return _topk(F, truncation_rank(F.S; trunc..., degeneracy_atol))
end

_topk(F::SVD, k) = SVD(F.U[:, 1:k], F.S[1:k], F.Vt[1:k, :])

"""
    tsvd(A; k=nothing, atol=nothing, rtol=nothing, error_atol=nothing, error_rtol=nothing,
         multiplets=:cut, min_rank=nothing, degeneracy_atol=nothing, broadening=nothing,
         gauge=:warn, gauge_atol=nothing) -> (F::SVD, ϵ)

The truncated SVD `F = svd(A; k, atol, ...)` (the same rules, see [`svd`](@ref)) and its
truncation error `ϵ = norm(S_discarded)` ([`truncation_error`](@ref)), computed from the
discarded singular values of the same decomposition (`ϵ / norm(A)` is the relative
error). Both are differentiable: the pullback ([`tsvd_pullback!`](@ref)) is that of the
fixed-rank problem, `F`'s cotangents coupled exactly to the discarded triplets and
`ϵ`'s cotangent acting through `∂ϵ/∂Sᵢ = Sᵢ / ϵ` on the discarded values (0 when
`ϵ = 0`). A rule may keep nothing (`k = 0`, a zero matrix under any tolerance): empty
factors, `ϵ = norm(A)`.
"""
function tsvd(A::AbstractMatrix; k::Union{Nothing,Integer}=nothing, atol=nothing,
              rtol=nothing, error_atol=nothing, error_rtol=nothing, multiplets::Symbol=:cut,
              min_rank=nothing, degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
              gauge_atol=nothing)
    Fall, r = _tsvd(A; k, atol, rtol, error_atol, error_rtol, multiplets, min_rank,
                    degeneracy_atol, broadening, gauge, gauge_atol)
    return _topk(Fall, r), truncation_error(Fall.S, r)
end

# The whole thin SVD of A and the rank the rules keep (shared by tsvd and its rules).
function _tsvd(A; k, atol, rtol, error_atol, error_rtol, multiplets, min_rank,
               degeneracy_atol, broadening, gauge, gauge_atol)
    _check_options("tsvd"; degeneracy_atol, broadening, gauge, gauge_atol)
    trunc = (; k, atol, rtol, error_atol, error_rtol, multiplets, min_rank)
    _check_truncation("tsvd", min(size(A)...); trunc...)
    Fall = svd(A)
    return Fall, truncation_rank(Fall.S; trunc..., degeneracy_atol)
end

"""
    svd_split(A; absorb=:both, k=nothing, atol=nothing, rtol=nothing, error_atol=nothing,
              error_rtol=nothing, multiplets=:cut, min_rank=nothing,
              degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
              gauge_atol=nothing) -> (L, R)

The two factors a tensor-network code splits `A` into, with the singular values absorbed
(quimb's `absorb`): `L = U Diagonal(g)`, `R = Diagonal(h) Vᴴ` with `g, h = S, 1`
(`:left`), `1, S` (`:right`) or `√S, √S` (`:both`), from [`svd`](@ref)`(A; k, atol, ...)`
(every truncation rule; `L * R` is the truncated `A`). Its rules add, to the SVD's, the
term inside a kept degenerate multiplet that the triplets' cotangents cannot carry
([`svd_split_pullback!`](@ref)): exact, first order, for every loss invariant under
`L → L Q`, `R → Qᴴ R` (`Q` unitary on a multiplet), at every spectrum.
"""
function svd_split(A::AbstractMatrix; absorb::Symbol=:both, kw...)
    absorb in ABSORB || throw(ArgumentError("svd_split: absorb must be :left, :right or " *
                                            ":both, got $(repr(absorb))"))
    F = svd(A; kw...)
    g, _, h, _ = split_weights(F.S, absorb)
    return F.U .* transpose(g), h .* F.Vt
end

"""
    svdvals(A) -> Vector

Singular values of `A`, descending. Its pullback `U Diagonal(ΔS) Vᴴ` is exact for
symmetric functions of the singular values at every spectrum.
"""
function svdvals(A::AbstractMatrix)
    _check_finite("svdvals", A)
    return LinearAlgebra.svdvals!(Matrix{_lapack_eltype(A)}(A))
end

"""
    svd_function(A, f; degeneracy_atol=nothing, gauge=:warn) -> Matrix

Singular value function `Y = U f(S) Vᴴ` (thin SVD) with a pullback that is exact at
every spectrum, degenerate and zero singular values included (divided differences of
`f`). `f` is `:polar` (`f = 1`), `(:truncate, r)` (keep the top `r`),
`(:threshold, τ)` (`max(s - τ, 0)`), `(:pow, p)`, `:normalize` (`A / maximum(S)`, whose
gradient includes that of `maximum(S)`), a pair `(f, f′)` of scalar functions with
`f(0) = 0`, or the values of such a pair on the singular values of `A`, as a
[`SpectralValues`](@ref). Truncating inside a degenerate cluster (gap
`≤ degeneracy_atol`) makes `Y` itself basis dependent and triggers the `gauge` policy.
"""
function svd_function(A::AbstractMatrix, f; degeneracy_atol=nothing, gauge=:warn)
    return _svd_function(A, svd(A), f; degeneracy_atol, gauge)
end

# Shared by svd_function and its rrule, so that both return the same array.
function _svd_function(A, F, f; degeneracy_atol=nothing, gauge=:warn)
    _check_options("svd_function"; degeneracy_atol, gauge)
    f = _fspec(f)
    f === :normalize || return svd_function_apply(F, f; degeneracy_atol, gauge)
    # A / s_max exactly as Python's backend computes it, not a reconstruction.
    isempty(F.S) && return Matrix{eltype(F.U)}(A)
    return A ./ _smax(F.S)
end

function _smax(S)
    iszero(S[1]) && throw(DomainError(S[1], "svd_function: :normalize divides by the " *
                                            "largest singular value, which is 0 (A is a zero matrix)"))
    return S[1]
end

"""
    svd_function_apply(F::SVD, f; degeneracy_atol=nothing, gauge=:warn) -> Matrix

`U f(S) Vᴴ` from a computed SVD `F` (its first `length(F.S)` columns/rows); the
forward of [`svd_function`](@ref) for callers that keep `F` for the pullback.
"""
function svd_function_apply(F::SVD, f; degeneracy_atol=nothing, gauge=:warn)
    f = _fspec(f)
    k = length(F.S)
    U, Vᴴ = view(F.U, :, 1:k), view(F.Vt, 1:k, :)
    if f === :normalize
        isempty(F.S) && return U * Vᴴ
        return (U .* transpose(F.S ./ _smax(F.S))) * Vᴴ
    end
    fS, _ = svd_function_values(f, F.S; degeneracy_atol)
    _check_truncation(f, F.S, degeneracy_atol, gauge)
    return (U .* transpose(fS)) * Vᴴ
end

# ("truncate", r) inside a degenerate cluster: which r of the equal singular values
# are kept is decided by rounding, so Y itself depends on the basis.
function _check_truncation(f, S, degeneracy_atol, gauge)
    (f isa Tuple && first(f) === :truncate && _checks_gauge(gauge)) || return nothing
    r = Int(f[2])
    r < length(S) || return nothing
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(S) : degeneracy_atol
    gap = S[r] - S[r+1]
    gap <= tol || return nothing
    msg = string("svd_function: (:truncate, $r) cuts a degenerate cluster (S[$r] - S[$(r+1)] = ",
                 round(gap; sigdigits=3), " <= degeneracy_atol ", round(tol; sigdigits=3),
                 "); the result depends on the basis chosen inside it. Truncate at a gap.")
    return apply_gauge_policy(gauge, :svd_function, gap, tol, msg)
end
