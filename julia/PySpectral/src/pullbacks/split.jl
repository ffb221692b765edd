# The split L = U g(S), R = h(S) Vᴴ of a (truncated) SVD, with the singular values
# absorbed (quimb's `absorb`): g, h = S, 1 (:left), 1, S (:right), √S, √S (:both). Plain
# functions of arrays; the same formulas as pyspectral/pullbacks/split.py.
#
# Derivation (docs/math.md, "The split at every gap"; pyspectral/pullbacks/split.py). With
# X = Uᴴ ΔL, Y = ΔR V, the pairing ⟨ΔL, dL⟩ + ⟨ΔR, dR⟩ is svd_pullback! of ΔU = ΔL g,
# ΔVᴴ = h ΔR, ΔS = g′ Re diag X + h′ Re diag Y, whose numerators split as
#   (Jₐ + Kₐ)ᵢⱼ = (W - Wᴴ)ᵢⱼ + (gⱼ - gᵢ)(X + Xᴴ)ᵢⱼ + (hⱼ - hᵢ)(Y + Yᴴ)ᵢⱼ,
#   (Jₐ - Kₐ)ᵢⱼ = -β (W - Wᴴ)ᵢⱼ + Ddᵢⱼ,
# W = g X - Y h = Lᴴ ΔL - ΔR Rᴴ, the generator of the bond gauge, whose anti-Hermitian
# part vanishes for every loss invariant under L → L Q, R → Qᴴ R (W = 0 for a loss of
# L R). The rest, over 2(sⱼ ∓ sᵢ), are divided differences of g, h, which the SVD's
# quotient computes with the rounding of X, Y over a small gap, or cuts at sᵢ + sⱼ <=
# tol: this pullback moves them out of ΔU, ΔVᴴ and adds them as U C Vᴴ, so that the SVD
# sees ±(W - Wᴴ), zero to rounding for an invariant loss (cut), dropped and measured in
# a cluster. The complement terms of kept values the SVD cuts are added as g[s, 0]. The
# pushforward adds the transposes where the SVD's pushforward cuts. √S (:both) has an
# infinite derivative at 0: a kept exact zero gives an infinite gradient where a
# cotangent reaches it, 0 where none does, never NaN (pyspectral warns there).

const ABSORB = (:left, :right, :both)

"""
    split_weights(S, absorb) -> (g, g′, h, h′)

The weights of the split `L = U Diagonal(g)`, `R = Diagonal(h) Vᴴ` on the singular
values `S`: `(S, 1, 1, 0)` for `:left`, `(1, 0, S, 1)` for `:right`, `(√S, 1/(2√S), √S,
1/(2√S))` for `:both`.
"""
function split_weights(S::AbstractVector{T}, absorb::Symbol) where {T<:Real}
    one_, zero_ = ones(T, length(S)), zeros(T, length(S))
    absorb === :left && return collect(S), one_, one_, zero_
    absorb === :right && return one_, zero_, collect(S), one_
    absorb === :both || throw(ArgumentError("absorb must be :left, :right or :both, " *
                                            "got $(repr(absorb))"))
    root = sqrt.(S)
    slope = inv.(2 .* root)  # Inf at an exact zero
    return root, slope, root, slope
end

# w x, 0 where x is 0 (an infinite weight reaching nothing)
_times(w, x) = iszero(x) ? zero(w * x) : w * x

