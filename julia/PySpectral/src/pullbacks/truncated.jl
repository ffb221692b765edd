# The exact pullback of the top-k triplets / eigenpairs from a certified block
# (forward/topk.jl), using products with A only, and its transpose, the pushforward
# (at the end of the file). Same formulas, tolerances and fallback rules as
# pyspectral/pullbacks/truncated.py (and pyspectral/topk.py's choice between the CG
# solve, the dense fallback and a warning).
#
# Derivation (Francuz, Schuch, Vanhecke, PRR 7, 013237 (2025), with deflation). The
# forward hands over a block of `d >= k` certified Ritz triplets `(U_d, S_d, V_d)`: the
# kept `k` and the extras after them, among which the whole cluster of `s_k`. Split the
# full-path pullback (`svd_pullback!` on all triplets, cotangents zero past `k`) into
#
# 1. the pairs inside the block: the middle term of `svd_pullback!` on the block with
#    zero-padded cotangents ([`svd_middle`](@ref)), which applies the cluster rule, the
#    pseudo-inverse of zero singular values and the gauge policy exactly as the full
#    path does, including the pairs that `k` cuts;
# 2. the coupling of the kept triplets to the complement of the block,
#    `X V_kᴴ + U_k Yᴴ` with `X ⟂ U_d`, `Y ⟂ V_d` solving
#
#        X S_k - A⊥ Y = (I - U_d U_dᴴ) ΔU,   Y S_k - A⊥ᴴ X = (I - V_d V_dᴴ) ΔV,
#
#    `A⊥ = A - U_d S_d V_dᴴ`. Eliminating `Y`, column by column
#    `(sᵢ² - A⊥A⊥ᴴ) xᵢ = sᵢ PUᵢ + A⊥ PVᵢ`, Hermitian positive definite on the
#    complement (its spectrum is below `s_{d+1} < s_k`), solved by preconditioned
#    conjugate gradients with condition number `sᵢ² / (sᵢ² - s_{d+1}²)`. Everything is
#    in units of `s₁` (`A / s₁`), so that scaling `A` scales only the gradient and no
#    inner product over- or underflows. Kept `sᵢ` below the degeneracy tolerance get
#    `xᵢ = yᵢ = 0` (the full path's pseudo-inverse).
#
# `eigh` is the same with `X diag(λ_k) - A⊥ X = (I - V_d V_dᴴ) ΔV` (negated for the
# smallest eigenpairs) and the Hermitian part `(X V_kᴴ + V_k Xᴴ) / 2`.
#
# A CG that does not converge (no gap past the certified block) is redone exactly by a
# dense decomposition of the complement when m n min(m, n) <= DENSE_FALLBACK_MAX; larger
# matrices get the approximate gradient and a warning with the reached residual.

const DENSE_FALLBACK_MAX = 2048^3
const RTOL_SLACK = 10.0  # the CG counts as converged up to this multiple of rtol

_dense_fallback(m, n) = float(m) * n * min(m, n) <= DENSE_FALLBACK_MAX

# Number of kept pairs: the columns of whichever cotangent is present.
function _kept_count(ΔX, Δs, ΔY)
    iszerotangent(Δs) || return length(Δs)
    iszerotangent(ΔX) || return size(ΔX, 2)
    return size(ΔY, 1)
end

_zero_pad_columns(::Nothing, d) = nothing
_zero_pad_columns(x::AbstractMatrix, d) = [x zeros(eltype(x), size(x, 1), d - size(x, 2))]
_zero_pad_rows(::Nothing, d) = nothing
_zero_pad_rows(x::AbstractMatrix, d) = [x; zeros(eltype(x), d - size(x, 1), size(x, 2))]
_zero_pad_vector(::Nothing, d) = nothing
_zero_pad_vector(x::AbstractVector, d) = [x; zeros(eltype(x), d - length(x))]

