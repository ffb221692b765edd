# The subspace adjoint of eig_topk, mirrored from pyspectral/pullbacks/eig_topk.py (the
# derivation is there). With A V = V Λ, V = Q R, Π = I - Q Qᴴ and ΔV' = ΔV - V Re diag(Vᴴ ΔV):
#     gP = Diagonal(Δλ) + N ./ conj(λⱼ - λᵢ)   (zero on each cluster),  N = Vᴴ ΔV',
#     W = Q R⁻ᴴ,   (Π Aᴴ Π - conj(λⱼ)) ξⱼ = Π (ΔV' + Aᴴ W gP)ⱼ   (one solve per pair),
#     ΔA = (W gP - Ξ) Vᴴ.
# The products are by Aᴴ only; each column's solve is KrylovKit's GMRES on the complement.

"""
    eig_topk_pullback!(U, λ, V, Δλ, ΔV, Aᴴ; cluster_tol, tol=eps^(3/4), krylovdim=30,
                       maxiter=50) -> (U, Nin)

Writes into `U` (`n × k`, as `V`) the factor of the gradient `ΔA = U Vᴴ` of `eig_topk`'s `(λ, V)` for the cotangents
`Δλ`, `ΔV` (`nothing` or a zero tangent: none), with `Aᴴ` a function `x -> Aᴴ x`;
`cluster_tol` decides which pairs are one eigenvalue (their quotients are zeroed).
`Nin` is the cotangent's part inside the clusters (`Vᴴ ΔV'` there, diagonal included):
zero for a loss that does not see a basis or a phase, what the gauge check measures.
"""
function eig_topk_pullback!(U::AbstractMatrix, λ::AbstractVector, V::AbstractMatrix, Δλ,
                            ΔV, Aᴴ;
                            cluster_tol::Real, tol=nothing, krylovdim::Integer=30,
                            maxiter::Integer=50)
    T = eltype(V)
    k = length(λ)
    F = LinearAlgebra.qr(V)
    Q = Matrix(F.Q)
    W = Q / F.R'                                     # Q R⁻ᴴ
    if ΔV isa AbstractZero || ΔV === nothing
        ΔVn = zero(V)
    else
        ΔVn = ΔV .- V .* real.(sum(conj.(V) .* ΔV; dims=1))
    end
    N = V' * ΔVn
    cluster = [abs(λ[j] - λ[i]) <= cluster_tol for i in 1:k, j in 1:k]
    gP = [cluster[i, j] ? zero(T) : N[i, j] / conj(λ[j] - λ[i]) for i in 1:k, j in 1:k]
    if !(Δλ isa AbstractZero || Δλ === nothing)
        gP += LinearAlgebra.Diagonal(Vector{T}(Δλ))
    end
    Wg = W * gP
    project(x) = x - Q * (Q' * x)
    rhs = project(ΔVn + reduce(hcat, [Aᴴ(Wg[:, j]) for j in 1:k]))
    Ξ = zero(V)
    rtol = tol === nothing ? eps(real(T))^(3 / 4) : tol
    for j in 1:k
        b = rhs[:, j]
        iszero(b) && continue
        op(x) = project(Aᴴ(project(x)))
        ξ, info = KrylovKit.linsolve(op, b, zero(b), -conj(λ[j]), one(T);
                                     tol=rtol * norm(b), krylovdim, maxiter, verbosity=0)
        info.converged >= 1 ||
            @warn "eig_topk backward: the complement solve did not converge (residual " *
                  "$(info.normres)): the kept eigenvalues are close to the rest of the " *
                  "spectrum; the gradient is approximate. Raise maxiter / krylovdim or " *
                  "choose k at a gap." maxlog = 1
        Ξ[:, j] = project(ξ)
    end
    Nin = [cluster[i, j] ? N[i, j] : zero(T) for i in 1:k, j in 1:k]
    U .= Wg .- Ξ
    return U, Nin
end

"""
    eig_topk_pushforward(λ, V, dA, A; cluster_tol, tol=eps^(3/4), krylovdim=30,
                         maxiter=50) -> (dλ, dV, split)

Forward mode of `eig_topk`: with `A V = V Λ`, `V = Q R`, `Π = I - Q Qᴴ`, the complement
part `Y` of `dV` solves `(Π A Π - λⱼ) yⱼ = -Π dA vⱼ` (one solve per pair, products by
`A`), `dP = R⁻¹ Qᴴ (dA V + A Y)`, `dλ = diag(dP)`, `X = dP ./ (λⱼ - λᵢ)` off the clusters
and `dV = V X + Y`, normalised (`Re vⱼᴴ dvⱼ = 0`). Exact where the tangent does not
split a cluster (`dP` a multiple of the identity on it); `split` measures how far it
does (the largest off-diagonal or diagonal spread of `dP` on a cluster) for the
caller's gauge policy.
"""
function eig_topk_pushforward(λ::AbstractVector, V::AbstractMatrix, dA, A;
                              cluster_tol::Real, tol=nothing, krylovdim::Integer=30,
                              maxiter::Integer=50)
    T = eltype(V)
    k = length(λ)
    F = LinearAlgebra.qr(V)
    Q = Matrix(F.Q)
    project(x) = x - Q * (Q' * x)
    rtol = tol === nothing ? eps(real(T))^(3 / 4) : tol
    rhs = -project(dA * V)
    Y = zero(V)
    for j in 1:k
        b = rhs[:, j]
        iszero(b) && continue
        op(x) = project(A * project(x))
        y, info = KrylovKit.linsolve(op, b, zero(b), -λ[j], one(T);
                                     tol=rtol * norm(b), krylovdim, maxiter, verbosity=0)
        info.converged >= 1 ||
            @warn "eig_topk forward mode: the complement solve did not converge " *
                  "(residual $(info.normres)); the tangent is approximate." maxlog = 1
        Y[:, j] = project(y)
    end
    dP = F.R \ (Q' * (dA * V + A * Y))
    cluster = [abs(λ[j] - λ[i]) <= cluster_tol for i in 1:k, j in 1:k]
    split = zero(real(T))
    for j in 1:k, i in 1:k
        cluster[i, j] || continue
        split = max(split, i == j ? abs(dP[i, i] - dP[j, j]) : abs(dP[i, j]))
        split = max(split, abs(dP[i, i] - dP[j, j]))
    end
    X = [cluster[i, j] ? zero(T) : dP[i, j] / (λ[j] - λ[i]) for i in 1:k, j in 1:k]
    dV = V * X + Y
    dV .-= V .* real.(sum(conj.(V) .* dV; dims=1))
    return LinearAlgebra.diag(dP), dV, split
end
