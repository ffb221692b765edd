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
# a (numerically) defective A, V is singular, or a pair divided by is within rounding of
# coalescing, and no derivative can be trusted (check_diagonalizable; docs/math.md, "eig:
# when a derivative exists"). Forward mode at a cluster: check_split.

"""
    eigenvector_inverse(V; op=:eig) -> Matrix

`V⁻¹` after checking that the unit-norm eigenvectors `V` are well enough conditioned
for a derivative to exist: a `DomainError` where `κ(V) = sqrt(n) norm(V⁻¹) >=
eps^(-1/2)` (`sqrt(n) = norm(V)`, Frobenius norms, as condition 1 of pyspectral's
`check_diagonalizable` for n <= 32): a defective `A`, or one within rounding of
defective, where the eigenvalues move like the square root of a perturbation.
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
        round(cond; sigdigits=3), " >= eps**(-1/2) = ", round(limit; sigdigits=3),
        "), so its eigenvalues are not differentiable there (they move like the square ",
        "root of a perturbation). Differentiate a function that stays smooth there ",
        "(trace(A), det(A), torch.linalg.matrix_exp(A), torch.linalg.matrix_power(A, k)), ",
        "or perturb A.")))
end

"""
    check_diagonalizable(λ, V; degeneracy_atol=nothing, op=:eig, pairs=true) -> Matrix

