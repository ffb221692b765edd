# Krylov solve of `(a0 I + a1 A) x = b` by KrylovKit.linsolve: GMRES, or CG where the
# caller says that `a0 I + a1 A` is Hermitian positive definite (KrylovKit's choice: a
# Hermitian indefinite map takes GMRES too). pyspectral/forward/linsolve.py holds the same
# solvers in torch; the tolerance is the same: max(atol, rtol ‖b‖), rtol = eps^(3/4).

"""
    linsolve(A, b, a0=0, a1=1; x0=nothing, ishermitian=false, isposdef=false,
             atol=nothing, rtol=nothing, krylovdim=30, maxiter=100) -> x

The solution of `(a0 I + a1 A) x = b` for a square matrix `A` (or any linear map
KrylovKit accepts, as a function `v -> A v`), by `KrylovKit.linsolve` with the residual
tolerance `max(atol, rtol * norm(b))` (defaults `atol = 0`, `rtol = eps^(3/4)` of the
element type). `isposdef` (with `ishermitian`) selects conjugate gradients; otherwise
restarted GMRES with `krylovdim` vectors and `maxiter` cycles. A solve that does not
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
    # verbosity 0 (KrylovKit's SILENT_LEVEL): the warning below says it, with the remedy
    x, info = KrylovKit.linsolve(A, Vector{T}(b), start, a0, a1; tol, krylovdim, maxiter,
                                 ishermitian, isposdef, verbosity=0)
    _linsolve_converged(info, tol, "the solve")
    return x
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

function _linsolve_tol(::Type{T}, b, atol, rtol) where {T}
    a = atol === nothing ? zero(real(T)) : real(T)(atol)
    r = rtol === nothing ? eps(real(T))^(3 / 4) : real(T)(rtol)
    return max(a, r * norm(b))
end

function _linsolve_converged(info, tol, what)
    info.converged >= 1 && return nothing
    @warn "linsolve: $what did not converge: residual $(info.normres) > tolerance $tol " *
          "after $(info.numops) products. Raise maxiter or krylovdim, or check that " *
          "a0 I + a1 A is not (nearly) singular." maxlog = 1
    return nothing
end
