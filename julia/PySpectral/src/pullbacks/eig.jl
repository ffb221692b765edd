# Non-Hermitian eigendecomposition pullback and pushforward: plain functions of arrays
# (the math of pyspectral/pullbacks/eig.py).
#
# Derivation (Giles 2008; Boeddeker et al. 2017, eq. 4.77; PyTorch's
# linalg_eig_backward). With A = V Diagonal(λ) V⁻¹, unit-norm columns of V and
# dP = V⁻¹ dA V: dλ = diag(dP) and dV = V X - V Re diag(Vᴴ V X), Xᵢⱼ = dPᵢⱼ / (λⱼ - λᵢ)
# off the diagonal (the second term keeps the columns at unit norm). Transposed, with
# N = VᴴΔV - VᴴV Re diag(VᴴΔV):
#     ΔA = V⁻ᴴ (Diagonal(Δλ) + N ∘ conj(inv(λⱼ - λᵢ))) Vᴴ.
# Inside a cluster of (numerically) equal eigenvalues of a diagonalizable A the quotient
# is 0/0: a loss that does not depend on the basis of the eigenspace (nor on phases) has
# N = 0 on the cluster, diagonal included, so it is set to 0 there and measured; the
# eigenvalues must enter through symmetric functions of the cluster (check_weights). At
# a (numerically) defective A, V is singular and no derivative exists.

"""
    eigenvector_inverse(V; op=:eig) -> Matrix

`V⁻¹` after checking that the unit-norm eigenvectors `V` are well enough conditioned
for a derivative to exist: a `DomainError` where `κ(V) = sqrt(n) norm(V⁻¹) >=
eps^(-1/2)` (`sqrt(n) = norm(V)`, Frobenius norms, as pyspectral's `eigenvector_lu`
for n <= 32): a defective `A`, or one within rounding of defective, where the
eigenvalues move like the square root of a perturbation.
"""
function eigenvector_inverse(V::AbstractMatrix; op::Symbol=:eig)
    limit = inv(sqrt(eps(real(float(eltype(V))))))
    F = LinearAlgebra.lu(V; check=false)
    Vinv = LinearAlgebra.issuccess(F) ? inv(F) : nothing
    cond = Vinv === nothing ? oftype(limit, Inf) :
           sqrt(size(V, 1)) * LinearAlgebra.norm(Vinv)
    (isfinite(cond) && cond < limit) && return Vinv
    throw(DomainError(cond, string(op, ": A is defective or numerically defective: ",
        "its eigenvectors are (nearly) linearly dependent (condition number ",
        round(cond; sigdigits=3), " >= eps^(-1/2) = ", round(limit; sigdigits=3),
        "), so its eigenvalues are not differentiable there (they move like the square ",
        "root of a perturbation). Differentiate a function that stays smooth there ",
        "(trace(A), det(A), a matrix function computed without eig), or perturb A.")))
end

"""
    eig_pullback!(ΔA, λ, V, Δλ, ΔV; degeneracy_atol=nothing, broadening=nothing,
                  gauge=:warn, gauge_atol=nothing) -> ΔA

Add to `ΔA` the gradient w.r.t. `A = V Diagonal(λ) V⁻¹` ([`eig`](@ref); the real part
for a real `ΔA`) given the cotangents `Δλ`, `ΔV` (either may be `nothing`). With
`N = VᴴΔV - VᴴV Re diag(VᴴΔV)`:

    ΔA = V⁻ᴴ (Diagonal(Δλ) + N ∘ conj(inv(λⱼ - λᵢ))) Vᴴ,

`inv` = [`gap_inverse`](@ref) (0 inside a cluster `|λᵢ - λⱼ| <= degeneracy_atol`,
default `maximum(abs, λ) eps^(3/4)`). `N` inside clusters (diagonal included: phases)
depends on the basis of an eigenspace and is dropped; above `gauge_atol` the `gauge`
policy applies, as it does where `Δλ` weights a cluster unequally
([`check_weights`](@ref)). A (numerically) defective `A` throws a `DomainError`
([`eigenvector_inverse`](@ref)).
"""
function eig_pullback!(ΔA::AbstractMatrix, λ::AbstractVector, V::AbstractMatrix, Δλ, ΔV;
                       degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                       gauge_atol=nothing)
    n = length(λ)
    size(ΔA) == (n, n) ||
        throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected ($n, $n)"))
    (iszerotangent(Δλ) && iszerotangent(ΔV)) && return ΔA
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(λ) : degeneracy_atol
    Vinv = eigenvector_inverse(V)
    M = zeros(eltype(V), n, n)
    if !iszerotangent(ΔV)
        VᴴΔV = V' * ΔV
        N = VᴴΔV - V' * (V .* transpose(real.(LinearAlgebra.diag(VᴴΔV))))
        if _checks_gauge(gauge)
            gtol = gauge_atol === nothing ? default_gauge_atol(ΔV) : gauge_atol
            check_gauge(:eig, _cluster_max(N, λ, tol), gtol, gauge)
        end
        M .= N .* conj.(gap_inverse.(transpose(λ) .- λ, tol, Ref(broadening)))
    end
    if !iszerotangent(Δλ)
        for i in 1:n
            M[i, i] += Δλ[i]
        end
        check_weights(:eig, Δλ, λ, tol, gauge; gauge_atol)
    end
    G = Vinv' * M * V'
    ΔA .+= eltype(ΔA) <: Real ? real.(G) : G
    return ΔA
end

"""
    eig_pushforward(λ, V, ΔA; degeneracy_atol=nothing, broadening=nothing) -> (Δλ, ΔV)

Tangents of [`eig`](@ref) along `ΔA`: the transpose of [`eig_pullback!`](@ref), same
cluster rule. With `ΔP = V⁻¹ ΔA V`: `Δλ = diag(ΔP)`, `ΔV = X - V Re diag(Vᴴ X)`,
`X = V (ΔP ∘ inv(λⱼ - λᵢ))` (0 inside a cluster and on the diagonal: no rotation of an
eigenspace, no phase; the second term keeps the columns at unit norm).
"""
function eig_pushforward(λ::AbstractVector, V::AbstractMatrix, ΔA::AbstractMatrix;
                         degeneracy_atol=nothing, broadening=nothing)
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(λ) : degeneracy_atol
    ΔP = eigenvector_inverse(V) * ΔA * V
    X = V * (ΔP .* gap_inverse.(transpose(λ) .- λ, tol, Ref(broadening)))
    ΔV = X - V .* transpose(real.(vec(sum(conj.(V) .* X; dims=1))))
    return LinearAlgebra.diag(ΔP), ΔV
end
