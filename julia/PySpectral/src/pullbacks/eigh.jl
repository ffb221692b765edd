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
    eigh_pullback!(ΔA, λ, V, Δλ, ΔV; uplo=:L, degeneracy_atol=nothing,
                   broadening=nothing, gauge=:warn, gauge_atol=nothing) -> ΔA

Add to `ΔA` the gradient w.r.t. the `uplo` triangle read by [`eigh`](@ref), given the
eigenvalues `λ` (ascending), eigenvectors `V` and their cotangents (either may be
`nothing`). With `K = Vᴴ ΔV`, `Kₐ = K - Kᴴ`:

    Mᵢⱼ = Kₐᵢⱼ inv(λⱼ - λᵢ)/2 + δᵢⱼ Δλᵢ,    G = V M Vᴴ,

`inv` = [`gap_inverse`](@ref) (0 inside a cluster `|λᵢ - λⱼ| <= degeneracy_atol`), then
[`fold_triangle!`](@ref). `Kₐ` inside clusters (diagonal included: complex phases) is
gauge dependent and dropped; above `gauge_atol` the `gauge` policy applies.
"""
function eigh_pullback!(ΔA::AbstractMatrix, λ::AbstractVector, V::AbstractMatrix, Δλ, ΔV;
                        uplo::Symbol=:L, degeneracy_atol=nothing, broadening=nothing,
                        gauge=:warn, gauge_atol=nothing)
    # With dP = Vᴴ dA V (Hermitian) and Ω = Vᴴ dV (anti-Hermitian), dPᵢⱼ = Ωᵢⱼ (λⱼ - λᵢ)
    # off the diagonal and dλᵢ = dPᵢᵢ; pairing with K = Vᴴ ΔV and keeping the Hermitian
    # part (dP is Hermitian) gives M. Inside a cluster the quotient is 0/0 and a
    # gauge-invariant loss has Kₐ = 0 there.
    uplo = _check_uplo("eigh", uplo)
    checks = _checks_gauge(gauge)
    if iszerotangent(ΔV)
        iszerotangent(Δλ) && return ΔA
        return fold_triangle!(ΔA, (V .* transpose(real.(Δλ))) * V', uplo)
    end
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(λ) : degeneracy_atol
    K = V' * ΔV
    Kₐ = K - K'
    if checks
        gtol = gauge_atol === nothing ? default_gauge_atol(ΔV) : gauge_atol
        check_gauge(:eigh, _cluster_max(Kₐ, λ, tol), gtol, gauge)
    end
    ginv(x) = gap_inverse(x, tol, broadening)
    M = Kₐ .* (ginv.(transpose(λ) .- λ) ./ 2)
    _add_diagonal!(M, Δλ)
    return fold_triangle!(ΔA, V * M * V', uplo)
end
