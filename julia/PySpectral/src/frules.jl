# ChainRulesCore frules: the forward call, then the plain pushforwards of src/pullbacks
# (the transposes of the pullbacks: same gap inverses, tolerances and cluster rule, so
# forward and reverse mode agree at every spectrum). `frule((Δself, ΔA, ...), f, A, ...)`
# returns `(Ω, ∂Ω)`; the tangent of a factorization is a `Tangent{SVD}` / `Tangent{Eigen}`
# with every field, of a vector or matrix a plain array. A zero input tangent
# (`AbstractZero`) gives itself back, without the pushforward; a thunk is unthunked.
# Top-k (`svd_topk`, `eigh_topk`): the certified block of the forward, then the
# truncated pushforwards (src/pullbacks/truncated.jl), the transposes of the truncated
# pullbacks that the rrules use. The truncations (`svd` with its rules, `tsvd`,
# `teigh`) push forward at their rank, which is piecewise constant in A.

function ChainRulesCore.frule((_, ΔA), ::typeof(svd), A::AbstractMatrix; full::Bool=false,
                              k::Union{Nothing,Integer}=nothing, atol=nothing,
                              rtol=nothing, error_atol=nothing, error_rtol=nothing,
                              multiplets::Symbol=:cut, min_rank=nothing,
                              degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                              gauge_atol=nothing)
    # A truncation: the tangents of the kept triplets, from the pushforward of all of
    # them (which couples them to the discarded ones), as the rrule pulls back through
    # all; the rank is piecewise constant in A.
    trunc = (; k, atol, rtol, error_atol, error_rtol, multiplets, min_rank)
    _check_truncation("svd", min(size(A)...), full; trunc...)
    Fall = svd(A; full, degeneracy_atol, broadening, gauge, gauge_atol)
    truncates = _truncates(k, atol, rtol, error_atol, error_rtol)
    r = truncates ? truncation_rank(Fall.S; trunc..., degeneracy_atol) : nothing
    F = r === nothing ? Fall : _topk(Fall, r)  # exactly what svd(A; ...) returns
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return F, ΔA
    # Without a truncation (whose cut it would move), the basis inside a degenerate
    # cluster is the one the tangent follows (svd_adapted), and the tangents its branch's.
    adapted = r === nothing
    adapted && (Fall = F = svd_adapted(Fall, ΔA; degeneracy_atol, broadening))
    ΔU, ΔS, ΔVᴴ = svd_pushforward(Fall.U, Fall.S, Fall.Vt, ΔA; degeneracy_atol, broadening,
                                  adapted, gauge)
    if r !== nothing
        ΔU, ΔS, ΔVᴴ = ΔU[:, 1:r], ΔS[1:r], ΔVᴴ[1:r, :]
    end
    return F, Tangent{typeof(F)}(; U=ΔU, S=ΔS, Vt=ΔVᴴ)
end

# The split: svd's frule and the kept-cluster term (src/pullbacks/split.jl).
function ChainRulesCore.frule((_, ΔA), ::typeof(svd_split), A::AbstractMatrix;
                              absorb::Symbol=:both, degeneracy_atol=nothing, kw...)
    absorb in ABSORB || throw(ArgumentError("svd_split: absorb must be :left, :right or " *
                                            ":both, got $(repr(absorb))"))
    F, ΔF = ChainRulesCore.frule((NoTangent(), ΔA), svd, A; degeneracy_atol, kw...)
    g, _, h, _ = split_weights(F.S, absorb)
    LR = (F.U .* transpose(g), h .* F.Vt)
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return LR, ΔA
    ΔL, ΔR = svd_split_pushforward(F.U, F.S, F.Vt, length(F.S), absorb, ΔA, ΔF.U, ΔF.S,
                                   ΔF.Vt; degeneracy_atol)
    return LR, Tangent{typeof(LR)}(ΔL, ΔR)
end

# The tangent of the truncation error ϵ = norm(x[discarded]) along the tangents Δx of
# the values: Σ xᵢ Δxᵢ / ϵ over the discarded ones (0 when ϵ = 0, as the pullback).
function _truncation_error_tangent(x, Δx, discarded, ϵ)
    ϵ > 0 || return zero(ϵ)
    return sum(i -> x[i] * real(Δx[i]), discarded; init=zero(ϵ)) / ϵ
end