# Orthonormal basis of the orthogonal complement of the (orthonormal) columns of Q.
_complement(Q) = LinearAlgebra.nullspace(Matrix(Q'))

_colsum(X) = vec(sum(X; dims=1))
_coldot(X, Y) = real.(_colsum(conj.(X) .* Y))

"""
    block_cg(op, b, rtol, maxiter, pre) -> (x, residual)

Preconditioned conjugate gradients on every column of `b` at once (column-wise
scalars); `op(P, cols)` applies the system of columns `cols` to the columns of `P`,
`pre(R, cols)` its preconditioner. Converged columns are locked (no more products for
them). A column whose `pᴴ T p` is at rounding level (or negative: the system is not
positive definite there) stops rather than divide by noise. Returns `x` and the
largest relative residual `|r| / |b|` of a column that did not converge (`0.0` if all
did). The operator is O(1) (units of `s₁`), so the rounding level is absolute.
"""
function block_cg(op, b::AbstractMatrix, rtol::Real, maxiter::Integer, pre)
    ncol = size(b, 2)
    x, r = zero(b), copy(b)
    z = pre(r, 1:ncol)
    p = copy(z)
    rr, rz = _coldot(r, r), _coldot(r, z)
    target = rtol^2 .* rr
    noise = 16 * eps(real(eltype(b)))
    active = findall(rr .> target)
    for _ in 1:maxiter
        isempty(active) && break
        P = p[:, active]
        TP = op(P, active)
        pTp, pp = _coldot(P, TP), _coldot(P, P)
        ok = pTp .> noise .* pp
        α = [ok[j] ? rz[c] / pTp[j] : zero(pTp[j]) for (j, c) in enumerate(active)]
        x[:, active] .+= P .* transpose(α)
        Ra = r[:, active] .- TP .* transpose(α)
        Za = pre(Ra, active)
        rr_new, rz_new = _coldot(Ra, Ra), _coldot(Ra, Za)
        β = [rz[c] > 0 ? rz_new[j] / rz[c] : rz_new[j] for (j, c) in enumerate(active)]
        r[:, active] = Ra
        p[:, active] = Za .+ P .* transpose(β)
        rr[active], rz[active] = rr_new, rz_new
        # a column stays active while unconverged and still making progress
        going = [rr_new[j] > target[c] && ok[j] for (j, c) in enumerate(active)]
        active = active[going]
    end
    left = rr .> target
    any(left) || return x, 0.0
    ratio = maximum(i -> left[i] ? rr[i] / (target[i] > 0 ? target[i] : one(target[i])) : 0.0,
                    1:ncol)
    return x, sqrt(Float64(ratio)) * rtol
end

"""
    cg_preconditioner(extras, shift, c, f, rest) -> pre

`z -> Pᵢ⁻¹ z` for the columns `cols`, where `Pᵢ` is the CG system with the
complement's operator replaced by its Ritz approximation on the extras `(U_e, s_e)`
(values `f(s_e / c)`) and by 0 elsewhere:
`Pᵢ⁻¹ = (I - U_e U_eᴴ) / restᵢ + U_e diag(1 / (shiftᵢ - f_e)) U_eᴴ`. Exact (one CG
step) when the extras are exact and span the rest of the spectrum above the gap;
otherwise still positive definite (`f_e` below `shiftᵢ`, clamped there), so CG
converges, only less fast.
"""
function cg_preconditioner(extras, shift::AbstractVector, c, f, rest::AbstractVector)
    rest = [x > 0 ? x : one(x) for x in real.(rest)]  # pseudo-inverse columns
    (extras === nothing || isempty(extras[2])) && return (z, cols) -> z ./ transpose(rest[cols])
    Ue, se = extras
    fe = f.(real.(se) ./ c)
    # e×k: 1/(shiftᵢ - f_e) - 1/restᵢ (a zero shift is a pseudo-inverse column, never
    # active in the CG: no Inf)
    weight = [begin
                  s = real(shift[i])
                  gap = max(s - fe[e], s / 1000)
                  w = inv(gap) - inv(rest[i])
                  isfinite(w) ? w : zero(w)
              end for e in eachindex(fe), i in eachindex(shift)]
    return (z, cols) -> z ./ transpose(rest[cols]) .+ Ue * ((Ue' * z) .* weight[:, cols])
end

# ----------------------------------------------------------------------- SVD

"""
    svd_trunc_pullback!(ΔA, A, U, S, Vᴴ, ΔU, ΔS, ΔVᴴ; d=length(S), rtol=nothing,
                        maxiter=500, degeneracy_atol=nothing, broadening=nothing,
                        gauge=:warn, gauge_atol=nothing) -> ΔA

Add to `ΔA` the exact gradient of the top-`k` triplets of `A` from their cotangents
`ΔU` (m×k), `ΔS`, `ΔVᴴ` (k×n), using products with `A` and `Aᴴ` only. `U`, `S`, `Vᴴ`:
the block of Ritz triplets of [`svd_topk_block`](@ref), kept `k` first, the first `d`
certified (the others precondition the CG). `rtol` (default `eps^(3/4)`) and `maxiter`
set the CG; the other keywords configure the block's middle term as in
[`svd_pullback!`](@ref). A complete block (`d = min(m, n)`) is the full path's pullback.
A CG that does not reach `10 rtol` is redone by the exact dense fallback
([`dense_truncated_svd_pullback!`](@ref)) up to `m n min(m, n) = 2048³`, else the
approximate gradient is added with a warning giving the reached residual.
"""
function svd_trunc_pullback!(ΔA::AbstractMatrix, A::AbstractMatrix, U::AbstractMatrix,
                             S::AbstractVector, Vᴴ::AbstractMatrix, ΔU, ΔS, ΔVᴴ;
                             d::Integer=length(S), rtol=nothing, maxiter::Integer=500,
                             degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                             gauge_atol=nothing)
    ΔU, ΔS, ΔVᴴ = map(x -> iszerotangent(x) ? nothing : x, (ΔU, ΔS, ΔVᴴ))
    ΔU === nothing && ΔS === nothing && ΔVᴴ === nothing && return ΔA
    k = _kept_count(ΔU, ΔS, ΔVᴴ)
    m, n = size(A)
    kw = (; degeneracy_atol, broadening, gauge, gauge_atol)
    Ud, Sd, Vᴴd = U[:, 1:d], S[1:d], Vᴴ[1:d, :]
    padded = (_zero_pad_columns(ΔU, d), _zero_pad_vector(ΔS, d), _zero_pad_rows(ΔVᴴ, d))
    d >= min(m, n) && return svd_pullback!(ΔA, Ud, Sd, Vᴴd, padded...; kw...)
    if ΔU === nothing && ΔVᴴ === nothing
        return ΔA .+= (view(U, :, 1:k) .* transpose(real.(ΔS))) * view(Vᴴ, 1:k, :)
    end
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(Sd) : degeneracy_atol
    rtol = rtol === nothing ? _eps34(eltype(Sd)) : rtol
    extras = d < length(S) ? (U[:, d+1:end], S[d+1:end]) : nothing
    X, Y, residual, zero_gauge = _svd_complement(_dense(A, eltype(Ud)), Ud, Sd,
                                                 Matrix(Vᴴd'), k, ΔU, ΔVᴴ, tol, rtol,
                                                 maxiter, extras)
    if residual > RTOL_SLACK * rtol
        _dense_fallback(m, n) &&
            return dense_truncated_svd_pullback!(ΔA, A, Ud, Sd, Vᴴd, padded...; kw...)
        _warn_unconverged(:svd, maxiter, residual)
    end
    M, _, _ = svd_middle(Ud, Sd, Vᴴd, padded..., tol; broadening, gauge, gauge_atol,
                         gauge_extra=zero_gauge)
    ΔA .+= Ud * (M * Vᴴd) .+ X * view(Vᴴd, 1:k, :) .+ view(Ud, :, 1:k) * Y'
    return ΔA
end

# X, Y of the coupling to the complement (see the top of the file), the residual the CG
# reached, and the gauge part it drops: when k cuts a block of zero singular values that
# reaches past the block, the pseudo-inverse sets xᵢ = yᵢ = 0 for the kept zeros, which
# drops (PUᵢ, PVᵢ) as the full path's cluster rule drops the pairs inside the zero
# cluster; its largest column norm goes to the gauge check (one check, in svd_middle).
function _svd_complement(A, U, S, V, k, ΔU, ΔVᴴ, tol, rtol, maxiter, extras)
    Uk, Vk = view(U, :, 1:k), view(V, :, 1:k)
    PU = ΔU === nothing ? zero(Uk) : ΔU - U * (U' * ΔU)
    PV = ΔVᴴ === nothing ? zero(Vk) : ΔVᴴ' - V * (V' * ΔVᴴ')
    c = S[1] > 0 ? S[1] : one(S[1])
    keep = [s > tol for s in view(S, 1:k)]           # pseudo-inverse: 0 below tol
    s = S[1:k] ./ c                                   # units of s₁
    s_safe = [keep[i] ? s[i] : one(s[i]) for i in 1:k]
    Sc = S ./ c
    perp(Y) = A * Y ./ c .- U * (Sc .* (V' * Y))      # A⊥ Y / s₁
    perpᴴ(X) = A' * X ./ c .- V * (Sc .* (U' * X))    # A⊥ᴴ X / s₁
    function op(X, cols)                              # (sᵢ² - A⊥A⊥ᴴ) xᵢ / s₁²
        TX = X .* transpose(s[cols] .^ 2) .- perp(perpᴴ(X))
        return TX .- U * (U' * TX)                    # stay in the complement (rounding)
    end
    s2 = s .^ 2
    pre = cg_preconditioner(extras, s2, c, e -> e^2, s2)
    rhs = (PU .* transpose(s) .+ perp(PV)) .* transpose(keep)
    X, residual = block_cg(op, rhs, rtol, maxiter, pre)
    Y = (PV .+ perpᴴ(X)) .* transpose(keep ./ s_safe)
    zero_gauge = maximum((sqrt(sum(abs2, view(PU, :, i)) + sum(abs2, view(PV, :, i)))
                          for i in 1:k if !keep[i]); init=zero(real(eltype(PU))))
    return X ./ c, Y ./ c, residual, zero_gauge      # back from units of s₁
end

"""
    dense_truncated_svd_pullback!(ΔA, A, U, S, Vᴴ, ΔU, ΔS, ΔVᴴ; kw...) -> ΔA

The full path's pullback for a dense `A` in the basis of the given block (`U` m×d,
`S`, `Vᴴ` d×n, cotangents zero-padded to `d`): the block completed by an SVD of `A` on
the complement of `(U, V)`, then [`svd_pullback!`](@ref) with zero-padded cotangents.
The fallback when the CG solve cannot converge (no gap past the block).
"""
function dense_truncated_svd_pullback!(ΔA::AbstractMatrix, A::AbstractMatrix,
                                       U::AbstractMatrix, S::AbstractVector,
                                       Vᴴ::AbstractMatrix, ΔU, ΔS, ΔVᴴ; kw...)
    V = Matrix(Vᴴ')
    Wu, Wv = _complement(U), _complement(V)
    F = LinearAlgebra.svd(Wu' * A * Wv)
    U2, S2, V2 = [U Wu*F.U], [S; F.S], [V Wv*F.V]
    r = length(S2)
    padded = (_zero_pad_columns(ΔU, r), _zero_pad_vector(ΔS, r), _zero_pad_rows(ΔVᴴ, r))
    return svd_pullback!(ΔA, U2, S2, Matrix(V2'), padded...; kw...)
end

# `mode`: :backward (the pullbacks) or :pushforward (their transposes, whose result is
# a tangent).
function _warn_unconverged(op, maxiter, residual; mode::Symbol=:backward)
    result = mode === :backward ? "gradient" : "tangent"
    message = "$(op)_topk $mode: the Sylvester solve did not converge in $maxiter " *
              "iterations (relative residual $(_round2(residual))): there is no gap " *
              "between the kept spectrum and the rest beyond the certified block, and " *
              "the matrix is too large for the exact dense fallback. The $result is " *
              "approximate; use method=:full, a k at a gap, or a larger oversample."
    # the measurements as keyword arguments too: pyspectral's bridge reads them
    @warn message maxiter residual
    return nothing
end

# ---------------------------------------------------------------------- eigh

"""
    eigh_trunc_pullback!(ΔA, A, λ, V, Δλ, ΔV; uplo=:L, largest=true, d=length(λ),
                         rtol=nothing, maxiter=500, degeneracy_atol=nothing,
                         broadening=nothing, gauge=:warn, gauge_atol=nothing) -> ΔA

Add to `ΔA` (on the `uplo` triangle) the exact gradient of the `k` largest (or
smallest) eigenpairs of `Hermitian(A, uplo)` from their cotangents `Δλ`, `ΔV` (n×k).
`λ`, `V`: the block of [`eigh_topk_block`](@ref), kept `k` first, the first `d`
certified. The block's part is [`eigh_pullback!`](@ref) on it with zero-padded
cotangents; the coupling to the complement is `(X V_kᴴ + V_k Xᴴ) / 2`, folded, where
`±(X Λ_k - A⊥ X) = ±(I - V_d V_dᴴ) ΔV` (positive definite column by column), solved by
preconditioned CG. Fallback and warning as for [`svd_trunc_pullback!`](@ref).
"""
function eigh_trunc_pullback!(ΔA::AbstractMatrix, A::AbstractMatrix, λ::AbstractVector,
                              V::AbstractMatrix, Δλ, ΔV; uplo::Symbol=:L,
                              largest::Bool=true, d::Integer=length(λ), rtol=nothing,
                              maxiter::Integer=500, degeneracy_atol=nothing,
                              broadening=nothing, gauge=:warn, gauge_atol=nothing)
    uplo = _check_uplo("eigh", uplo)
    Δλ, ΔV = map(x -> iszerotangent(x) ? nothing : x, (Δλ, ΔV))
    Δλ === nothing && ΔV === nothing && return ΔA
    k = ΔV === nothing ? length(Δλ) : size(ΔV, 2)
    n = size(A, 1)
    kw = (; uplo, degeneracy_atol, broadening, gauge, gauge_atol)
    λd, Vd = λ[1:d], V[:, 1:d]
    padded = (_zero_pad_vector(Δλ, d), _zero_pad_columns(ΔV, d))
    (d >= n || ΔV === nothing) && return eigh_pullback!(ΔA, λd, Vd, padded...; kw...)
    rtol = rtol === nothing ? _eps34(eltype(λd)) : rtol
    extras = d < length(λ) ? (V[:, d+1:end], λ[d+1:end]) : nothing
    H = Hermitian(_dense(A, eltype(Vd)), uplo)
    X, residual = _eigh_complement(H, λd, Vd, k, ΔV, largest, rtol, maxiter, extras)
    if residual > RTOL_SLACK * rtol
        _dense_fallback(n, n) &&
            return dense_truncated_eigh_pullback!(ΔA, A, λd, Vd, padded...; kw...)
        _warn_unconverged(:eigh, maxiter, residual)
    end
    eigh_pullback!(ΔA, λd, Vd, padded...; kw...)
    Vk = view(Vd, :, 1:k)
    return fold_triangle!(ΔA, (X * Vk' + Vk * X') / 2, uplo)
end

function _eigh_complement(H, λ, V, k, ΔV, largest, rtol, maxiter, extras)
    sgn = largest ? 1 : -1
    rhs = ΔV - V * (V' * ΔV)
    c = maximum(abs, λ)
    extras === nothing || isempty(extras[2]) || (c = max(c, maximum(abs, extras[2])))
    c = c > 0 ? c : one(c)
    λc = λ ./ c
    θ = sgn .* λ[1:k] ./ c                             # the wanted end largest
    function op(X, cols)                                # ±(X λᵢ - A⊥ X) / c
        AX = H * X ./ c .- V * (λc .* (V' * X))
        TX = sgn .* (X .* transpose(λc[cols]) .- AX)
        return TX .- V * (V' * TX)
    end
    # preconditioner: θᵢ - θ_e on the extras; on the rest θᵢ - θ_last (the lowest Ritz
    # value seen past the block)
    known = extras === nothing ? λ : [λ; extras[2]]
    lowest = minimum(sgn .* known) / c
    ext = extras === nothing ? nothing : (extras[1], sgn .* extras[2])
    pre = cg_preconditioner(ext, θ, c, identity, θ .- lowest)
    X, residual = block_cg(op, sgn .* rhs, rtol, maxiter, pre)
    return X ./ c, residual
end

"""
    dense_truncated_eigh_pullback!(ΔA, A, λ, V, Δλ, ΔV; uplo=:L, kw...) -> ΔA

[`dense_truncated_svd_pullback!`](@ref) for `eigh`: the block completed by an
eigendecomposition of `Hermitian(A, uplo)` on its complement, then
[`eigh_pullback!`](@ref) with zero-padded cotangents (folded onto `uplo`).
"""
function dense_truncated_eigh_pullback!(ΔA::AbstractMatrix, A::AbstractMatrix,
                                        λ::AbstractVector, V::AbstractMatrix, Δλ, ΔV;
                                        uplo::Symbol=:L, kw...)
    W = _complement(V)
    B = W' * (Hermitian(A, uplo) * W)
    E = LinearAlgebra.eigen(Hermitian((B + B') / 2))
    λ2, V2 = [λ; E.values], [V W*E.vectors]
    r = length(λ2)
    padded = (_zero_pad_vector(Δλ, r), _zero_pad_columns(ΔV, r))
    return eigh_pullback!(ΔA, λ2, V2, padded...; uplo, kw...)
end

# ------------------------------------------------------------------ pushforwards
# Forward mode: the transposes of the truncated pullbacks above (the full path's
# pushforward, `svd_pushforward` / `eigh_pushforward` on all triplets, restricted to the
# kept columns), split the same way; pyspectral/pullbacks/truncated.py has the same
# functions. Inside the certified block: the full path's formula in the block's basis
# (same cluster rule: no rotation inside a degenerate cluster, pseudo-inverse of zero
# singular values). Against the complement: differentiating `A vᵢ = sᵢ uᵢ` and
# `Aᴴ uᵢ = sᵢ vᵢ` and projecting onto the complement of `(U_d, V_d)`, where
# `P_U A = A⊥ = A⊥ P_V`, gives for `xᵢ = P_U Δuᵢ`, `yᵢ = P_V Δvᵢ`
#
#     sᵢ xᵢ - A⊥ yᵢ = P_U ΔA vᵢ,   sᵢ yᵢ - A⊥ᴴ xᵢ = P_V ΔAᴴ uᵢ,
#
# the pullback's system with the cotangents `(ΔA V_k, U_kᴴ ΔA)` (`_svd_complement`
# projects them): the same preconditioned CG, tolerances and pseudo-inverse. `eigh`:
# `A vᵢ = λᵢ vᵢ` gives `(λᵢ - A⊥) xᵢ = P ΔA vᵢ` (`_eigh_complement` with `ΔA V_k`).
# Only the kept values are separated from the rest of the spectrum by a gap (the forward
# certified the cluster of value k inside the block), so the full path's complement
# terms are this unique solution. Fallback and warning as in the pullbacks.

"""
    truncated_svd_pushforward(A, U, S, Vᴴ, k, ΔA; d=length(S), rtol=nothing,
                              maxiter=500, degeneracy_atol=nothing, broadening=nothing)
        -> (ΔU, ΔS, ΔVᴴ)

Tangents of the top-`k` triplets of `A` (`ΔU` m×k, `ΔS`, `ΔVᴴ` k×n) along `ΔA`, using
products with `A` and `Aᴴ` only: the transpose of [`svd_trunc_pullback!`](@ref) on the
same block (`U`, `S`, `Vᴴ` of [`svd_topk_block`](@ref), kept `k` first, the first `d`
certified, the others preconditioning the CG), with the same CG settings, dense
fallback ([`dense_truncated_svd_pushforward`](@ref)) up to `m n min(m, n) = 2048³`, and
beyond it the approximate tangents with a warning giving the reached residual. A
complete block (`d = min(m, n)`) is the full path's [`svd_pushforward`](@ref).
"""
function truncated_svd_pushforward(A::AbstractMatrix, U::AbstractMatrix, S::AbstractVector,
                                   Vᴴ::AbstractMatrix, k::Integer, ΔA::AbstractMatrix;
                                   d::Integer=length(S), rtol=nothing, maxiter::Integer=500,
                                   degeneracy_atol=nothing, broadening=nothing)
    m, n = size(A)
    size(ΔA) == (m, n) ||
        throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected ($m, $n)"))
    Ud, Sd, Vᴴd = U[:, 1:d], S[1:d], Vᴴ[1:d, :]
    if d >= min(m, n)
        ΔU, ΔS, ΔVᴴ = svd_pushforward(Ud, Sd, Vᴴd, ΔA; degeneracy_atol, broadening)
        return ΔU[:, 1:k], ΔS[1:k], ΔVᴴ[1:k, :]
    end
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(Sd) : degeneracy_atol
    rtol = rtol === nothing ? _eps34(eltype(Sd)) : rtol
    extras = d < length(S) ? (U[:, d+1:end], S[d+1:end]) : nothing
    Vd = Matrix(Vᴴd')
    ΔAV = ΔA * Vd
    ΔP = Ud' * ΔAV                       # U_dᴴ ΔA V_d
    # the block: the full path's formula with U_d, V_d as the basis (identities)
    Id = Matrix{eltype(ΔP)}(I, d, d)
    Wu, ΔSd, Wvᴴ = svd_pushforward(Id, Sd, Id, ΔP; degeneracy_atol=tol, broadening)
    Uk = view(Ud, :, 1:k)
    X, Y, residual, _ = _svd_complement(_dense(A, eltype(Ud)), Ud, Sd, Vd, k, ΔAV[:, 1:k],
                                        Uk' * ΔA, tol, rtol, maxiter, extras)
    if residual > RTOL_SLACK * rtol
        _dense_fallback(m, n) &&
            return dense_truncated_svd_pushforward(A, Ud, Sd, Vᴴd, k, ΔA; degeneracy_atol,
                                                   broadening)
        _warn_unconverged(:svd, maxiter, residual; mode=:pushforward)
    end
    ΔU = Ud * Wu[:, 1:k] .+ X
    ΔVᴴ = Wvᴴ[1:k, :] * Vᴴd .+ Y'
    return ΔU, ΔSd[1:k], ΔVᴴ
end

"""
    dense_truncated_svd_pushforward(A, U, S, Vᴴ, k, ΔA; kw...) -> (ΔU, ΔS, ΔVᴴ)

The full path's pushforward for a dense `A` in the basis of the given block (`U` m×d,
`S`, `Vᴴ` d×n), restricted to the first `k` triplets: the block completed by an SVD of
`A` on the complement of `(U, V)` (as in [`dense_truncated_svd_pullback!`](@ref)), then
[`svd_pushforward`](@ref). The fallback of [`truncated_svd_pushforward`](@ref).
"""
function dense_truncated_svd_pushforward(A::AbstractMatrix, U::AbstractMatrix,
                                         S::AbstractVector, Vᴴ::AbstractMatrix, k::Integer,
                                         ΔA::AbstractMatrix; kw...)
    V = Matrix(Vᴴ')
    Wu, Wv = _complement(U), _complement(V)
    F = LinearAlgebra.svd(Wu' * A * Wv)
    U2, S2, V2 = [U Wu*F.U], [S; F.S], [V Wv*F.V]
    ΔU, ΔS, ΔVᴴ = svd_pushforward(U2, S2, Matrix(V2'), ΔA; kw...)
    return ΔU[:, 1:k], ΔS[1:k], ΔVᴴ[1:k, :]
end

"""
    truncated_eigh_pushforward(A, λ, V, k, ΔA; uplo=:L, largest=true, d=length(λ),
                               rtol=nothing, maxiter=500, degeneracy_atol=nothing,
                               broadening=nothing) -> (Δλ, ΔV)

Tangents of the `k` largest (or smallest) eigenpairs of `Hermitian(A, uplo)` (`Δλ`,
`ΔV` n×k) along `ΔA`, read from its `uplo` triangle ([`hermitian_from_triangle`](@ref)):
the transpose of [`eigh_trunc_pullback!`](@ref) on the same block (`λ`, `V` of
[`eigh_topk_block`](@ref), kept `k` first, the first `d` certified). The block's part is
[`eigh_pushforward`](@ref) in its basis; the coupling to the complement solves
`±(xᵢ λᵢ - A⊥ xᵢ) = ±(I - V_d V_dᴴ) ΔA vᵢ` by the pullback's preconditioned CG. Fallback
([`dense_truncated_eigh_pushforward`](@ref)) and warning as for
[`truncated_svd_pushforward`](@ref).
"""
function truncated_eigh_pushforward(A::AbstractMatrix, λ::AbstractVector, V::AbstractMatrix,
                                    k::Integer, ΔA::AbstractMatrix; uplo::Symbol=:L,
                                    largest::Bool=true, d::Integer=length(λ), rtol=nothing,
                                    maxiter::Integer=500, degeneracy_atol=nothing,
                                    broadening=nothing)
    uplo = _check_uplo("eigh", uplo)
    n = size(A, 1)
    size(ΔA) == (n, n) ||
        throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected ($n, $n)"))
    λd, Vd = λ[1:d], V[:, 1:d]
    if d >= n
        Δλ, ΔV = eigh_pushforward(λd, Vd, ΔA; uplo, degeneracy_atol, broadening)
        return Δλ[1:k], ΔV[:, 1:k]
    end
    rtol = rtol === nothing ? _eps34(eltype(λd)) : rtol
    extras = d < length(λ) ? (V[:, d+1:end], λ[d+1:end]) : nothing
    ΔHV = hermitian_from_triangle(ΔA, uplo) * Vd
    ΔP = Vd' * ΔHV                       # V_dᴴ ΔA_h V_d, Hermitian
    # the block: the full path's formula with V_d as the basis (the identity)
    Δλd, W = eigh_pushforward(λd, Matrix{eltype(ΔP)}(I, d, d), ΔP; degeneracy_atol,
                              broadening)
    H = Hermitian(_dense(A, eltype(Vd)), uplo)
    X, residual = _eigh_complement(H, λd, Vd, k, ΔHV[:, 1:k], largest, rtol, maxiter, extras)
    if residual > RTOL_SLACK * rtol
        _dense_fallback(n, n) &&
            return dense_truncated_eigh_pushforward(A, λd, Vd, k, ΔA; uplo, degeneracy_atol,
                                                    broadening)
        _warn_unconverged(:eigh, maxiter, residual; mode=:pushforward)
    end
    return Δλd[1:k], Vd * W[:, 1:k] .+ X
end

"""
    dense_truncated_eigh_pushforward(A, λ, V, k, ΔA; uplo=:L, kw...) -> (Δλ, ΔV)

[`dense_truncated_svd_pushforward`](@ref) for `eigh`: the block completed by an
eigendecomposition of `Hermitian(A, uplo)` on its complement, then
[`eigh_pushforward`](@ref) along `ΔA` (read from its `uplo` triangle), restricted to the
first `k` pairs.
"""
function dense_truncated_eigh_pushforward(A::AbstractMatrix, λ::AbstractVector,
                                          V::AbstractMatrix, k::Integer,
                                          ΔA::AbstractMatrix; uplo::Symbol=:L, kw...)
    W = _complement(V)
    B = W' * (Hermitian(A, uplo) * W)
    E = LinearAlgebra.eigen(Hermitian((B + B') / 2))
    λ2, V2 = [λ; E.values], [V W*E.vectors]
    Δλ, ΔV = eigh_pushforward(λ2, V2, ΔA; uplo, kw...)
    return Δλ[1:k], ΔV[:, 1:k]
end
