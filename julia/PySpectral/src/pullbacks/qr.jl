# QR pullback and pushforward: plain functions of arrays, no AD engine (the math of
# pyspectral/pullbacks/qr.py). The LQ decomposition transposes them (lq.jl).
#
# Derivation (Walter & Lehtovaara 2012; Liao et al. 2019; PyTorch's linalg_qr_backward;
# MatrixAlgebraKit.jl's qr_pullback!). A = Q R, Q m×p orthonormal, R p×n upper
# triangular with a real diagonal (LAPACK's Householder convention and the positive
# gauge alike), p = min(m, n); A = [X Y], X = Q R₁ square-triangular, Y = Q R₂. With
# Ω = Qᴴ dX R₁⁻¹, the anti-Hermitian C = Qᴴ dQ and the upper triangular dR₁ R₁⁻¹ (real
# diagonal) add up to Ω, so C = L - Lᴴ + i Im diag(Ω), L = tril(Ω, -1), and
#     dQ = Q C + (I - Q Qᴴ) dX R₁⁻¹,  dR₁ = (Ω - C) R₁,  dR₂ = Qᴴ dY - C R₂.
# Transposed, with ΔQ′ = ΔQ + Y ΔR₂ᴴ and M = ΔR₁ R₁ᴴ - Qᴴ ΔQ′:
#     ΔX = (ΔQ′ + Q copyutl(M)) R₁⁻ᴴ,   ΔY = Q ΔR₂,
# copyutl(M) the Hermitian matrix with M's strict upper triangle and the real part of
# its diagonal. A complete Q's columns past n are a basis of the complement of A's
# range: its span is determined, so a loss invariant under that basis reaches A
# through ΔQ -= Q₂ (ΔQ₂ᴴ Q) (svd.jl's _fold_complement). At rank r (the leading
# |Rᵢᵢ| > rank_atol) the formulas hold with p = r for Q[:, 1:r] and R[1:r, :], which
# A determines; the rest depends on a basis choice, and a loss reaching it triggers the
# gauge policy (that part is dropped).

"""
    qr_rank(R; rank_atol=nothing) -> Int

The rank of a matrix as its QR factor `R` reads it: the number of leading
`|Rᵢᵢ| > rank_atol` (default `eps^(3/4) maximum(abs, R)`), over the first
`min(size(R)...)` pivots (the first small pivot ends it).
"""
function qr_rank(R::AbstractMatrix; rank_atol=nothing)
    p = min(size(R)...)
    tol = rank_atol === nothing ? _maxabs(R) * _eps34(eltype(R)) : rank_atol
    r = 0
    while r < p && abs(R[r+1, r+1]) > tol
        r += 1
    end
    return r
end

# The Hermitian matrix with M's strict upper triangle and the real part of its diagonal.
function _copyutl(M)
    H = LinearAlgebra.triu(M, 1)
    H = H + H'
    for i in axes(M, 1)
        H[i, i] = real(M[i, i])
    end
    return H
end

# The gauge policy on the cotangents of what rank r leaves undetermined (Q's columns and
# R's upper rows past r); returns them with that part zeroed (dropped).
function _drop_undetermined(op, r, ΔQ, ΔR, gauge, gauge_atol)
    T = Float64
    measured = zero(T)
    gtol = gauge_atol === nothing ? default_gauge_atol(ΔQ, ΔR) : gauge_atol
    if !iszerotangent(ΔQ)
        measured = max(measured, _maxabs(view(ΔQ, :, r+1:size(ΔQ, 2))))
        ΔQ = copy(ΔQ)
        ΔQ[:, r+1:end] .= 0
    end
    if !iszerotangent(ΔR)
        ΔR = copy(ΔR)
        for j in axes(ΔR, 2), i in r+1:min(j, size(ΔR, 1))
            measured = max(measured, abs(ΔR[i, j]))
            ΔR[i, j] = 0
        end
    end
    if _checks_gauge(gauge) && measured > gtol
        apply_gauge_policy(gauge, Symbol(op, ":rank"), measured, gtol,
                           undetermined_message(op, measured, gtol))
    end
    return ΔQ, ΔR
end