function ChainRulesCore.frule((_, ΔA), ::typeof(tsvd), A::AbstractMatrix;
                              k::Union{Nothing,Integer}=nothing, atol=nothing,
                              rtol=nothing, error_atol=nothing, error_rtol=nothing,
                              multiplets::Symbol=:cut, min_rank=nothing,
                              degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                              gauge_atol=nothing)
    Fall, r = _tsvd(A; k, atol, rtol, error_atol, error_rtol, multiplets, min_rank,
                    degeneracy_atol, broadening, gauge, gauge_atol)
    F, ϵ = _topk(Fall, r), truncation_error(Fall.S, r)  # exactly what tsvd returns
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return (F, ϵ), ΔA
    ΔU, ΔS, ΔVᴴ = svd_pushforward(Fall.U, Fall.S, Fall.Vt, ΔA; degeneracy_atol, broadening)
    Δϵ = _truncation_error_tangent(Fall.S, ΔS, r+1:length(Fall.S), ϵ)
    ΔF = Tangent{typeof(F)}(; U=ΔU[:, 1:r], S=ΔS[1:r], Vt=ΔVᴴ[1:r, :])
    return (F, ϵ), Tangent{typeof((F, ϵ))}(ΔF, Δϵ)
end

function ChainRulesCore.frule((_, ΔA), ::typeof(teigh), A::AbstractMatrix; uplo::Symbol=:L,
                              largest::Bool=true, k::Union{Nothing,Integer}=nothing,
                              atol=nothing, rtol=nothing, error_atol=nothing,
                              error_rtol=nothing, multiplets::Symbol=:cut, min_rank=nothing,
                              check_hermitian::Bool=false, hermitian_tol=nothing,
                              degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                              gauge_atol=nothing)
    Eall, r = _teigh(A; uplo, largest, k, atol, rtol, error_atol, error_rtol, multiplets,
                     min_rank, check_hermitian, hermitian_tol, degeneracy_atol, broadening,
                     gauge, gauge_atol)
    # exactly what teigh returns
    E, ϵ = _kept_eigen(Eall, r, largest), _eigh_truncation_error(Eall.values, r, largest)
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return (E, ϵ), ΔA
    λ, n = Eall.values, length(Eall.values)
    Δλ, ΔV = eigh_pushforward(λ, Eall.vectors, ΔA; uplo, degeneracy_atol, broadening)
    kept = _kept_range(n, r, largest)
    Δϵ = _truncation_error_tangent(λ, Δλ, largest ? (1:n-r) : (r+1:n), ϵ)
    ΔE = Tangent{typeof(E)}(; values=Δλ[kept], vectors=ΔV[:, kept])
    return (E, ϵ), Tangent{typeof((E, ϵ))}(ΔE, Δϵ)
end

function ChainRulesCore.frule((_, ΔA), ::typeof(svdvals), A::AbstractMatrix)
    F = svd(A)
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return F.S, ΔA
    # in the basis ΔA follows (svd_adapted): a split cluster's ΔS are the one-sided
    # derivatives of the values, in their order
    F = svd_adapted(F, ΔA)
    _, ΔS, _ = svd_pushforward(F.U, F.S, F.Vt, ΔA; adapted=true)
    return F.S, ΔS
end

function ChainRulesCore.frule((_, ΔA, _), ::typeof(svd_function), A::AbstractMatrix, f;
                              degeneracy_atol=nothing, gauge=:warn)
    F = svd(A)
    Y = _svd_function(A, F, f; degeneracy_atol, gauge)
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return Y, ΔA
    return Y, svd_function_pushforward(F.U, F.S, F.Vt, f, ΔA; degeneracy_atol)
end

function ChainRulesCore.frule((_, ΔA), ::typeof(eigh), A::AbstractMatrix; uplo::Symbol=:L,
                              check_hermitian::Bool=false, hermitian_tol=nothing,
                              degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                              gauge_atol=nothing)
    E = eigh(A; uplo, check_hermitian, hermitian_tol, degeneracy_atol, broadening, gauge,
             gauge_atol)
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return E, ΔA
    # the basis inside a degenerate cluster is the one the tangent follows (eigh_adapted),
    # and the tangents its branch's
    E = eigh_adapted(E, ΔA; uplo, broadening)
    Δλ, ΔV = eigh_pushforward(E.values, E.vectors, ΔA; uplo, degeneracy_atol, broadening,
                              adapted=true, gauge)
    return E, Tangent{typeof(E)}(; values=Δλ, vectors=ΔV)