_hermitian(X) = (X + X') / 2

# Cᵢⱼ = f[sᵢ, sⱼ] sym(X)ᵢⱼ on the off-diagonal pairs of the kept clusters (the first r
# values; |sᵢ - sⱼ| <= tol), 0 elsewhere.
function _cluster_term(S, r, f, df, X, tol)
    H = _hermitian(X)
    C = zero(H)
    for j in 1:r, i in 1:r
        (i != j && abs(S[i] - S[j]) <= tol) || continue
        C[i, j] = _times(divdiff(S[i], S[j], f[i], f[j], df[i], df[j]), H[i, j])
    end
    return C
end

# Which part of the numerator Jₐ - Kₐ over sⱼ + sᵢ the split takes over: β = +1 where
# g(0) = 0 (g's odd divided differences, h's even ones; :left, :both), -1 where g(0) = 1
# (:right). Either is exact; the other would be 1/0 at a kept zero (pyspectral's _BETA).
const _BETA = Dict(:left => 1, :right => -1, :both => 1)

# (fᵢ + fⱼ)/(sᵢ + sⱼ) = f[sᵢ, -sⱼ] of the odd extension, or (fᵢ - fⱼ)/(sᵢ + sⱼ) of the
# even one (0 where fᵢ = fⱼ, also at sᵢ = sⱼ = 0)
_oddsum(si, sj, fi, fj, di, dj) = divdiff(si, -sj, fi, -fj, di, dj)
function _evensum(si, sj, fi, fj, di, dj)
    q = divdiff(si, -sj, fi, fj, di, -dj)
    return fi == fj ? zero(q) : q
end

# The pairs whose numerator Jₐ + Kₐ the split takes over: relative gap at most NEAR.
# Within it the SVD's quotient carries the rounding of its numerator over a small gap;
# outside it that rounding is at most eps/NEAR of the term. Moving a numerator rewrites
# ΔU by U D_U, whose rounding (eps |D_U|) reaches the complement terms (a 1/sⱼ): within
# the window |D_U| is at most NEAR sⱼ |g′| |A_L| there. Same constant as pyspectral's.
const NEAR = 1 / 64

# The terms of one factor (`left`: L's weights f = g and X = A_L; else R's, f = h,
# X = B_R) on the first r (kept) values: (C, Da, Dd), C the middle-matrix term and Da, Dd
# the parts of Jₐ + Kₐ (pairs within NEAR), Jₐ - Kₐ (pairs with sᵢ + sⱼ <= tol,
# diagonal included) it replaces (anti-Hermitian; Da = 2(sⱼ - sᵢ) Cₐ, Dd = 2(sⱼ + sᵢ)
# C_d). Pyspectral's _pair_terms.
function _pair_terms(S, r, f, df, X, left::Bool, β, tol)
    H = _hermitian(X)
    K = (X - X') / 2
    C, Da, Dd = zero(H), zero(H), zero(H)
    odd = (β > 0) == left
    sign = odd || !left ? 1 : -1
    for j in 1:r, i in 1:r
        # Jₐ + Kₐ: (fⱼ - fᵢ)(X + Xᴴ) over sⱼ - sᵢ, a divided difference
        if i != j && abs(S[i] - S[j]) <= NEAR * max(S[i], S[j])
            C[i, j] = _times(divdiff(S[i], S[j], f[i], f[j], df[i], df[j]), H[i, j])
            Da[i, j] = (f[j] - f[i]) * 2 * H[i, j]
        end
        S[i] + S[j] <= tol || continue
        if odd  # Jₐ - Kₐ: f's odd differences on the anti-Hermitian part
            C[i, j] += _times(_oddsum(S[i], S[j], f[i], f[j], df[i], df[j]), K[i, j])
            Dd[i, j] = (f[i] + f[j]) * 2 * K[i, j]
        else  # f's even differences on the Hermitian part (L's with a minus)
            q = _evensum(S[i], S[j], f[i], f[j], df[i], df[j])
            C[i, j] += sign * _times(q, H[i, j])
            Dd[i, j] = sign * (f[i] - f[j]) * 2 * H[i, j]
        end
    end
    return C, Da, Dd
end

# f[s, 0] = f(s)/s of a weight with f(0) = 0 (:left's g, :right's h: 1; :both: 1/√s, Inf
# at 0), 0 for a weight with f(0) = 1, whose 1/s is the SVD's own pseudo-inverse
function _zero_divided(S, absorb::Symbol, left::Bool)
    absorb === (left ? :right : :left) && return zero(S)
    absorb === :both && return inv.(sqrt.(S))
    return one.(S)
end

# The kept values (i <= r) at or below tol, whose inverse the SVD's pullback cuts
_cut_values(S, r, tol) = [i <= r && S[i] <= tol for i in eachindex(S)]

"""
    svd_split_pullback!(ΔA, U, S, Vᴴ, r, absorb, ΔL, ΔR; degeneracy_atol=nothing)
        -> (ΔU, ΔS, ΔVᴴ)

The pullback of the split `(L, R) = (U g(S), h(S) Vᴴ)` (see [`split_weights`](@ref)) at
the triplets `U` (m×k), `S`, `Vᴴ` (k×n), of which the first `r` are kept (the rest are a
batch's padding): adds to `ΔA` the divided-difference term of every kept pair, and
returns cotangents for the SVD's own pullback: `ΔU = ΔL g - U D/4`, `ΔVᴴ = h ΔR + D/4
Vᴴ` (D: the Hermitian part of the kept pairs, moved into the term, so that the numerator
the SVD pullback divides by `sⱼ - sᵢ` is the gauge generator `skew(g A_L - B_R h)`,
zero to rounding for an invariant loss, and cut there), `ΔS = g′ Re diag(Uᴴ ΔL) + h′
Re diag(ΔR V)` averaged over each kept cluster (the rest of it is in the term: the SVD
pullback's weights check sees a symmetric function). `ΔL` or `ΔR` may be `nothing`.
The sum is exact for every loss invariant under `L → L Q`, `R → Qᴴ R` (`Q` unitary on
a degenerate cluster), at every spectrum, near-degenerate gaps included.
"""
function svd_split_pullback!(ΔA::AbstractMatrix, U::AbstractMatrix, S::AbstractVector,
                             Vᴴ::AbstractMatrix, r::Integer, absorb::Symbol, ΔL, ΔR;
                             degeneracy_atol=nothing)
    g, dg, h, dh = split_weights(S, absorb)
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(S) : degeneracy_atol
    β = _BETA[absorb]
    k = length(S)
    ΔS = zeros(eltype(S), k)
    C = zeros(eltype(ΔA), k, k)
    Da = zeros(eltype(ΔA), k, k)
    Dd = zeros(eltype(ΔA), k, k)
    cut = _cut_values(S, r, tol)
    ΔU = ΔVᴴ = nothing
    if !iszerotangent(ΔL)
        X = U' * ΔL
        ΔU = ΔL .* transpose(g)
        ΔS .+= _times.(dg, real.(LinearAlgebra.diag(X)))
        CX, DaX, DdX = _pair_terms(S, r, g, dg, X, true, β, tol)
        C .+= CX
        Da .+= DaX
        Dd .+= DdX
        if any(cut) && size(U, 1) > k  # tall: (I - U Uᴴ) ΔL g[s, 0] where 1/s is cut
            w = ifelse.(cut, _zero_divided(S, absorb, true), zero(eltype(S)))
            ΔA .+= _times.(transpose(w), ΔL - U * X) * Vᴴ
        end
    end
    if !iszerotangent(ΔR)
        Y = ΔR * Vᴴ'
        ΔVᴴ = h .* ΔR
        ΔS .+= _times.(dh, real.(LinearAlgebra.diag(Y)))
        CY, DaY, DdY = _pair_terms(S, r, h, dh, Y, false, β, tol)
        C .+= CY
        Da .+= DaY
        Dd .+= DdY
        if any(cut) && size(Vᴴ, 2) > k  # wide: h[s, 0] (I - V Vᴴ) ΔR where 1/s is cut
            w = ifelse.(cut, _zero_divided(S, absorb, false), zero(eltype(S)))
            ΔA .+= U * _times.(w, ΔR - Y * Vᴴ)
        end
    end
    # J = Uᴴ ΔU, K = Vᴴ ΔV lose D_U = (Da + Dd)/4, D_V = (Da - Dd)/4 (anti-Hermitian):
    # Jₐ + Kₐ loses Da, Jₐ - Kₐ loses Dd, and the parts of ΔU, ΔVᴴ outside the spans
    # of U, V (read by the complement and truncation terms) keep their values. U C Vᴴ
    # adds the quotients back as divided differences: exact where the SVD's quotient
    # carried the rounding of Da over a small gap or cut Dd over sⱼ + sᵢ <= tol.
    DU, DV = (Da + Dd) / 4, (Da - Dd) / 4
    ΔU = ΔU === nothing ? -(U * DU) : ΔU .- U * DU
    ΔVᴴ = ΔVᴴ === nothing ? DV * Vᴴ : ΔVᴴ .+ DV * Vᴴ
    ΔS[r+1:end] .= 0
    # The SVD's pullback takes a cluster's mean of ΔS (a symmetric function's weights:
    # its check_weights), this term the rest, on the diagonal of C: the same sum
    # U (C + Diagonal(ΔS)) Vᴴ, whatever the spectrum.
    mean = _kept_cluster_mean(S, r, ΔS, tol)
    for i in 1:k
        C[i, i] += ΔS[i] - mean[i]
    end
    ΔA .+= U * C * Vᴴ
    return ΔU, mean, ΔVᴴ
end

# x averaged over each run of the first r values (descending) whose adjacent gaps are
# within tol; 0 past r (pyspectral/pullbacks/split.py's _kept_cluster_mean).
function _kept_cluster_mean(S, r, x, tol)
    mean = zero(x)
    i = 1
    while i <= r
        j = i
        while j < r && S[j] - S[j+1] <= tol
            j += 1
        end
        mean[i:j] .= sum(view(x, i:j)) / (j - i + 1)
        i = j + 1
    end
    return mean
end

"""
    svd_split_pushforward(U, S, Vᴴ, r, absorb, ΔA, ΔU, ΔS, ΔVᴴ; degeneracy_atol=nothing)
        -> (ΔL, ΔR)

The tangents of the split along `ΔA` from those of the triplets (`ΔU`, `ΔS`, `ΔVᴴ`, the
SVD's pushforward; `nothing` for zero) and the kept-cluster term: the transpose of
[`svd_split_pullback!`](@ref).
"""
function svd_split_pushforward(U::AbstractMatrix, S::AbstractVector, Vᴴ::AbstractMatrix,
                               r::Integer, absorb::Symbol, ΔA, ΔU, ΔS, ΔVᴴ;
                               degeneracy_atol=nothing)
    g, dg, h, dh = split_weights(S, absorb)
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(S) : degeneracy_atol
    ΔL = zeros(promote_type(eltype(U), eltype(ΔA)), size(U))
    ΔR = zeros(eltype(ΔL), size(Vᴴ))
    iszerotangent(ΔU) || (ΔL .+= ΔU .* transpose(g))
    iszerotangent(ΔVᴴ) || (ΔR .+= h .* ΔVᴴ)
    if !iszerotangent(ΔS)
        ΔL .+= U .* transpose(_times.(dg, ΔS))
        ΔR .+= _times.(dh, ΔS) .* Vᴴ
    end
    ΔAV = ΔA * Vᴴ'
    P = U' * ΔAV
    CL = _cluster_term(S, r, g, dg, P, tol)
    CR = _cluster_term(S, r, h, dh, P, tol)
    # Where the SVD's pushforward cut 1/(sᵢ + sⱼ) and 1/s (at or below tol): the split's
    # finite limits, the transposes of the pullback's C_d and complement terms.
    cut = _cut_values(S, r, tol)
    if any(cut)
        K = (P - P') / 2
        k = length(S)
        for j in 1:r, i in 1:r
            S[i] + S[j] <= tol || continue
            if _BETA[absorb] > 0  # L: g's odd differences, R: h's even ones
                CL[i, j] += _times(_oddsum(S[i], S[j], g[i], g[j], dg[i], dg[j]), K[i, j])
                CR[i, j] += _times(_evensum(S[i], S[j], h[i], h[j], dh[i], dh[j]), K[i, j])
            else  # L: minus g's even differences, R: h's odd ones
                CL[i, j] -= _times(_evensum(S[i], S[j], g[i], g[j], dg[i], dg[j]), K[i, j])
                CR[i, j] += _times(_oddsum(S[i], S[j], h[i], h[j], dh[i], dh[j]), K[i, j])
            end
        end
        if size(U, 1) > k
            w = ifelse.(cut, _zero_divided(S, absorb, true), zero(eltype(S)))
            ΔL .+= _times.(transpose(w), ΔAV - U * P)
        end
        if size(Vᴴ, 2) > k
            w = ifelse.(cut, _zero_divided(S, absorb, false), zero(eltype(S)))
            ΔR .+= _times.(w, U' * ΔA - P * Vᴴ)
        end
    end
    ΔL .+= U * CL
    ΔR .+= CR * Vᴴ
    return ΔL, ΔR
end
