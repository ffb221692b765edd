# Exact pullbacks of top-k decompositions without the discarded vectors (Francuz,
# Schuch, Vanhecke, Phys. Rev. Research 7, 013237 (2025); MatrixAlgebraKit.jl's
# truncated SVD pullback). Same formulas as pyspectral/_lowrank.py.

"""
    block_cg(op, b; rtol, maxiter) -> x

Conjugate gradients for `op(x) = b` on every column of `b` at once (column-wise
scalars), `op` Hermitian positive definite on the relevant subspace. Warns when a
column has not reached relative residual `rtol` after `maxiter` steps.
"""
function block_cg(op, b::AbstractMatrix; rtol::Real, maxiter::Integer)
    colnorm2(r) = vec(sum(abs2, r; dims=1))
    x = zero(b)
    r = copy(b)
    p = copy(r)
    rr = colnorm2(r)
    target = rtol^2 .* max.(rr, floatmin(eltype(rr)))
    for _ in 1:maxiter
        all(rr .<= target) && return x
        Ap = op(p)
        pAp = vec(real.(sum(conj.(p) .* Ap; dims=1)))
        α = [q > 0 ? s / q : zero(s) for (s, q) in zip(rr, pAp)]
        x .+= p .* transpose(α)
        r .-= Ap .* transpose(α)
        rrn = colnorm2(r)
        p = r .+ p .* transpose(rrn ./ max.(rr, floatmin(eltype(rr))))
        rr = rrn
    end
    all(rr .<= target) ||
        @warn "top-k pullback: the Sylvester solve did not converge in $maxiter iterations: " *
              "the gap between the kept and discarded spectrum is too small. The gradient " *
              "is finite but approximate."
    return x
end

"""
    svd_trunc_pullback!(ΔA, A, U, S, Vᴴ, ΔU, ΔS, ΔVᴴ; rtol=nothing, maxiter=500,
                        degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                        gauge_atol=nothing) -> ΔA

Add to `ΔA` the exact gradient of the top-`k` triplets `(U, S, Vᴴ)` of `A` (`U` m×k)
from their cotangents: the kept block as in [`svd_pullback!`](@ref), plus
`X Vᴴ + U Yᴴ` with

    X S - A⊥ Y = (I - U Uᴴ) ΔU,    Y S - A⊥ᴴ X = (I - V Vᴴ) ΔV,    A⊥ = A - U S Vᴴ,

solved as `(sᵢ² - A⊥A⊥ᴴ) xᵢ = rᵢ` by [`block_cg`](@ref) (positive definite while the
gap at `k` is open), using products by `A` and `Aᴴ` only. `rtol` defaults to
`eps^(3/4)`.
"""
function svd_trunc_pullback!(ΔA::AbstractMatrix, A::AbstractMatrix, U::AbstractMatrix,
                             S::AbstractVector, Vᴴ::AbstractMatrix, ΔU, ΔS, ΔVᴴ;
                             rtol=nothing, maxiter::Integer=500, degeneracy_atol=nothing,
                             broadening=nothing, gauge=:warn, gauge_atol=nothing)
    # The kept block: cotangents projected onto span(U), span(V) leave J, K (hence M)
    # unchanged and make svd_pullback!'s own complement terms vanish.
    gtol = gauge_atol === nothing ? default_gauge_atol(ΔU, ΔVᴴ) : gauge_atol
    ΔUk = iszerotangent(ΔU) ? nothing : U * (U' * ΔU)
    ΔVᴴk = iszerotangent(ΔVᴴ) ? nothing : (ΔVᴴ * Vᴴ') * Vᴴ
    svd_pullback!(ΔA, U, S, Vᴴ, ΔUk, ΔS, ΔVᴴk; degeneracy_atol, broadening, gauge,
                  gauge_atol=gtol)
    iszerotangent(ΔU) && iszerotangent(ΔVᴴ) && return ΔA
    V = Matrix(Vᴴ')
    Sr = transpose(S)
    perp(Y) = A * Y - U * (S .* (Vᴴ * Y))     # A⊥ Y
    perpᴴ(X) = A' * X - V * (S .* (U' * X))   # A⊥ᴴ X
    PU = iszerotangent(ΔU) ? zero(U) : ΔU - U * (U' * ΔU)
    PV = iszerotangent(ΔVᴴ) ? zero(V) : ΔVᴴ' - V * (Vᴴ * ΔVᴴ')
    tol = rtol === nothing ? eps(real(eltype(U)))^(3 / 4) : rtol
    X = block_cg(X -> X .* (Sr .^ 2) - perp(perpᴴ(X)), PU .* Sr + perp(PV); rtol=tol, maxiter)
    Y = (PV + perpᴴ(X)) ./ Sr
    ΔA .+= X * Vᴴ + U * Y'
    return ΔA
end

"""
    eigh_trunc_pullback!(ΔA, A, λ, V, Δλ, ΔV; uplo=:L, rtol=nothing, maxiter=500,
                         degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                         gauge_atol=nothing) -> ΔA

Add to `ΔA` the exact gradient (on the `uplo` triangle) of the `k` largest eigenpairs
`(λ, V)` of `Hermitian(A, uplo)`: the kept block as in [`eigh_pullback!`](@ref), plus
`(X Vᴴ + V Xᴴ)/2` folded, where `X Λ - A⊥ X = (I - V Vᴴ) ΔV`, `A⊥ = A - V Λ Vᴴ`
(positive definite column by column: every discarded eigenvalue is below `λᵢ`).
"""
function eigh_trunc_pullback!(ΔA::AbstractMatrix, A::AbstractMatrix, λ::AbstractVector,
                              V::AbstractMatrix, Δλ, ΔV; uplo::Symbol=:L, rtol=nothing,
                              maxiter::Integer=500, degeneracy_atol=nothing,
                              broadening=nothing, gauge=:warn, gauge_atol=nothing)
    uplo = _check_uplo("eigh", uplo)
    eigh_pullback!(ΔA, λ, V, Δλ, ΔV; uplo, degeneracy_atol, broadening, gauge, gauge_atol)
    iszerotangent(ΔV) && return ΔA
    H = Hermitian(A, uplo)
    λr = transpose(λ)
    op(X) = X .* λr - (H * X - V * (λ .* (V' * X)))
    tol = rtol === nothing ? eps(real(eltype(V)))^(3 / 4) : rtol
    X = block_cg(op, ΔV - V * (V' * ΔV); rtol=tol, maxiter)
    return fold_triangle!(ΔA, (X * V' + V * X') / 2, uplo)
end
