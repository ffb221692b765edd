# Hermitian eigh pullback: plain functions of arrays, adding to ΔA.

"""
    fold_triangle!(ΔA, G, uplo) -> ΔA

Add to `ΔA` the gradient w.r.t. the entries a function reads when it builds the
Hermitian matrix `Hermitian(A, uplo)`, given its gradient `G` (Hermitian) w.r.t. that
matrix: entry `(i, j)` of the read triangle stands for both `Aᵢⱼ` and `conj(Aⱼᵢ)`, so
it gets `2Gᵢⱼ`; the diagonal gets `real(Gᵢᵢ)` (its imaginary part is not read); the
other triangle gets nothing.
"""
function fold_triangle!(ΔA::AbstractMatrix, G::AbstractMatrix, uplo::Symbol)
    uplo = _check_uplo("fold_triangle!", uplo)
    n = size(G, 1)
    size(ΔA) == (n, n) || throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected ($n, $n)"))
    for j in 1:n
        ΔA[j, j] += real(G[j, j])
        for i in (uplo === :L ? (j+1:n) : (1:j-1))
            ΔA[i, j] += 2 * G[i, j]
        end
    end
    return ΔA
end

"""
    eigh_pullback!(ΔA, λ, V, Δλ, ΔV; uplo=:L, gradient=:triangle, degeneracy_atol=nothing,
                   broadening=nothing, gauge=:warn, gauge_atol=nothing) -> ΔA

Add to `ΔA` the gradient w.r.t. the `uplo` triangle read by [`eigh`](@ref), given the
eigenvalues `λ` (ascending), eigenvectors `V` and their cotangents (either may be
`nothing`). With `K = Vᴴ ΔV`, `Kₐ = K - Kᴴ`:

    Mᵢⱼ = Kₐᵢⱼ inv(λⱼ - λᵢ)/2 + δᵢⱼ Δλᵢ,    G = V M Vᴴ,

`inv` = [`gap_inverse`](@ref) (0 inside a cluster `|λᵢ - λⱼ| <= degeneracy_atol`; an
entry of `Kₐ` within its rounding error of 0, [`cut_rounding`](@ref), counts as 0), then
[`fold_triangle!`](@ref). `gradient=:hermitian` adds instead the Hermitian part of `G`,
the gradient of `eigh((A + Aᴴ)/2)` (torch.linalg.eigh's convention). `Kₐ` inside clusters (diagonal included: complex phases) is
gauge dependent and dropped; above `gauge_atol` the `gauge` policy applies, as it does
where `Δλ` weights a cluster's members unequally ([`check_weights`](@ref): use
[`matrix_function`](@ref) for `V f(Λ) Vᴴ`).
"""
function eigh_pullback!(ΔA::AbstractMatrix, λ::AbstractVector, V::AbstractMatrix, Δλ, ΔV;
                        uplo::Symbol=:L, gradient::Symbol=:triangle, degeneracy_atol=nothing,
                        broadening=nothing, gauge=:warn, gauge_atol=nothing)
    # With dP = Vᴴ dA V (Hermitian) and Ω = Vᴴ dV (anti-Hermitian), dPᵢⱼ = Ωᵢⱼ (λⱼ - λᵢ)
    # off the diagonal and dλᵢ = dPᵢᵢ; pairing with K = Vᴴ ΔV and keeping the Hermitian
    # part (dP is Hermitian) gives M. Inside a cluster the quotient is 0/0 and a
    # gauge-invariant loss has Kₐ = 0 there.
    uplo = _check_uplo("eigh", uplo)
    gradient in (:triangle, :hermitian) || throw(ArgumentError(
        "eigh: gradient must be :triangle or :hermitian, got $(repr(gradient))"))
    checks = _checks_gauge(gauge)
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(λ) : degeneracy_atol
    if iszerotangent(ΔV)
        iszerotangent(Δλ) && return ΔA
        check_weights(:eigh, real.(Δλ), λ, tol, gauge; gauge_atol)
        return _add_gradient!(ΔA, (V .* transpose(real.(Δλ))) * V', uplo, gradient)
    end
    # Kₐ = K - Kᴴ in K's memory, cut and then made M in place (svd_middle's helpers:
    # fewer 0.5 MB temporaries at 256×256); its entries within their rounding error of
    # 0 count as 0 (see svd_middle)
    Kₐ = _skew!(V' * ΔV)
    n = size(V, 1)
    if first(rounding_cut_window(λ, n; descending=false))
        _cut_pairs!(Kₐ, column_rounding(ΔV, n))
    end
    if checks
        gtol = gauge_atol === nothing ? default_gauge_atol(ΔV) : gauge_atol
        check_cluster_gauge(:eigh, Kₐ, λ, tol, gtol, gauge;
                            default_tol=gauge_atol === nothing)
        iszerotangent(Δλ) || check_weights(:eigh, real.(Δλ), λ, tol, gauge; gauge_atol)
    end
    ginv(x) = gap_inverse(x, tol, broadening)
    M = Kₐ .= Kₐ .* (ginv.(transpose(λ) .- λ) ./ 2)
    _add_diagonal!(M, Δλ)
    return _add_gradient!(ΔA, V * M * V', uplo, gradient)
end

# G, the gradient w.r.t. the Hermitian matrix, as the convention `gradient` wants it.
function _add_gradient!(ΔA, G, uplo, gradient)
    gradient === :triangle && return fold_triangle!(ΔA, G, uplo)
    ΔA .+= (G .+ G') ./ 2
    return ΔA
end

# ------------------------------------------------------------------ pushforwards
# Forward mode: the transposes of the functions above (pyspectral/pullbacks/eigh.py).

"""
    hermitian_from_triangle(ΔA, uplo) -> Matrix

The Hermitian matrix that a function reading only the `uplo` triangle of its input sees
when the input moves along `ΔA`: that triangle, its conjugate transpose in the other one,
and the real part of the diagonal (the transpose of [`fold_triangle!`](@ref); the other
triangle of `ΔA` is not read).
"""
function hermitian_from_triangle(ΔA::AbstractMatrix, uplo::Symbol)
    uplo = _check_uplo("hermitian_from_triangle", uplo)
    n = size(ΔA, 1)
    size(ΔA, 2) == n || throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected square"))
    H = zeros(float(eltype(ΔA)), n, n)
    for j in 1:n
        H[j, j] = real(ΔA[j, j])
        for i in (uplo === :L ? (j+1:n) : (1:j-1))
            H[i, j] = ΔA[i, j]
            H[j, i] = conj(ΔA[i, j])
        end
    end
    return H
end

"""
    eigh_pushforward(λ, V, ΔA; uplo=:L, degeneracy_atol=nothing, broadening=nothing)
        -> (Δλ, ΔV)

Tangents of the eigenvalues `λ` (ascending) and eigenvectors `V` of [`eigh`](@ref) along
`ΔA`, read from its `uplo` triangle ([`hermitian_from_triangle`](@ref)): the transpose of
[`eigh_pullback!`](@ref), same cluster rule. With `ΔP = Vᴴ ΔA_h V`:

    Δλ = real(diag(ΔP)),    ΔV = V (ΔP ∘ inv(λⱼ - λᵢ)),

`inv` = [`gap_inverse`](@ref): 0 inside a cluster `|λᵢ - λⱼ| <= degeneracy_atol` and on
the diagonal (no rotation within a degenerate subspace, no phase rotation).
"""
function eigh_pushforward(λ::AbstractVector, V::AbstractMatrix, ΔA::AbstractMatrix;
                          uplo::Symbol=:L, degeneracy_atol=nothing, broadening=nothing,
                          adapted::Bool=false, gauge=:warn)
    # A V = V Λ gives ΔP = Ω Λ - Λ Ω + ΔΛ with Ω = Vᴴ ΔV anti-Hermitian: Δλᵢ = ΔPᵢᵢ
    # and Ωᵢⱼ = ΔPᵢⱼ / (λⱼ - λᵢ) off the diagonal, through the regularised inverse. No
    # rounding cut (see svd_pushforward): ΔP is data. `adapted`: V is the basis adapted
    # to ΔA ([`eigh_adapted`](@ref)): the branch's rotation inside each split cluster,
    # Ωᵢⱼ = Nᵢⱼ / (μⱼ - μᵢ) with N = ΔP Ω, μ = Δλ, and the clusters the basis could not
    # follow measured ([`check_cluster_split`](@ref)).
    uplo = _check_uplo("eigh", uplo)
    n = length(λ)
    size(ΔA) == (n, n) || throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected ($n, $n)"))
    ΔH = hermitian_from_triangle(ΔA, uplo)
    ΔP = V' * ΔH * V
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(λ) : degeneracy_atol
    ginv(x) = gap_inverse(x, tol, broadening)
    Ω = ΔP .* ginv.(transpose(λ) .- λ)
    Δλ = [real(ΔP[i, i]) for i in 1:n]
    if adapted && broadening === nothing
        pairs = [i != j && abs(λ[i] - λ[j]) <= tol for i in 1:n, j in 1:n]
        if any(pairs)
            t = split_tol(ΔH)
            check_cluster_split(:eigh, ΔP, pairs, t, gauge)
            # (the clusters degenerate to rounding: those the frule could rotate)
            Ω += branch_rotation(ΔP * Ω, Δλ, pairs .& rounding_clusters(λ), t)
        end
    end
    return Δλ, V * Ω
end

# ------------------------------------------ forward mode at a degenerate cluster
# (the derivation: pyspectral/pullbacks/eigh.py and docs/math.md.) Along A + tΔA a
# cluster of equal eigenvalues splits by the eigenvalues μ of its block of ΔP = Vᴴ ΔA_h V,
# and the eigenvectors converge (t → 0+) to V_c Q, Q the eigenvectors of that block: a
# basis not adapted to ΔA has tangents that belong to no branch through it (V Λ Vᴴ
# rebuilt from them is off by the block's off-diagonal part). A frule sees ΔA, so it
# returns the adapted basis of every cluster degenerate to rounding (a near-degenerate
# one cannot be rotated without changing A by its spread: measured, check_cluster_split).

"""
    split_tol(ΔA) -> Real

`eps^(3/4) max|ΔA|`: an entry of a cluster's block of the tangent above it splits the
cluster (as `pyspectral.pullbacks.eigh.split_tol`).
"""
split_tol(ΔA) = maximum(abs, ΔA; init=zero(real(eltype(ΔA)))) * eps(real(eltype(ΔA)))^(3 / 4)

"""
    adapted_rotation(s, H, t, descending; eligible=nothing) -> Union{Nothing,Matrix}

The unitary `R` that turns the basis of each cluster of `s` degenerate to rounding
(consecutive values within `4 k eps max|s|`) into the one adapted to the tangent: the
eigenvectors of its block of `H` (the tangent's Hermitian block in the basis returned),
in the order of the values (`descending`: largest first, as `S`); identity on the
clusters the tangent does not split (no entry, off-diagonal or difference of diagonal
entries, above `t`) and outside `eligible`. `nothing` if there is nothing to rotate.
"""
function adapted_rotation(s::AbstractVector, H::AbstractMatrix, t, descending::Bool;
                          eligible=nothing)
    k = length(s)
    k < 2 && return nothing
    label = _rounding_labels(s)
    R = nothing
    for c in unique(label)
        idx = [i for i in 1:k if label[i] == c && (eligible === nothing || eligible[i])]
        length(idx) < 2 && continue
        B = H[idx, idx]
        d = real.(LinearAlgebra.diag(B))
        any(abs(B[a, b]) > t || abs(d[a] - d[b]) > t
            for a in eachindex(idx), b in eachindex(idx) if a != b) || continue
        Hc = Hermitian((B + B') / 2)
        Q = LinearAlgebra.eigen(descending ? -Hc : Hc).vectors
        R === nothing && (R = Matrix{eltype(H)}(I, k, k))
        R[idx, idx] = Q
    end
    return R
end

# The cluster number of each value of the sorted `s`: consecutive values within the
# rounding of the spectrum, `4 k eps max|s|`, share one.
function _rounding_labels(s::AbstractVector)
    k = length(s)
    r = maximum(abs, s; init=zero(real(eltype(s)))) * 4k * eps(real(eltype(s)))
    return cumsum([0; [abs(s[i+1] - s[i]) > r for i in 1:k-1]])
end

"""
    rounding_clusters(s) -> BitMatrix

The pairs of the sorted `s` in one cluster degenerate to rounding (as
`pyspectral.pullbacks.eigh.rounding_clusters`): the clusters a frule can rotate.
"""
function rounding_clusters(s::AbstractVector)
    label = _rounding_labels(s)
    return label .== transpose(label)
end

"""
    branch_rotation(N, μ, pairs, t) -> Matrix

`Nᵢⱼ / (μⱼ - μᵢ)` on the cluster `pairs` whose `μ` (the tangent's values) differ by more
than `t`, 0 elsewhere: the rotation of the branch inside a split cluster.
"""
function branch_rotation(N::AbstractMatrix, μ::AbstractVector, pairs::AbstractMatrix, t)
    k = length(μ)
    return [pairs[i, j] && abs(μ[j] - μ[i]) > t ? N[i, j] / (μ[j] - μ[i]) : zero(N[i, j])
            for i in 1:k, j in 1:k]
end

# Same text as pyspectral.pullbacks.eigh.cluster_split_message.
function cluster_split_message(op, measured, limit)
    values, route = op === :svd ?
        ("singular values", "svd_function(A, f) for U f(S) Vh (('pow', 1) for U diag(S) Vh)") :
        ("eigenvalues", "matrix_function(A, f) for V f(w) V^H")
    return string(op, ": forward mode: the tangent splits a cluster of ", values, " that ",
        "are degenerate within degeneracy_atol but not to rounding (entry ",
        round(measured; sigdigits=3), " > ", round(limit; sigdigits=3), " off the ",
        "diagonal of the tangent's block there), so the basis returned cannot follow it: ",
        "the tangents of that cluster's values and vectors are those of no branch through ",
        "this basis, and an output that reads the values through the vectors is not exact ",
        "(outputs invariant under rotations inside the cluster are). Use ", route,
        ": exact at every spectrum.")
end

"""
    check_cluster_split(op, H, pairs, t, policy) -> nothing

Apply the gauge `policy` where the tangent splits a cluster that the basis is not adapted
to: an off-diagonal entry of its Hermitian block `H` above `t` on the cluster `pairs`.
"""
function check_cluster_split(op::Symbol, H::AbstractMatrix, pairs::AbstractMatrix, t, policy)
    _checks_gauge(policy) || return nothing
    over = [abs(H[i, j]) for i in axes(H, 1), j in axes(H, 2) if pairs[i, j] && abs(H[i, j]) > t]
    isempty(over) && return nothing
    measured = maximum(over)
    return apply_gauge_policy(policy, op, measured, t, cluster_split_message(op, measured, t))
end

"""
    eigh_adapted(E::Eigen, ΔA; uplo=:L, broadening=nothing) -> Eigen

`E` with its vectors rotated to the basis adapted to the tangent `ΔA` (read from the
`uplo` triangle) inside each cluster degenerate to rounding that `ΔA` splits,
ascending ([`adapted_rotation`](@ref)); `E` itself where nothing is rotated.
"""
function eigh_adapted(E::Eigen, ΔA::AbstractMatrix; uplo::Symbol=:L, broadening=nothing)
    broadening === nothing || return E
    ΔH = hermitian_from_triangle(ΔA, uplo)
    R = adapted_rotation(E.values, E.vectors' * ΔH * E.vectors, split_tol(ΔH), false)
    return R === nothing ? E : Eigen(E.values, E.vectors * R)
end

"""
    teigh_pullback!(ΔA, λ, V, r, Δλ, ΔV, Δϵ; uplo=:L, largest=true,
                    degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                    gauge_atol=nothing) -> ΔA

Add to `ΔA` (on the `uplo` triangle) the gradient of [`teigh`](@ref)'s outputs, the `r`
eigenpairs at the wanted end and the truncation error `ϵ = norm(λ_discarded)`, from
their cotangents (`Δλ`, `ΔV` n×r, a real `Δϵ`; any may be `nothing`), given the whole
decomposition `λ` (ascending), `V`: [`eigh_pullback!`](@ref) with the kept cotangents in
their places and zero elsewhere (the exact coupling to the discarded pairs), and
`∂ϵ/∂λᵢ = λᵢ / ϵ` on the discarded eigenvalues (none when `ϵ = 0`).
"""
function teigh_pullback!(ΔA::AbstractMatrix, λ::AbstractVector, V::AbstractMatrix,
                         r::Integer, Δλ, ΔV, Δϵ; uplo::Symbol=:L, largest::Bool=true, kw...)
    n = length(λ)
    Δλ, ΔV, Δϵ = map(x -> iszerotangent(x) ? nothing : x, (Δλ, ΔV, Δϵ))
    kept = _kept_range(n, r, largest)
    discarded = largest ? (1:n-r) : (r+1:n)
    Δλall = _truncated_values_cotangent(λ, kept, discarded, _wanted_first(λ, largest), r,
                                        Δλ, Δϵ)
    ΔVall = nothing
    if ΔV !== nothing
        ΔVall = zeros(promote_type(eltype(ΔV), eltype(V)), size(V))
        ΔVall[:, kept] .= ΔV
    end
    return eigh_pullback!(ΔA, λ, V, Δλall, ΔVall; uplo, kw...)
end
