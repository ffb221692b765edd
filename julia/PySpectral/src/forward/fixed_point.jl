# The fixed point of an iteration, `x* = fix(f(x*))` (pyspectral/fixed_point.py holds the
# same in torch). Its rrule (src/rrules.jl) differentiates it implicitly.

"""
    fixed_point(f, x0; tol=nothing, maxiter=1000, gauge_fix=nothing) -> x

Iterate `x ← f(x)` from the array `x0` until `norm(x_new - x) <= tol * norm(x)`
(default `tol = eps^(3/4)` of the element type); warn (`@warn`) after `maxiter` steps
without convergence. `gauge_fix(new, ref)`, where the step is a fixed point only up to a
gauge, returns the transformation (a function of an array) that aligns `new` with
`ref`; the iteration takes `gauge_fix(new, x)(new)`, and the rrule freezes the one
computed from `(f(x*), x*)` (see [`fixed_point_pullback!`](@ref)).
"""
function fixed_point(f, x0::AbstractArray; tol=nothing, maxiter::Integer=1000,
                     gauge_fix=nothing)
    return first(_fixed_point(f, x0, _fixed_point_tol(x0, tol), maxiter, gauge_fix))
end

# The iteration; returns the state and whether it converged (warned where not).
function _fixed_point(f, x0, tol, maxiter, gauge_fix)
    maxiter >= 1 || throw(ArgumentError("fixed_point: maxiter must be >= 1, got $maxiter"))
    x, change = x0, Inf
    for _ in 1:maxiter
        new = _fixed_step(f, gauge_fix, x)
        change = norm(new - x) / max(norm(x), floatmin(Float64))
        x = new
        change <= tol && break
    end
    converged = change <= tol
    converged ||
        @warn "fixed_point: not converged after $maxiter iterations: relative change " *
              "$change > tol $tol. Raise maxiter or tol, or give gauge_fix; the gradient " *
              "is that of the state reached." maxlog = 1
    return x, converged
end

function _fixed_point_tol(x0, tol)
    tol === nothing && return eps(real(float(eltype(x0))))^(3 / 4)
    tol > 0 || throw(ArgumentError("fixed_point: tol must be > 0, got $tol"))
    return tol
end

function _fixed_step(f, gauge_fix, x)
    new = f(x)
    size(new) == size(x) ||
        throw(DimensionMismatch("fixed_point: f returned size $(size(new)), x0 has $(size(x))"))
    gauge_fix === nothing && return new
    return gauge_fix(new, x)(new)
end

# The step with its gauge transformation held fixed: what the implicit function
# theorem differentiates.
_frozen_step(f, fix, x) = fix(f(x))
