# Pullback of a fixed point `x* = F(x*, θ)` by implicit differentiation
# (pyspectral/pullbacks/fixed_point.py holds the same in torch): with `J = ∂F/∂x` at
# `x*`, solve `(1 - Jᴴ) y = x̄`, then `θ̄ = (∂F/∂θ)ᴴ y` (one more vjp, by the caller).
# `Jᴴ` is only real-linear in general (a step with `conj`, `abs` or a decomposition), so
# the solve runs on the entries as real numbers.

"""
    DerivativeError(msg)

Thrown by the fixed-point pullback where `(1 - Jᴴ) y = x̄` has no solution to the
requested accuracy: `J` has an eigenvalue at or near 1 (an unfixed gauge, or a fixed
point that is not a differentiable function of the step's parameters).
"""
struct DerivativeError <: Exception
    msg::String
end

Base.showerror(io::IO, e::DerivativeError) = print(io, "DerivativeError: ", e.msg)

"""
    fixed_point_pullback!(y, vjp, Δx; tol, krylovdim=30, maxiter=20) -> y

Write into `y` the solution of `(1 - Jᴴ) y = Δx`, with `vjp(v) = Jᴴ v` (an array of
`Δx`'s shape), by GMRES (`KrylovKit.linsolve`) in real arithmetic to the residual
`tol * norm(Δx)`. Throws [`DerivativeError`](@ref) where it does not converge, or
where `norm(y) > norm(Δx) / sqrt(eps)` (`1 - Jᴴ` singular to working precision).
"""
function fixed_point_pullback!(y::AbstractArray, vjp, Δx::AbstractArray; tol::Real,
                               krylovdim::Integer=30, maxiter::Integer=20)
    T = eltype(Δx)
    as_real(v) = collect(reinterpret(real(T), vec(collect(T, v))))
    as_array(w) = reshape(collect(reinterpret(T, w)), size(Δx))
    b = as_real(Δx)
    apply(w) = as_real(_tangent_array(vjp(as_array(w)), Δx))
    z, info = KrylovKit.linsolve(apply, b, zero(b), 1, -1; tol=tol * norm(b), krylovdim,
                                 maxiter, verbosity=0)
    if info.converged < 1
        throw(DerivativeError("fixed_point: the implicit gradient's solve (1 - Jᴴ) y = x̄ " *
            "did not converge: relative residual $(info.normres / max(norm(b), floatmin())) " *
            "> $tol after $(info.numops) vjps. The step's Jacobian at x* has an " *
            "eigenvalue at or near 1: a gauge freedom the step does not fix (pass " *
            "gauge_fix), or a fixed point that is not a differentiable function of the " *
            "step's parameters."))
    end
    # A Jacobian eigenvalue 1 up to rounding leaves the system consistent to working
    # precision: GMRES then converges to a huge y along the (near) null direction.
    growth = norm(z) / max(norm(b), floatmin())
    if growth > 1 / sqrt(eps(real(T)))
        throw(DerivativeError("fixed_point: the implicit gradient's solve (1 - Jᴴ) y = x̄ " *
            "is singular to working precision: ‖y‖ / ‖x̄‖ = $(round(growth; sigdigits=3)). " *
            "The step's Jacobian at x* has an eigenvalue at 1: a gauge freedom the step " *
            "does not fix (pass gauge_fix), or a loss that depends on that gauge."))
    end
    y .= as_array(z)
    return y
end

# A vjp's cotangent as an array like `x` (a zero or thunked tangent included).
_tangent_array(Δ, x) = (Δ = unthunk(Δ); Δ isa AbstractZero ? zero(x) : Δ)
