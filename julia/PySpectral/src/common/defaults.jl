# Tolerance defaults: the one place where a `nothing` tolerance becomes a number.
# The formulas are those of MATH.md and of pyspectral/common/defaults.py; change them in
# both places or in neither.

# eps^(3/4) of the real type underneath `T`: far above rounding noise, far below
# any gap that a user would call real.
_eps34(::Type{T}) where {T} = eps(real(float(T)))^(real(float(T))(3) / 4)

# Largest |entry|, or a strong zero for an absent cotangent (so that `max` with a
# present one keeps the present one's type); NaN if an entry is. An array by a loop
# that vectorises: `maximum(abs, x; init)` folds left with NaN-aware `max`, about
# ten times slower (0.2 ms for a 256×256 cotangent, in every pullback's gauge check).
_maxabs(x) = iszerotangent(x) ? false : maximum(abs, x; init=zero(real(eltype(x))))
function _maxabs(x::AbstractArray{<:Number})
    T = real(float(eltype(x)))
    m, nan = zero(T), false
    @inbounds @simd for i in eachindex(x)
        a = T(abs(x[i]))
        nan |= isnan(a)
        m = ifelse(a > m, a, m)
    end
    return nan ? T(NaN) : m
end

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

# Keyword validation, shared by every public entry point: the one place where the
# numeric keywords are checked, before any work. The rules and their wording are those
# of `check_keywords` in pyspectral/_validation.py (`nothing` for None; `rtol`, `maxiter`
# for backward_rtol, backward_maxiter); change them in both places or in neither.
_isinteger(x) = x isa Integer && !(x isa Bool)
_isnumber(x) = x isa Real && !(x isa Bool)

_keyword_error(op, name, need, x) =
    throw(ArgumentError("$op: $name must be $need, got $(repr(x))"))

function _check_integer(op, name, x, lo)
    (_isinteger(x) && x >= lo) && return nothing
    return _keyword_error(op, name, "an integer >= $lo", x)
end

# `oversample`, `n_iter`: `nothing` means chosen from the data (the top-k iteration's
# block and work budget).
function _check_optional_integer(op, name, x, lo)
    (x === nothing || (_isinteger(x) && x >= lo)) && return nothing
    return _keyword_error(op, name, "an integer >= $lo, or nothing (automatic)", x)
end

# A tolerance: `nothing` (computed from the data by the functions above) or a finite
# number >= 0. NaN fails every comparison, so it is refused too.
function _check_tolerance(op, name, x)
    x === nothing && return nothing
    (_isnumber(x) && isfinite(x) && x >= 0) && return nothing
    return _keyword_error(op, name, "a finite number >= 0, or nothing", x)
end

function _check_broadening(op, x)
    x === nothing && return nothing
    (_isnumber(x) && isfinite(x) && x > 0) && return nothing
    return _keyword_error(op, "broadening", "a finite number > 0, or nothing", x)
end

function _check_rtol(op, x)
    x === nothing && return nothing
    (_isnumber(x) && 0 < x < 1) && return nothing
    return _keyword_error(op, "rtol", "a number with 0 < rtol < 1, or nothing", x)
end

"""
    _check_options(op; degeneracy_atol, broadening, gauge, gauge_atol, hermitian_tol,
                   oversample, n_iter, rtol, maxiter)

Throw an `ArgumentError` naming the first keyword of `op` that breaks its rule:
tolerances (`degeneracy_atol`, `gauge_atol`, `hermitian_tol`) `nothing` or finite
`>= 0`; `broadening` `nothing` or finite `> 0`; `rtol` `nothing` or `0 < rtol < 1`;
`oversample >= 0`, `n_iter >= 0` (or `nothing`: automatic), `maxiter >= 1`, integers
(not `Bool`); `gauge` a known policy. The defaults pass, so each caller names only the
keywords it has.
"""
function _check_options(op; degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                        gauge_atol=nothing, hermitian_tol=nothing, oversample=nothing,
                        n_iter=nothing, rtol=nothing, maxiter=1)
    _check_tolerance(op, "degeneracy_atol", degeneracy_atol)
    _check_broadening(op, broadening)
    _check_tolerance(op, "gauge_atol", gauge_atol)
    _check_tolerance(op, "hermitian_tol", hermitian_tol)
    _check_optional_integer(op, "oversample", oversample, 0)
    _check_optional_integer(op, "n_iter", n_iter, 0)
    _check_rtol(op, rtol)
    _check_integer(op, "maxiter", maxiter, 1)
    _checks_gauge(gauge)  # throws on an unknown policy name
    return nothing