"""
    qr_pullback!(ΔA, Q, R, ΔQ, ΔR; rank_atol=nothing, gauge=:warn, gauge_atol=nothing,
                 op=:qr) -> ΔA

Add to `ΔA` (m×n) the gradient w.r.t. `A = Q R` ([`qr`](@ref): `Q` m×k, `R` k×n,
`k = min(m, n)` or `m` for a complete `Q`) given the cotangents `ΔQ`, `ΔR` (either may
be `nothing`). With `ΔQ′ = ΔQ + Y ΔR₂ᴴ` and `M = ΔR₁ R₁ᴴ - Qᴴ ΔQ′` (`A = [X Y]`,
`R = [R₁ R₂]`):

    ΔX = (ΔQ′ + Q copyutl(M)) R₁⁻ᴴ,    ΔY = Q ΔR₂,

`copyutl(M)` Hermitian with `M`'s strict upper triangle and `real(diag(M))`. Exact at
full rank; a complete `Q`'s columns past `n` count through their span (the part of
`Q₂ᴴ ΔQ₂` that is not Hermitian is measured); at rank `r` ([`qr_rank`](@ref)) exact for
losses of `Q[:, 1:r]` and `R[1:r, :]`, the cotangents of the rest measured and dropped
(the `gauge` policy: `:warn`, `:raise`, `:ignore` or a recorder, which receives
`Symbol(op, ":rank")`). `op` names the operation in messages (`:lq` from
[`lq_pullback!`](@ref)).
"""
function qr_pullback!(ΔA::AbstractMatrix, Q::AbstractMatrix, R::AbstractMatrix, ΔQ, ΔR;
                      rank_atol=nothing, gauge=:warn, gauge_atol=nothing, op::Symbol=:qr)
    m, n = size(Q, 1), size(R, 2)
    size(ΔA) == (m, n) ||
        throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected ($m, $n)"))
    (iszerotangent(ΔQ) && iszerotangent(ΔR)) && return ΔA
    p = min(m, n)
    r = qr_rank(view(R, 1:p, :); rank_atol)
    r < p && ((ΔQ, ΔR) = _drop_undetermined(op, r, ΔQ, ΔR, gauge, gauge_atol))
    if size(Q, 2) > p  # complete: the complement's span is determined
        Q, ΔQ = _fold_complement(Q, ΔQ, p, gauge, gauge_atol, _checks_gauge(gauge); op)
        R = view(R, 1:p, :)
        ΔR = iszerotangent(ΔR) ? nothing : view(ΔR, 1:p, :)
    end
    Q1 = view(Q, :, 1:r)
    R11 = LinearAlgebra.UpperTriangular(R[1:r, 1:r])
    ΔQ1 = iszerotangent(ΔQ) ? nothing : ΔQ[:, 1:r]
    if !iszerotangent(ΔR) && n > r
        ΔR12 = view(ΔR, 1:r, r+1:n)
        Y = Q * view(R, :, r+1:n)  # A[:, r+1:n]
        ΔQ1 = _plus(ΔQ1, Y * ΔR12')
        view(ΔA, :, r+1:n) .+= Q1 * ΔR12
    end
    M = iszerotangent(ΔR) ? zeros(eltype(ΔA), r, r) : view(ΔR, 1:r, 1:r) * R11'
    ΔQ1 === nothing || (M -= Q1' * ΔQ1)
    B = Q1 * _copyutl(M)
    ΔQ1 === nothing || (B += ΔQ1)
    view(ΔA, :, 1:r) .+= B / R11'
    return ΔA
end

"""
    qr_pushforward(Q, R, ΔA; rank_atol=nothing) -> (ΔQ, ΔR)

Tangents of [`qr`](@ref)'s factors along `ΔA`: the transpose of
[`qr_pullback!`](@ref). With `Z = ΔX R₁⁻¹`, `Ω = Qᴴ Z`, `C = L - Lᴴ + i Im diag(Ω)`
(`L = tril(Ω, -1)`): `ΔQ = Q C + Z - Q Ω`, `ΔR₁ = (Ω - C) R₁`, `ΔR₂ = Qᴴ ΔY - C R₂`; a
complete `Q`'s complement turns with the range (`ΔQ₂ = -Q (Zᴴ Q₂)`, its basis fixed
by `Q₂ᴴ ΔQ₂ = 0`). At rank `r`, the tangents of the undetermined part are 0.
"""
function qr_pushforward(Q::AbstractMatrix, R::AbstractMatrix, ΔA::AbstractMatrix;
                        rank_atol=nothing)
    m, n = size(Q, 1), size(R, 2)
    size(ΔA) == (m, n) ||
        throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected ($m, $n)"))
    p = min(m, n)
    T = promote_type(eltype(Q), eltype(ΔA))
    r = qr_rank(view(R, 1:p, :); rank_atol)
    Q1 = Q[:, 1:r]
    R11 = LinearAlgebra.UpperTriangular(R[1:r, 1:r])
    Z = ΔA[:, 1:r] / R11
    Ω = Q1' * Z
    L = LinearAlgebra.tril(Ω, -1)
    C = L - L'
    if T <: Complex
        for i in 1:r
            C[i, i] = im * imag(Ω[i, i])
        end
    end
    Zp = Z - Q1 * Ω  # (I - Q Qᴴ) ΔX R₁⁻¹
    ΔQ = zeros(T, size(Q))
    ΔQ[:, 1:r] .= Q1 * C + Zp
    ΔR = zeros(T, size(R))
    ΔR[1:r, 1:r] .= LinearAlgebra.triu((Ω - C) * R11)
    n > r && (ΔR[1:r, r+1:n] .= Q1' * view(ΔA, :, r+1:n) - C * view(R, 1:r, r+1:n))
    size(Q, 2) > p && (ΔQ[:, p+1:end] .= -Q1 * (Zp' * view(Q, :, p+1:size(Q, 2))))
    return ΔQ, ΔR
end
