# Tolerance defaults: the one place where a `nothing` tolerance becomes a number.
# The formulas are those of MATH.md and of pyspectral/_common.py; change them in
# both places or in neither.

# eps^(3/4) of the real type underneath `T`: far above rounding noise, far below
# any gap that a user would call real.
_eps34(::Type{T}) where {T} = eps(real(float(T)))^(real(float(T))(3) / 4)

# Largest |entry|, or a strong zero for an absent cotangent (so that `max` with a
# present one keeps the present one's type).
_maxabs(x) = iszerotangent(x) ? false : maximum(abs, x; init=zero(real(eltype(x))))

"""
    default_degeneracy_atol(S) -> Real

Absolute tolerance under which two singular values (or eigenvalues) count as one
degenerate cluster: `maximum(abs, S) * eps^(3/4)`, `eps` of the real element type.
Relative to the largest value, so results do not change when the input is rescaled.
Used when `degeneracy_atol = nothing`.
"""
default_degeneracy_atol(S::AbstractVector) = _maxabs(S) * _eps34(eltype(S))

"""
    default_gauge_atol(ΔU, ΔVᴴ) -> Real
    default_gauge_atol(ΔV) -> Real

Absolute tolerance for the gauge check of a pullback: `eps^(3/4)` times the largest
|entry| of the incoming singular/eigen vector cotangents (`nothing` or a zero
tangent counts as absent). Used when `gauge_atol = nothing`.
"""
function default_gauge_atol(blocks...)
    scale = mapreduce(_maxabs, max, blocks; init=false)
    T = scale isa Bool ? Float64 : typeof(scale)
    return scale * _eps34(T)
end

"""
    default_hermitian_tol(A) -> Real

Largest `|A - Aᴴ|` entry accepted by `check_hermitian = true`:
`eps^(3/4) * maximum(abs, A)`.
"""
default_hermitian_tol(A::AbstractMatrix) = _maxabs(A) * _eps34(eltype(A))

# Option validation, shared by every public entry point: a tolerance is `nothing`
# (computed from the data by the functions above) or a non-negative number.
function _check_tolerance(op, name, x)
    x === nothing && return nothing
    (x isa Real && !(x isa Bool) && x >= 0) && return nothing
    throw(ArgumentError("$op: $name must be a non-negative number or nothing, got $(repr(x))"))
end

function _check_options(op; degeneracy_atol=nothing, broadening=nothing,
                        gauge=:warn, gauge_atol=nothing)
    _check_tolerance(op, "degeneracy_atol", degeneracy_atol)
    _check_tolerance(op, "broadening", broadening)
    _check_tolerance(op, "gauge_atol", gauge_atol)
    _checks_gauge(gauge)  # throws on an unknown policy name
    return nothing
end
