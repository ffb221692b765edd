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
    K = V' * ΔV
    # Kₐᵢⱼ within its rounding error of 0 counts as 0 (see svd_middle)
    Kₐ = K - K'
    n = size(V, 1)
    if first(rounding_cut_window(λ, n; descending=false))
        Kₐ = cut_rounding(Kₐ, pair_rounding(column_rounding(ΔV, n)))
    end
    if checks
        gtol = gauge_atol === nothing ? default_gauge_atol(ΔV) : gauge_atol
        check_gauge(:eigh, _cluster_max(Kₐ, λ, tol), gtol, gauge)
        iszerotangent(Δλ) || check_weights(:eigh, real.(Δλ), λ, tol, gauge; gauge_atol)
    end
    ginv(x) = gap_inverse(x, tol, broadening)
    M = Kₐ .* (ginv.(transpose(λ) .- λ) ./ 2)
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
                          uplo::Symbol=:L, degeneracy_atol=nothing, broadening=nothing)
    # A V = V Λ gives ΔP = Ω Λ - Λ Ω + ΔΛ with Ω = Vᴴ ΔV anti-Hermitian: Δλᵢ = ΔPᵢᵢ
    # and Ωᵢⱼ = ΔPᵢⱼ / (λⱼ - λᵢ) off the diagonal, through the regularised inverse. No
    # rounding cut (see svd_pushforward): ΔP is data.
    uplo = _check_uplo("eigh", uplo)
    n = length(λ)
    size(ΔA) == (n, n) || throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected ($n, $n)"))
    ΔP = V' * hermitian_from_triangle(ΔA, uplo) * V
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(λ) : degeneracy_atol
    ginv(x) = gap_inverse(x, tol, broadening)
    ΔV = V * (ΔP .* ginv.(transpose(λ) .- λ))
    return [real(ΔP[i, i]) for i in 1:n], ΔV
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