end

function ChainRulesCore.frule((_, ΔA), ::typeof(eigvalsh), A::AbstractMatrix;
                              uplo::Symbol=:L, check_hermitian::Bool=false,
                              hermitian_tol=nothing)
    E = eigh(A; uplo, check_hermitian, hermitian_tol)
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return E.values, ΔA
    # in the basis ΔA follows: a split cluster's Δλ are the one-sided derivatives
    E = eigh_adapted(E, ΔA; uplo)
    Δλ, _ = eigh_pushforward(E.values, E.vectors, ΔA; uplo, adapted=true)
    return E.values, Δλ
end

function ChainRulesCore.frule((_, ΔA, _), ::typeof(matrix_function), A::AbstractMatrix, f;
                              uplo::Symbol=:L, check_hermitian::Bool=false,
                              hermitian_tol=nothing, degeneracy_atol=nothing)
    _check_options("matrix_function"; degeneracy_atol, hermitian_tol)
    E = eigh(A; uplo, check_hermitian, hermitian_tol)
    Y = matrix_function_apply(E, f; degeneracy_atol)
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return Y, ΔA
    return Y, matrix_function_pushforward(E.values, E.vectors, f, ΔA; uplo, degeneracy_atol)
end

function ChainRulesCore.frule((_, ΔA, _), ::typeof(eig_function), A::AbstractMatrix, f)
    E = eig(A)
    Vinv = check_diagonalizable(E.values, E.vectors; op=:eig_function, pairs=false)
    real = !(eltype(A) <: Complex)
    Y = eig_function_apply(E.values, E.vectors, Vinv, f; real)
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return Y, ΔA
    return Y, eig_function_pushforward(E.values, E.vectors, Vinv, f, ΔA; real)
end

# Top-k: the forward's block (kept triplets, the certified extras, the preconditioning
# ones) goes to the truncated pushforward, which multiplies by A again. The keywords are
# the rrule's (`gauge`, `gauge_atol` are accepted for it and unused: a pushforward
# checks nothing).
function ChainRulesCore.frule((_, ΔA, _), ::typeof(svd_topk), A::AbstractMatrix,
                              k::Integer; method::Symbol=:auto,
                              oversample::Union{Nothing,Integer}=nothing,
                              n_iter::Union{Nothing,Integer}=nothing, rtol=nothing,
                              maxiter::Integer=500, degeneracy_atol=nothing,
                              broadening=nothing, gauge=:warn, gauge_atol=nothing)
    _check_options("svd_topk"; rtol, maxiter, degeneracy_atol, broadening, gauge, gauge_atol)
    B = svd_topk_block(A, k; method, oversample, n_iter, rtol, maxiter, degeneracy_atol)
    F = SVD(B.U[:, 1:k], B.S[1:k], B.Vt[1:k, :])  # exactly what svd_topk returns
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return F, ΔA
    ΔU, ΔS, ΔVᴴ = truncated_svd_pushforward(A, B.U, B.S, B.Vt, k, ΔA; d=B.d, rtol, maxiter,
                                            degeneracy_atol, broadening)
    return F, Tangent{typeof(F)}(; U=ΔU, S=ΔS, Vt=ΔVᴴ)
end

function ChainRulesCore.frule((_, ΔA, _), ::typeof(eigh_topk), A::AbstractMatrix,
                              k::Integer; uplo::Symbol=:L, largest::Bool=true,
                              method::Symbol=:auto,
                              oversample::Union{Nothing,Integer}=nothing,
                              n_iter::Union{Nothing,Integer}=nothing, rtol=nothing,
                              maxiter::Integer=500, degeneracy_atol=nothing,
                              broadening=nothing, gauge=:warn, gauge_atol=nothing)
    _check_options("eigh_topk"; rtol, maxiter, degeneracy_atol, broadening, gauge,
                   gauge_atol)
    B = eigh_topk_block(A, k; uplo, largest, method, oversample, n_iter, rtol, maxiter,
                        degeneracy_atol)
    E = Eigen(B.values[1:k], B.vectors[:, 1:k])  # exactly what eigh_topk returns
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return E, ΔA
    Δλ, ΔV = truncated_eigh_pushforward(A, B.values, B.vectors, k, ΔA; uplo, largest, d=B.d,
                                        rtol, maxiter, degeneracy_atol, broadening)
    return E, Tangent{typeof(E)}(; values=Δλ, vectors=ΔV)
end

