# Pullback of the linear solve `(a0 I + a1 A) x = b` (pyspectral/pullbacks/linsolve.py
# holds the same formula in torch). With the adjoint solution `y = (a0 I + a1 A)⁻ᴴ x̄`:
# b̄ = y, ā0 = -xᴴy, ā1 = -(Ax)ᴴy, Ā = -conj(a1) y xᴴ (ChainRules' and torch's convention
# for complex numbers: the cotangent is ∂L/∂Re + i ∂L/∂Im).

"""
    linsolve_pullback!(ΔA, A, x, Δx, a0=0, a1=1; ishermitian=false, isposdef=false,
                       atol=nothing, rtol=nothing, krylovdim=30, maxiter=100)
        -> (Δb, Δa0, Δa1)

Add to `ΔA` the gradient `-conj(a1) y xᴴ` of [`linsolve`](@ref)'s `x` given its
cotangent `Δx`, with `y` the adjoint solve `(conj(a0) I + conj(a1) Aᴴ) y = Δx` to the
forward's relative accuracy (the forward's solver on `A'`), and return the cotangents of
`b`, `a0` and `a1`. `ΔA` may be `nothing` (only `Δb`, `Δa0`, `Δa1` wanted).
"""
function linsolve_pullback!(ΔA, A::AbstractMatrix, x::AbstractVector, Δx::AbstractVector,
                            a0::Number=false, a1::Number=true; ishermitian::Bool=false,
                            isposdef::Bool=false, atol=nothing, rtol=nothing,
                            krylovdim::Integer=30, maxiter::Integer=100)
    T = eltype(x)
    tol = _linsolve_tol(T, Δx, atol, rtol)
    y, info = _krylov(A', Vector{T}(Δx), zeros(T, length(x)), conj(a0), conj(a1); tol,
                      krylovdim, maxiter, ishermitian, isposdef)
    _linsolve_converged(info, tol, "the backward's adjoint solve")
    ΔA === nothing || (ΔA .-= conj(a1) .* y .* x')
    return y, -dot(x, y), -dot(A * x, y)
end