`V⁻¹` after checking that a derivative of `A = V Diagonal(λ) V⁻¹` can be trusted there
(pyspectral's `check_diagonalizable`; docs/math.md, "eig: when a derivative exists"); a
`DomainError` where it cannot:

1. `V` is invertible to half the digits ([`eigenvector_inverse`](@ref)): inside a
   cluster, what says the cluster is an eigenspace, not a Jordan block.
2. Every pair the pullback divides by (`|λᵢ - λⱼ| > degeneracy_atol`, default
   `maximum(abs, λ) eps^(3/4)`) is resolved: its effective gap `2|λᵢ - λⱼ| / (κᵢ + κⱼ)`
   (`κᵢ = norm(V⁻¹[i, :])`, the condition number of `λᵢ` for unit-norm columns; twice
   the first-order distance to a matrix where the pair coalesces) is at least
   `degeneracy_atol` where given, else `eps^(3/4) max(maximum(abs, λ), norm(A) / sqrt(n))`.
   The derivatives of the pair change by about `norm(ΔA)` over the effective gap of
   themselves under a perturbation `ΔA`, so the rounding of `A` leaves a resolved
   pair's within `eps^(1/4)` of exact; for a normal `A` (`κ = 1`) every pair the
   default tolerance separates is resolved.

`pairs=false` checks condition 1 alone (for `eig_function`, whose divided differences of
`f` replace the quotients `1 / (λᵢ - λⱼ)`).
"""
function check_diagonalizable(λ::AbstractVector, V::AbstractMatrix; degeneracy_atol=nothing,
                              op::Symbol=:eig, pairs::Bool=true)
    Vinv = eigenvector_inverse(V; op)
    n = length(λ)
    (pairs && n > 1) || return Vinv
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(λ) : degeneracy_atol
    resolution(scale) = degeneracy_atol === nothing ? scale * _eps34(eltype(V)) :
                        degeneracy_atol
    # A cheap sufficient test first (as in Python): k = norm(V⁻¹) bounds every κᵢ, and
    # max|λ| sqrt(n) k bounds the scale.
    k = LinearAlgebra.norm(Vinv)
    least = minimum((abs(λ[i] - λ[j]) for j in 1:n for i in 1:n
                     if i != j && abs(λ[i] - λ[j]) > tol); init=oftype(k, Inf))
    least / k >= resolution(_maxabs(λ) * sqrt(n) * k) && return Vinv
    κ = [LinearAlgebra.norm(view(Vinv, i, :)) for i in 1:n]
    scale = max(_maxabs(λ), LinearAlgebra.norm((V .* transpose(λ)) * Vinv) / sqrt(n))
    limit = resolution(scale)
    worst, wgap = oftype(scale, Inf), zero(scale)
    for j in 1:n, i in 1:n
        gap = abs(λ[i] - λ[j])
        (i == j || gap <= tol) && continue
        effective = 2gap / (κ[i] + κ[j])
        if effective < limit && effective < worst
            worst, wgap = effective, gap
        end
    end
    isfinite(worst) && throw(DomainError(worst, pair_message(op, worst, wgap, limit)))
    return Vinv
end

# Same text as pyspectral.pullbacks.eig.pair_message.
function pair_message(op, effective, gap, limit)
    r(x) = round(x; sigdigits=3)
    return string(op, ": A is numerically defective: two of its eigenvalues are apart ",
        "(|w_i - w_j| = ", r(gap), ") but within rounding of coalescing: their effective ",
        "gap 2 |w_i - w_j| / (kappa_i + kappa_j) = ", r(effective), " is below the ",
        "resolution ", r(limit), " (eps**(3/4) max(max|w|, ||A||_F / sqrt(n)), or ",
        "degeneracy_atol; kappa_i: the condition number of w_i), so the derivatives of ",
        "the pair (which divide by w_i - w_j) are not determined by A to any accuracy. ",
        "Differentiate a function that stays smooth there (trace(A), det(A), ",
        "torch.linalg.matrix_exp(A), torch.linalg.matrix_power(A, k)), or perturb A.")
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
([`check_diagonalizable`](@ref)).
"""
function eig_pullback!(ΔA::AbstractMatrix, λ::AbstractVector, V::AbstractMatrix, Δλ, ΔV;
                       degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                       gauge_atol=nothing)
    n = length(λ)
    size(ΔA) == (n, n) ||
        throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected ($n, $n)"))
    (iszerotangent(Δλ) && iszerotangent(ΔV)) && return ΔA
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(λ) : degeneracy_atol
    Vinv = check_diagonalizable(λ, V; degeneracy_atol)
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
    eig_pushforward(λ, V, ΔA; degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                    gauge_atol=nothing) -> (Δλ, ΔV)

Tangents of [`eig`](@ref) along `ΔA`: the transpose of [`eig_pullback!`](@ref), same
cluster rule. With `ΔP = V⁻¹ ΔA V`: `Δλ = diag(ΔP)`, `ΔV = X - V Re diag(Vᴴ X)`,
`X = V (ΔP ∘ inv(λⱼ - λᵢ))` (0 inside a cluster and on the diagonal: no rotation of an
eigenspace, no phase; the second term keeps the columns at unit norm). A tangent that
splits a cluster ([`check_split`](@ref)) triggers the `gauge` policy.
"""
function eig_pushforward(λ::AbstractVector, V::AbstractMatrix, ΔA::AbstractMatrix;
                         degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                         gauge_atol=nothing)
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(λ) : degeneracy_atol
    Vinv = check_diagonalizable(λ, V; degeneracy_atol)
    ΔP = Vinv * ΔA * V
    if broadening === nothing && _checks_gauge(gauge)
        check_split(:eig, λ, ΔP, tol, Vinv, ΔA, gauge; gauge_atol)
    end
    X = V * (ΔP .* gap_inverse.(transpose(λ) .- λ, tol, Ref(broadening)))
    ΔV = X - V .* transpose(real.(vec(sum(conj.(V) .* X; dims=1))))
    return LinearAlgebra.diag(ΔP), ΔV
end

"""
    check_split(op, λ, ΔP, tol, Vinv, ΔA, policy; gauge_atol=nothing) -> nothing

Apply the gauge `policy` where the tangent splits a degenerate cluster
(`|λᵢ - λⱼ| <= tol`): the block of `ΔP = V⁻¹ ΔA V` on a cluster is the first-order change
of `A` its eigenspace sees, and the cluster stays repeated to first order iff that block
is a multiple of the identity. Otherwise the tangents returned (the block's diagonal, no
rotation) follow no branch of `A + t ΔA` consistent with the eigenvectors returned.
Measured: `max(|ΔPᵢⱼ|, |ΔPᵢᵢ - ΔPⱼⱼ|)` over the pairs of a cluster; allowed: `gauge_atol`,
default `eps^(3/4) maximum(abs, ΔP)` plus the rounding of `ΔP`,
`4 n eps κ(V) maximum(abs, ΔA)`. A recording policy gets the op `Symbol(op, ":split")`.
"""
function check_split(op::Symbol, λ, ΔP, tol, Vinv, ΔA, policy; gauge_atol=nothing)
    n = length(λ)
    measured = zero(real(float(eltype(ΔP))))
    for j in 1:n, i in 1:n
        (i == j || abs(λ[i] - λ[j]) > tol) && continue
        measured = max(measured, abs(ΔP[i, j]), abs(ΔP[i, i] - ΔP[j, j]))
    end
    iszero(measured) && return nothing
    allowed = if gauge_atol === nothing
        R = real(float(eltype(ΔP)))
        default_gauge_atol(ΔP) +
            4n * eps(R) * LinearAlgebra.norm(Vinv) * sqrt(n) * _maxabs(ΔA)
    else
        gauge_atol
    end
    measured > allowed || return nothing
    return apply_gauge_policy(policy, Symbol(op, ":split"), measured, allowed,
                              split_message(op, measured, allowed))
end

# Same text as pyspectral.pullbacks.eig.split_message.
function split_message(op, measured, allowed)
    return string(op, ": forward mode at a degenerate cluster of eigenvalues: the tangent ",
        "splits it (V^-1 dA V on the cluster is not a multiple of the identity: measured ",
        round(measured; sigdigits=3), " > allowed ", round(allowed; sigdigits=3), "), so ",
        "the tangents returned for its eigenvalues and eigenvectors follow no branch ",
        "consistent with the eigenvectors returned and are not exact (only functions of ",
        "the cluster's sum or mean and of its spectral projector are: reverse mode, which ",
        "sees the loss, tells them apart). Use eig_function(A, f) for V f(L) V^-1 (exact ",
        "at every spectrum of a diagonalizable A, forward mode included), or a tangent dA ",
        "that keeps the cluster together.")
end