# ------------------------------------------------------ qr, lq, polar, eig

for (f, pushforward) in ((:qr, :qr_pushforward), (:lq, :lq_pushforward))
    @eval function ChainRulesCore.frule((_, ΔA), ::typeof($f), A::AbstractMatrix;
                                        full::Bool=false, positive::Bool=false,
                                        rank_atol=nothing, gauge=:warn, gauge_atol=nothing)
        XY = $f(A; full, positive, rank_atol, gauge, gauge_atol)
        ΔA = unthunk(ΔA)
        ΔA isa AbstractZero && return XY, ΔA
        return XY, Tangent{typeof(XY)}($pushforward(XY..., ΔA; rank_atol, gauge,
                                                    gauge_atol)...)
    end
end

function ChainRulesCore.frule((_, ΔA), ::typeof(polar), A::AbstractMatrix;
                              side::Symbol=:right, degeneracy_atol=nothing)
    W, P, F = _polar(A, side, degeneracy_atol)
    WP = (W, P)
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return WP, ΔA
    ΔW, ΔP = polar_pushforward(W, P, F.U, F.S, F.Vt, ΔA; side, degeneracy_atol)
    return WP, Tangent{typeof(WP)}(ΔW, ΔP)
end

function ChainRulesCore.frule((_, ΔA), ::typeof(eig), A::AbstractMatrix;
                              degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                              gauge_atol=nothing)
    E = eig(A; degeneracy_atol, broadening, gauge, gauge_atol)
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return E, ΔA
    Δλ, ΔV = eig_pushforward(E.values, E.vectors, ΔA; degeneracy_atol, broadening, gauge,
                             gauge_atol)
    return E, Tangent{typeof(E)}(; values=Δλ, vectors=ΔV)
end

function ChainRulesCore.frule((_, ΔA), ::typeof(eigvals), A::AbstractMatrix)
    E = eig(A)
    ΔA = unthunk(ΔA)
    ΔA isa AbstractZero && return E.values, ΔA
    return E.values, first(eig_pushforward(E.values, E.vectors, ΔA))
end

# eig_topk: the pushforward of src/pullbacks/eig_topk.jl (one solve per pair with A); the
# gauge policy where the tangent splits a cluster, as eig's forward mode.
function ChainRulesCore.frule((_, ΔA, _...), ::typeof(eig_topk), A::AbstractMatrix,
                              k::Integer, which::Symbol=:LM; gauge=:warn, kw...)
    λ, V = eig_topk(A, k, which; kw...)
    dA = unthunk(ΔA)
    dA isa AbstractZero && return (λ, V), Tangent{typeof((λ, V))}(zero(λ), zero(V))
    T = eltype(V)
    rtol = get(kw, :tol, nothing)
    rtol = rtol === nothing ? eps(real(T))^(3 / 4) : rtol
    atol = get(kw, :degeneracy_atol, nothing)
    ctol = atol === nothing ? maximum(abs, λ) * max(eps(real(T))^(3 / 4), 100 * rtol) : atol
    dλ, dV, split = eig_topk_pushforward(λ, V, dA, A; cluster_tol=ctol, tol=rtol)
    _checks_gauge(gauge) && check_gauge(:eig_topk, split, default_gauge_atol(dλ), gauge)
    return (λ, V), Tangent{typeof((λ, V))}(dλ, dV)
end

# linsolve: dx = (a0 I + a1 A)⁻¹ (db - da0 x - da1 A x - a1 dA x), one more solve.
function ChainRulesCore.frule((_, ΔA, Δb, Δa...), ::typeof(linsolve), A::AbstractMatrix,
                              b::AbstractVector, a::Number...; kw...)
    x = linsolve(A, b, a...; kw...)
    a1 = length(a) >= 2 ? a[2] : true
    rhs = _tangent_array(Δb, x) .+ zero(eltype(x))
    length(a) >= 1 && (rhs = rhs .- _tangent_number(Δa[1]) .* x)
    length(a) >= 2 && (rhs = rhs .- _tangent_number(Δa[2]) .* (A * x))
    dA = unthunk(ΔA)
    dA isa AbstractZero || (rhs = rhs .- a1 .* (dA * x))
    solver = (; (k => v for (k, v) in kw if k !== :x0)...)
    return x, linsolve(A, rhs, a...; solver...)
end

_tangent_number(Δ) = (Δ = unthunk(Δ); Δ isa AbstractZero ? false : Δ)
