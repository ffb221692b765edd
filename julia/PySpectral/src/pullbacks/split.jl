# The split L = U g(S), R = h(S) Vᴴ of a (truncated) SVD, with the singular values
# absorbed (quimb's `absorb`): g, h = S, 1 (:left), 1, S (:right), √S, √S (:both). Plain
# functions of arrays; the same formulas as pyspectral/pullbacks/split.py.
#
# Derivation. With P = Uᴴ dA V, A_L = Uᴴ ΔL and B_R = ΔR V, the pairing ⟨ΔL, dL⟩ + ⟨ΔR, dR⟩
# is svd_pullback! of ΔU = ΔL g, ΔVᴴ = h ΔR, ΔS = g′ Re diag(A_L) + h′ Re diag(B_R) (which
# couples the kept triplets to the discarded ones exactly), whose middle matrix for i ≠ j
# is [sⱼ (gⱼ a - gᵢ a′) - sᵢ (hᵢ b - hⱼ b′)] / (sⱼ² - sᵢ²) (a = (A_L)ᵢⱼ, a′ = conj((A_L)ⱼᵢ),
# b, b′ of B_R). The anti-Hermitian part of g A_L - h B_R over sⱼ - sᵢ is the 0/0 of a
# degenerate pair, dropped by svd_pullback! inside a cluster (it vanishes for a loss
# invariant under L → L Q, R → Qᴴ R, Q unitary on the cluster); its limit is not 0. At an
# exact cluster the derivative of the split along the Hermitian part of P is g′ sym(P),
# h′ sym(P) (degenerate perturbation theory, in the gauge of the perturbed basis), so the
# middle matrix there is g′ sym(A_L) + h′ sym(B_R) + skew(g A_L + h B_R) / (2s):
# svd_pullback! gives the last term, and this file adds the Hermitian one,
# Cᵢⱼ = g[sᵢ, sⱼ] sym(A_L)ᵢⱼ + h[sᵢ, sⱼ] sym(B_R)ᵢⱼ (divided differences), on the
# off-diagonal pairs of each kept cluster. Exact for every such invariant loss at every
# spectrum. The pushforward adds the transpose. √S (:both) has an infinite derivative at
# 0: a kept exact zero gives an infinite gradient where a cotangent reaches it, 0 where
# none does, never NaN.

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

"""
    svd_split_pullback!(ΔA, U, S, Vᴴ, r, absorb, ΔL, ΔR; degeneracy_atol=nothing)
        -> (ΔU, ΔS, ΔVᴴ)

The pullback of the split `(L, R) = (U g(S), h(S) Vᴴ)` (see [`split_weights`](@ref)) at
the triplets `U` (m×k), `S`, `Vᴴ` (k×n), of which the first `r` are kept (the rest are a
batch's padding): adds to `ΔA` the kept-cluster term that no pullback of `U, S, V`
alone knows, and returns the cotangents of the triplets, `ΔU = ΔL g`, `ΔVᴴ = h ΔR`,
`ΔS = g′ Re diag(Uᴴ ΔL) + h′ Re diag(ΔR V)` averaged over each kept cluster (the rest
of it is in the term: the SVD pullback's weights check sees a symmetric function), for
the SVD's own pullback. `ΔL` or `ΔR` may
be `nothing`. The sum is exact for every loss invariant under `L → L Q`, `R → Qᴴ R` (`Q`
unitary on a degenerate cluster), at every spectrum.
"""
function svd_split_pullback!(ΔA::AbstractMatrix, U::AbstractMatrix, S::AbstractVector,
                             Vᴴ::AbstractMatrix, r::Integer, absorb::Symbol, ΔL, ΔR;
                             degeneracy_atol=nothing)
    g, dg, h, dh = split_weights(S, absorb)
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(S) : degeneracy_atol
    k = length(S)
    ΔS = zeros(eltype(S), k)
    C = zeros(eltype(ΔA), k, k)
    ΔU = ΔVᴴ = nothing
    if !iszerotangent(ΔL)
        X = U' * ΔL
        ΔU = ΔL .* transpose(g)
        ΔS .+= _times.(dg, real.(LinearAlgebra.diag(X)))
        C .+= _cluster_term(S, r, g, dg, X, tol)
    end
    if !iszerotangent(ΔR)
        Y = ΔR * Vᴴ'
        ΔVᴴ = h .* ΔR
        ΔS .+= _times.(dh, real.(LinearAlgebra.diag(Y)))
        C .+= _cluster_term(S, r, h, dh, Y, tol)
    end
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
    P = U' * ΔA * Vᴴ'
    ΔL .+= U * _cluster_term(S, r, g, dg, P, tol)
    ΔR .+= _cluster_term(S, r, h, dh, P, tol) * Vᴴ
    return ΔL, ΔR
end