end

# `k` of a top-k call: nothing (all), or an integer (not a Bool) in 1:K, K = min(m, n)
# (the iterative top-k functions); `lo = 0` for the truncation of `svd`/`tsvd`/`teigh`,
# where `capped` (a truncation tolerance is given) makes any k >= 0 a maximum rank.
function _check_topk(op, k, full, K; lo=1, capped=false)
    k === nothing && return nothing
    full && throw(ArgumentError("$op: k (top-k triplets) cannot be combined with " *
                                "full=true; pass one of them"))
    if capped
        (_isinteger(k) && k >= 0) && return nothing
        throw(ArgumentError("$op: k must be an integer >= 0 (the maximum rank; a k past " *
                            "min(m, n) keeps every value), got $(repr(k))"))
    end
    (_isinteger(k) && lo <= k <= K) && return nothing
    larger = lo == 0 ? "; a larger k is a maximum rank together with atol, rtol, " *
                       "error_atol or error_rtol" : ""
    throw(ArgumentError("$op: k must be an integer with $lo <= k <= min(m, n) = $K, " *
                        "got $(repr(k))$larger"))
end

"""
    _check_truncation(op, K, full; k, atol, rtol, error_atol, error_rtol, multiplets)

Throw an `ArgumentError` for a truncation (src/forward/truncation.jl) that breaks its
rules, as `check_keywords` and `truncation_rule` in pyspectral/_validation.py do: the
tolerances `nothing` or finite `>= 0`; `k` any integer `>= 0`, the maximum rank (past `K`
it keeps every value, as tensor-network codes clamp a bond dimension); `multiplets` one of
`:cut`, `:down`, `:up`, and
not other than `:cut` without a rule to move (it would be ignored); no truncation with
`full = true`.
"""
function _check_truncation(op, K, full=false; k=nothing, atol=nothing, rtol=nothing,
                           error_atol=nothing, error_rtol=nothing, multiplets=:cut,
                           min_rank=nothing)
    # in pyspectral's order: k first (a maximum), then the tolerances
    capped = any(x -> x !== nothing, (atol, rtol, error_atol, error_rtol))
    _check_topk(op, k, false, K; lo=0, capped=true)
    _check_tolerance(op, "atol", atol)
    _check_tolerance(op, "rtol", rtol)
    _check_tolerance(op, "error_atol", error_atol)
    _check_tolerance(op, "error_rtol", error_rtol)
    multiplets in MULTIPLETS ||
        throw(ArgumentError("$op: multiplets must be :cut, :down or :up, got " *
                            "$(repr(multiplets))"))
    if k === nothing && !capped && multiplets !== :cut
        throw(ArgumentError("$op: multiplets=$(repr(multiplets)) moves the cut of a " *
                            "truncation, but none is asked for; pass k, atol, rtol, " *
                            "error_atol or error_rtol, or drop multiplets"))
    end
    if min_rank !== nothing
        (_isinteger(min_rank) && min_rank >= 0) ||
            throw(ArgumentError("$op: min_rank must be an integer >= 0 (the fewest values " *
                                "kept), got $(repr(min_rank))"))
        (k === nothing && !capped) &&
            throw(ArgumentError("$op: min_rank is the floor of a truncation, but none is " *
                                "asked for; pass k, atol, rtol, error_atol or " *
                                "error_rtol, or drop min_rank"))
        (k !== nothing && min_rank > k) &&
            throw(ArgumentError("$op: min_rank = $min_rank exceeds k = $k; the floor " *
                                "must be at most the maximum rank"))
    end
    full && (k !== nothing || capped) &&
        throw(ArgumentError("$op: k (top-k triplets) or a truncation rule cannot be " *
                            "combined with full=true; pass one of them"))
    return nothing
end
