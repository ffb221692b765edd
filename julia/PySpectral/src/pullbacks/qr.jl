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
# range: its span is determined, so a loss of its projector reaches A through
# ΔQ -= Q₂ (ΔQ₂ᴴ Q) (_fold_qr_complement). At rank deficiency (j: the first pivot
# |Rⱼⱼ| <= rank_atol) Q[:, 1:j], R[1:j, :] and the product Q[:, j+1:end] R[j+1:end, :]
# are determined by A, the two factors of that product apart are not: the split rule of
# _qr_rank_pullback! (docs/math.md, "QR and LQ at rank deficiency") is exact for losses
# of those, f(Q R) among them, where the cotangents carry what they need, and measures
# what the cotangents put on the choice past j or on what no cotangent carries.

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

# A complete Q's columns past p: their span is determined, not their basis. Folds their
# cotangent into the thin one (ΔQ₁ -= Q₂ (ΔQ₂ᴴ Q₁)), measuring the part of Q₂ᴴ ΔQ₂ that is
# not Hermitian (a recorder receives `Symbol(op, ":complement")`).
function _fold_qr_complement(Q, ΔQ, p, gauge, gauge_atol; op::Symbol)
    Q1 = Matrix(view(Q, :, 1:p))
    iszerotangent(ΔQ) && return Q1, nothing
    Q2, ΔQ2 = view(Q, :, p+1:size(Q, 2)), view(ΔQ, :, p+1:size(ΔQ, 2))
    if _checks_gauge(gauge) && size(Q2, 2) > 0
        B = Q2' * ΔQ2
        gtol = gauge_atol === nothing ? default_gauge_atol(ΔQ) : gauge_atol
        viol = _maxabs(B - B')
        viol > gtol && apply_gauge_policy(gauge, Symbol(op, ":complement"), viol, gtol,
                                          complement_message(op, viol, gtol))
    end
    return Q1, ΔQ[:, 1:p] - Q2 * (ΔQ2' * Q1)
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
full rank; a complete `Q`'s columns past `n` count through their projector (the part
of `Q₂ᴴ ΔQ₂` that is not Hermitian is measured). At rank deficiency (`j`: the first
pivot `|Rⱼⱼ| <= rank_atol`, [`qr_rank`](@ref)) exact for losses of `Q[:, 1:j]`,
`R[1:j, :]` and `Q R` (the split rule of docs/math.md; `Q R` where `Q` is square, wide
or complete, or where `R`'s small pivots are rounding-level and last); what the
cotangents put on the choice past `j`, or on what no cotangent of a thin `Q` carries,
is measured (the `gauge` policy: `:warn`, `:raise`, `:ignore` or a recorder, which
receives `Symbol(op, ":rank")`, `Symbol(op, ":lost")` or `Symbol(op, ":complement")`).
`op` names the operation in messages (`:lq` from [`lq_pullback!`](@ref)).
"""
function qr_pullback!(ΔA::AbstractMatrix, Q::AbstractMatrix, R::AbstractMatrix, ΔQ, ΔR;
                      rank_atol=nothing, gauge=:warn, gauge_atol=nothing, op::Symbol=:qr)
    m, n = size(Q, 1), size(R, 2)
    size(ΔA) == (m, n) ||
        throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected ($m, $n)"))
    (iszerotangent(ΔQ) && iszerotangent(ΔR)) && return ΔA
    p = min(m, n)
    j = qr_rank(view(R, 1:p, :); rank_atol)
    j < p && return _qr_rank_pullback!(ΔA, Q, R, ΔQ, ΔR, j; rank_atol, gauge,
                                       gauge_atol, op)
    if size(Q, 2) > p  # complete: the complement's span is determined
        Q, ΔQ = _fold_qr_complement(Q, ΔQ, p, gauge, gauge_atol; op)
        R = view(R, 1:p, :)
        ΔR = iszerotangent(ΔR) ? nothing : view(ΔR, 1:p, :)
    end
    Q1 = view(Q, :, 1:p)
    R11 = LinearAlgebra.UpperTriangular(R[1:p, 1:p])
    ΔQ1 = iszerotangent(ΔQ) ? nothing : ΔQ[:, 1:p]
    if !iszerotangent(ΔR) && n > p
        ΔR12 = view(ΔR, 1:p, p+1:n)
        Y = Q * view(R, :, p+1:n)  # A[:, p+1:n]
        ΔQ1 = _plus(ΔQ1, Y * ΔR12')
        view(ΔA, :, p+1:n) .+= Q1 * ΔR12
    end
    M = iszerotangent(ΔR) ? zeros(eltype(ΔA), p, p) : view(ΔR, 1:p, 1:p) * R11'
    ΔQ1 === nothing || (M -= Q1' * ΔQ1)
    B = Q1 * _copyutl(M)
    ΔQ1 === nothing || (B += ΔQ1)
    view(ΔA, :, 1:p) .+= B / R11'
    return ΔA
end

# The rank tolerance of R (its first p rows): rank_atol or eps^(3/4) maximum(abs, R).
_qr_rank_tol(R, rank_atol) = rank_atol === nothing ? _maxabs(R) * _eps34(eltype(R)) :
                             rank_atol

# The pseudo-inverse weights of singular values S: 1/σ above tol, 0 at or below.
_pinv_weights(S, tol) = [σ <= tol ? zero(σ) : inv(σ) for σ in S]

# qr_pullback! split at the first small pivot j < p (docs/math.md, "QR and LQ at rank
# deficiency"): Q₁ = Q[:, 1:j], R[1:j, :] and Z = Q₂ R₂ = (I - Q₁Q₁ᴴ) A[:, j+1:n] are
# determined, Q₂ = Q[:, j+1:k] and R₂ = R[j+1:k, j+1:n] apart are not. With gZ = Q₂ ΔR₂
# (+ (I - QQᴴ) gZ for a thin Q of a tall A, from (I - QQᴴ) ΔQ₂ = (I - QQᴴ) gZ R₂ᴴ):
#     ΔA₂ = Q₁ ΔR₁₂ + gZ,   ΔQ₁′ = ΔQ₁ + A₂ ΔR₁₂ᴴ - gZ R₁₂ᴴ - Q₂ (Q₁ᴴ ΔQ₂)ᴴ,
# and ΔA₁ the full-rank formula of (Q₁, R₁₁) with ΔQ₁′.
function _qr_rank_pullback!(ΔA, Q, R, ΔQ, ΔR, j; rank_atol, gauge, gauge_atol, op)
    m, n, k = size(Q, 1), size(R, 2), size(Q, 2)
    p = min(m, n)
    T = eltype(ΔA)
    hasQ, hasR = !iszerotangent(ΔQ), !iszerotangent(ΔR)
    checks = _checks_gauge(gauge)
    gtol = gauge_atol === nothing ? default_gauge_atol(ΔQ, ΔR) : gauge_atol
    rtol = _qr_rank_tol(view(R, 1:p, :), rank_atol)
    Q1, Q2 = view(Q, :, 1:j), view(Q, :, j+1:k)
    R11 = LinearAlgebra.UpperTriangular(R[1:j, 1:j])
    R12, R2 = view(R, 1:j, j+1:n), Matrix(view(R, j+1:k, j+1:n))
    A2 = view(Q, :, 1:p) * view(R, 1:p, j+1:n)  # A[:, j+1:n]
    ΔQ2 = hasQ ? view(ΔQ, :, j+1:k) : nothing
    ΔR2 = hasR ? view(ΔR, j+1:k, j+1:n) : nothing
    gZ = hasR ? Q2 * ΔR2 : zeros(T, m, n - j)
    # the choice past j: Q₂ᴴ ΔQ₂ - ΔR₂ R₂ᴴ is Hermitian for a loss of Z
    D = zeros(T, k - j, k - j)
    hasQ && (D += Q2' * ΔQ2)
    hasR && (D -= ΔR2 * R2')
    rank_v, lost_v = Float64(_maxabs(D - D')), 0.0
    if k == p && m > p  # thin Q of a tall A: the part of gZ outside Q's span
        F = LinearAlgebra.svd(R2)
        small = F.S .<= rtol
        Us, Vs = F.U[:, small], F.V[:, small]
        d = LinearAlgebra.diag(R2)
        ε = eps(real(T))^(-1 / 4)
        accurate = all(i -> abs(d[i]) > rtol ||
                            (d[i] != 0 && _norm2(view(R2, i, i+1:size(R2, 2))) <=
                                          abs(d[i]) * ε), eachindex(d))
        hasR && !accurate && (lost_v = max(lost_v, _maxabs(Us' * ΔR2 * Vs)))
        if hasQ
            B = ΔQ2 - Q * (Q' * ΔQ2)
            BUs = B * Us  # on R₂'s left null space: on the choice
            rank_v = max(rank_v, _maxabs(BUs))
            accurate || (lost_v = max(lost_v, _maxabs(B)))
            if accurate && _maxabs(BUs) <= gtol
                gZ += B / LinearAlgebra.UpperTriangular(R2)'
            else  # on R₂'s row space, B U S⁺ Vᴴ
                gZ += ((B * F.U) .* transpose(_pinv_weights(F.S, rtol))) * F.Vt
            end
        end
    end
    if checks
        for (kind, v) in ((:rank, rank_v), (:lost, lost_v))
            v > gtol || continue
            msg = kind === :rank ? undetermined_message(op, v, gtol) :
                  lost_message(op, v, gtol)
            apply_gauge_policy(gauge, Symbol(op, ":", kind), v, gtol, msg)
        end
    end
    ΔQ1 = hasQ ? ΔQ[:, 1:j] : zeros(T, m, j)
    if hasR
        ΔR12 = view(ΔR, 1:j, j+1:n)
        ΔQ1 += A2 * ΔR12'
        view(ΔA, :, j+1:n) .+= Q1 * ΔR12
    end
    ΔQ1 -= gZ * R12'
    hasQ && (ΔQ1 -= Q2 * (Q1' * ΔQ2)')
    view(ΔA, :, j+1:n) .+= gZ
    j == 0 && return ΔA
    M = hasR ? view(ΔR, 1:j, 1:j) * R11' : zeros(T, j, j)
    M -= Q1' * ΔQ1
    view(ΔA, :, 1:j) .+= (Q1 * _copyutl(M) + ΔQ1) / R11'
    return ΔA
end

_norm2(x) = isempty(x) ? zero(real(eltype(x))) : sqrt(sum(abs2, x))

"""
    qr_pushforward(Q, R, ΔA; rank_atol=nothing, gauge=:warn, gauge_atol=nothing, op=:qr)
        -> (ΔQ, ΔR)

Tangents of [`qr`](@ref)'s factors along `ΔA`: the transpose of
[`qr_pullback!`](@ref). With `Z = ΔX R₁⁻¹`, `Ω = Qᴴ Z`, `C = L - Lᴴ + i Im diag(Ω)`
(`L = tril(Ω, -1)`): `ΔQ = Q C + Z - Q Ω`, `ΔR₁ = (Ω - C) R₁`, `ΔR₂ = Qᴴ ΔY - C R₂`; a
complete `Q`'s complement turns with the range (`ΔQ₂ = -Q (Zᴴ Q₂)`, its basis fixed
by `Q₂ᴴ ΔQ₂ = 0`). At rank deficiency (first small pivot `j`) the tangents of
`Q[:, 1:j]`, `R[1:j, :]` and of `Q R` are exact (the last where `Q` is square, wide or
complete); those of `Q[:, j+1:end]`, `R[j+1:end, :]` are one choice (`Q₂ᴴ ΔQ₂ = 0`,
`ΔR₂ = Q₂ᴴ ΔZ`, `ΔZ` the tangent of `(I - Q₁Q₁ᴴ) A[:, j+1:n]`), and where `ΔZ` is not
zero the `gauge` policy applies (a recorder receives `Symbol(op, ":forward")`).
"""
function qr_pushforward(Q::AbstractMatrix, R::AbstractMatrix, ΔA::AbstractMatrix;
                        rank_atol=nothing, gauge=:warn, gauge_atol=nothing,
                        op::Symbol=:qr)
    m, n = size(Q, 1), size(R, 2)
    size(ΔA) == (m, n) ||
        throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected ($m, $n)"))
    p, k = min(m, n), size(Q, 2)
    T = promote_type(eltype(Q), eltype(ΔA))
    j = qr_rank(view(R, 1:p, :); rank_atol)
    Q1 = Q[:, 1:j]
    R11 = LinearAlgebra.UpperTriangular(R[1:j, 1:j])
    R12 = view(R, 1:j, j+1:n)
    A2 = view(Q, :, 1:p) * view(R, 1:p, j+1:n)  # A[:, j+1:n]
    Z = ΔA[:, 1:j] / R11
    Ω = Q1' * Z
    L = LinearAlgebra.tril(Ω, -1)
    C = L - L'
    if T <: Complex
        for i in 1:j
            C[i, i] = im * imag(Ω[i, i])
        end
    end
    ΔQ1 = Q1 * C + Z - Q1 * Ω  # Q C + (I - Q Qᴴ) ΔX R₁⁻¹
    ΔQ = zeros(T, size(Q))
    ΔR = zeros(T, size(R))
    ΔQ[:, 1:j] .= ΔQ1
    ΔR[1:j, 1:j] .= LinearAlgebra.triu((Ω - C) * R11)
    n > j && (ΔR[1:j, j+1:n] .= Q1' * view(ΔA, :, j+1:n) + ΔQ1' * A2)  # R₁₂ = Q₁ᴴ A₂
    Q2 = view(Q, :, j+1:k)
    k > j && (ΔQ[:, j+1:k] .= -Q1 * (ΔQ1' * Q2))  # Q₁ᴴ ΔQ₂ = -ΔQ₁ᴴ Q₂, Q₂ᴴ ΔQ₂ = 0
    j == p && return ΔQ, ΔR
    ΔZ = view(ΔA, :, j+1:n) - ΔQ1 * R12
    ΔZ -= Q1 * (Q1' * ΔZ)  # (I - Q₁Q₁ᴴ)(ΔA₂ - ΔQ₁ R₁₂)
    ΔR[j+1:k, j+1:n] .= Q2' * ΔZ
    if k == p && m > p  # thin Q of a tall A: the part outside Q's span, on R₂'s rows
        F = LinearAlgebra.svd(Matrix(view(R, j+1:k, j+1:n)))
        w = _pinv_weights(F.S, _qr_rank_tol(view(R, 1:p, :), rank_atol))
        out = ΔZ - Q * (Q' * ΔZ)
        ΔQ[:, j+1:k] .+= ((out * F.V) .* transpose(w)) * F.U'
    end
    if _checks_gauge(gauge)
        moved = _maxabs(ΔZ)
        limit = gauge_atol === nothing ? _eps34(real(T)) * _maxabs(ΔA) : gauge_atol
        moved > limit && apply_gauge_policy(gauge, Symbol(op, ":forward"), moved, limit,
                                            qr_forward_message(op, moved, limit))
    end
    return ΔQ, ΔR
end
