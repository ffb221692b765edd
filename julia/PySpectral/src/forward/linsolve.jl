# Krylov solve of `(a0 I + a1 A) x = b` by KrylovKit.linsolve: GMRES, or CG where the
# caller says that `a0 I + a1 A` is Hermitian positive definite; MINRES (our own, below:
# KrylovKit takes GMRES there) where it is Hermitian but maybe indefinite.
# pyspectral/forward/linsolve.py holds the same solvers in torch; the tolerance is the
# same: max(atol, rtol ‖b‖), rtol = eps^(3/4).

"""
    linsolve(A, b, a0=0, a1=1; x0=nothing, ishermitian=false, isposdef=false,
             atol=nothing, rtol=nothing, krylovdim=30, maxiter=100) -> x

The solution of `(a0 I + a1 A) x = b` for a square matrix `A` (or any linear map
KrylovKit accepts, as a function `v -> A v`), by `KrylovKit.linsolve` with the residual
tolerance `max(atol, rtol * norm(b))` (defaults `atol = 0`, `rtol = eps^(3/4)` of the
element type). `isposdef` (with `ishermitian`) selects conjugate gradients; `ishermitian`
alone with real `a0` and `a1` (types, not values) MINRES, at most `krylovdim * maxiter`
products; otherwise restarted GMRES with `krylovdim` vectors and `maxiter` cycles. A solve that does not
converge warns with its residual (`@warn`), as pyspectral's `ConvergenceWarning`.

The gradient ([`linsolve_pullback!`](@ref), the rrule) is exact for the computed `x`:
one adjoint solve with `A'`.
"""
function linsolve(A, b::AbstractVector, a0::Number=false, a1::Number=true;
                  x0=nothing, ishermitian::Bool=false, isposdef::Bool=false,
                  atol=nothing, rtol=nothing, krylovdim::Integer=30, maxiter::Integer=100)
    A isa AbstractMatrix && _check_linsolve_sizes(A, b)
    _check_finite("linsolve", b)
    A isa AbstractMatrix && _check_finite("linsolve", A)
    T = _linsolve_eltype(A, b, a0, a1)
    tol = _linsolve_tol(T, b, atol, rtol)
    start = x0 === nothing ? zeros(T, length(b)) : Vector{T}(x0)
    x, info = _krylov(A, Vector{T}(b), start, a0, a1; tol, krylovdim, maxiter, ishermitian,
                      isposdef)
    _linsolve_converged(info, tol, "the solve")
    return x
end

# The solver `linsolve`'s docstring names, for the solve and the adjoint solve; `info`
# has KrylovKit's fields `converged`, `normres` and `numops`.
function _krylov(A, b, x0, a0, a1; tol, krylovdim, maxiter, ishermitian, isposdef)
    if ishermitian && !isposdef && a0 isa Real && a1 isa Real
        return _minres(A, b, x0, a0, a1, tol, krylovdim * maxiter)
    end
    # verbosity 0 (KrylovKit's SILENT_LEVEL): the caller warns, with the remedy
    return KrylovKit.linsolve(A, b, x0, a0, a1; tol, krylovdim, maxiter, ishermitian,
                              isposdef, verbosity=0)
end

_apply(A::AbstractMatrix, v) = A * v
_apply(A, v) = A(v)

# Lanczos vectors that lose orthogonality make MINRES's residual estimate drift from the
# true residual; it is recomputed this often, as pyspectral's CG_RESIDUAL_EVERY.
const MINRES_RESIDUAL_EVERY = 50

# MINRES (Paige and Saunders 1975) for a Hermitian `a0 I + a1 A`, at most `maxops`
# products and one for the final residual: the Lanczos recurrence (real α, β) with the
# Givens QR of its tridiagonal matrix. pyspectral/forward/linsolve.py `minres` is the same
# algorithm step for step: the true residual is computed where the estimate |ϕbar| says
# converged and every MINRES_RESIDUAL_EVERY steps, and where the estimate says converged
# but the true residual does not, the recurrence restarts from the current x.
function _minres(A, b::AbstractVector{T}, x0, a0, a1, tol, maxops) where {T}
    R = real(T)
    M(v) = a0 .* v .+ a1 .* _apply(A, v)
    x = copy(x0)
    r = b - M(x)
    ops, res = 1, norm(r)
    while res > tol && ops < maxops
        v_prev, v = zero(r), r / res
        β, dbar, ϵ, sn, cs, ϕbar = zero(R), zero(R), zero(R), zero(R), -one(R), res
        d_prev, d = zero(r), zero(r)
        step, stopped = 0, false
        while ops < maxops
            step += 1
            w = M(v) .- β .* v_prev
            ops += 1
            α = real(dot(v, w))
            w .-= α .* v
            βnext = norm(w)
            # the Givens rotation that eliminates this column's subdiagonal
            oldϵ = ϵ
            δ = cs * dbar + sn * α
            gbar = sn * dbar - cs * α
            ϵ = sn * βnext
            dbar = -cs * βnext
            γ = hypot(gbar, βnext)
            cs, sn = γ > 0 ? (gbar / γ, βnext / γ) : (one(R), zero(R))
            ϕ, ϕbar = cs * ϕbar, sn * ϕbar
            d_prev, d = d, γ > 0 ? (v .- oldϵ .* d_prev .- δ .* d) ./ γ : zero(d)
            x .+= ϕ .* d
            v_prev, v, β = v, βnext > 0 ? w ./ βnext : zero(w), βnext
            estimate = ϕbar <= tol
            if estimate || step % MINRES_RESIDUAL_EVERY == 0
                r = b - M(x)
                ops += 1
                res = norm(r)
                stopped = estimate || res <= tol
                stopped && break
            end
        end
        if !stopped
            r = b - M(x)
            ops += 1
            res = norm(r)
        end
    end
    return x, (; converged=Int(res <= tol), normres=res, numops=ops)
end

function _check_linsolve_sizes(A, b)
    _check_square("linsolve", A)
    size(A, 1) == length(b) && return nothing
    throw(DimensionMismatch("linsolve: b has length $(length(b)), A has size $(size(A))"))
end

function _linsolve_eltype(A, b, a0, a1)
    S = A isa AbstractMatrix ? eltype(A) : eltype(b)
    return float(promote_type(S, eltype(b), typeof(a0), typeof(a1)))
end

# At least floatmin: KrylovKit stops early where the residual is `< tol`, so that a zero
# right-hand side (a zero cotangent in the backward) at tolerance 0 returns zero rather
# than starting an Arnoldi basis from the zero vector (an ArgumentError).
function _linsolve_tol(::Type{T}, b, atol, rtol) where {T}
    a = atol === nothing ? zero(real(T)) : real(T)(atol)
    r = rtol === nothing ? eps(real(T))^(3 / 4) : real(T)(rtol)
    return max(a, r * norm(b), floatmin(real(T)))
end

function _linsolve_converged(info, tol, what)
    info.converged >= 1 && return nothing
    @warn "linsolve: $what did not converge: residual $(info.normres) > tolerance $tol " *
          "after $(info.numops) products. Raise maxiter or krylovdim, or check that " *
          "a0 I + a1 A is not (nearly) singular." maxlog = 1
    return nothing
end
