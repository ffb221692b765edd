# The gauge policy, decided in one place. Inside a degenerate cluster the basis of
# singular/eigen vectors is arbitrary; a loss that depends on it has a cotangent
# whose anti-Hermitian part does not vanish there. That part is dropped by the
# pullbacks, so its size is measured and reported according to the policy.

"""
    GaugeError(msg)

Thrown under `gauge = :raise` when a cotangent depends on the basis chosen inside a
degenerate subspace (or a complex phase), so that the gradient would not be exact.
"""
struct GaugeError <: Exception
    msg::String
end

Base.showerror(io::IO, e::GaugeError) = print(io, "GaugeError: ", e.msg)

# Same text as pyspectral.common.gauge.gauge_message. No Printf: round to 3 digits.
function gauge_message(op, viol, tol)
    return string(op, ": the incoming gradient depends on the basis chosen inside a ",
        "degenerate subspace (measured ", round(viol; sigdigits=3), " > gauge_atol ",
        round(tol; sigdigits=3), "); that part is dropped, so this gradient is not ",
        "exact. Use a loss that is invariant under rotations within degenerate ",
        "subspaces, or svd_function / matrix_function, which are exact at every spectrum.")
end

"""
    check_gauge(op::Symbol, viol, tol, policy) -> nothing

Apply the gauge `policy` when the measured violation `viol` exceeds `tol`:
`:warn` logs a warning whose message starts with `op` and gives `viol`, `tol` and the
remedy; `:raise` throws [`GaugeError`](@ref); `:ignore` does nothing; any other
callable is called as `policy(op, viol, tol)` (the Python bridge records with it).
"""
function check_gauge(op::Symbol, viol, tol, policy)
    viol > tol || return nothing
    return apply_gauge_policy(policy, op, viol, tol, gauge_message(op, viol, tol))
end

"""
    apply_gauge_policy(policy, op, viol, tol, msg) -> nothing

The action of [`check_gauge`](@ref) once a violation is established, with message
`msg`; a callable `policy` receives `(op, viol, tol)`.
"""
function apply_gauge_policy(policy, op::Symbol, viol, tol, msg::AbstractString)
    policy === :ignore && return nothing
    if policy === :warn
        @warn msg
        return nothing
    end
    policy === :raise && throw(GaugeError(msg))
    policy isa Union{Symbol,AbstractString} && return apply_gauge_policy(
        _policy_symbol(policy), op, viol, tol, msg)
    policy(op, viol, tol)
    return nothing
end

function _policy_symbol(policy)
    p = Symbol(policy)
    p in (:warn, :raise, :ignore) && return p
    throw(ArgumentError("gauge must be :warn, :raise, :ignore or a function " *
                        "(op, viol, tol) -> _, got $(repr(policy))"))
end

# Whether a pullback should measure the violation at all (skip the work when
# ignored); a misspelt policy fails here, before any work, not at the first violation.
function _checks_gauge(policy)
    policy isa Union{Symbol,AbstractString} || return true
    return _policy_symbol(policy) !== :ignore
end

"""
    GaugeRecorder()

A gauge policy that records instead of acting: passed as `gauge`, it keeps each
violation a pullback finds, `(op, measured, tol)`, in `records`, in the order found, for
a caller that applies its own policy afterwards (pyspectral's Python bridge does, once per
call, with the batch-wide tolerance). One recorder per call: it is the state of that call.
"""
struct GaugeRecorder
    records::Vector{Tuple{Symbol,Float64,Float64}}
end
GaugeRecorder() = GaugeRecorder(Tuple{Symbol,Float64,Float64}[])

function (r::GaugeRecorder)(op, viol, tol)
    push!(r.records, (Symbol(op), Float64(viol), Float64(tol)))
    return nothing
end

# --------------------------------------------------- unequal weights on a cluster

# A symmetric function of a cluster's values has equal partial derivatives where the
# values are equal; at values within the degeneracy tolerance but apart, its weights
# differ by about f″ times the gap. The allowance for that is this multiple of the
# relative gap times the weights' size (a power sᵖ has the factor p - 1, a logarithm 1);
# a loss that weights a cluster unequally differs by the size of its weights instead.
# Same constant as WEIGHT_SLOPE in pyspectral/common/gauge.py.
const WEIGHT_SLOPE = 16

# What each op's message offers instead of its plain pullback (as in Python).
const EXACT_ROUTES = Dict(
    :svd => "svd_function(A, f) for U f(S) Vh (('pow', 1) for U diag(S) Vh, " *
            "'polar', truncations) or svd(A, absorb=...) for the two factors",
    :eigh => "matrix_function(A, f) for V f(w) V^H",
    :eig => "a symmetric function of each cluster's eigenvalues (their sum, " *
            "product or mean) or its spectral projector")

# Same text as pyspectral.common.gauge.weights_message.
function weights_message(op, measured, limit)
    values = op === :svd ? "singular values" : "eigenvalues"
    return string(op, ": the incoming gradient of the ", values, " weights the members ",
        "of a degenerate cluster unequally (spread ", round(measured; sigdigits=3),
        " > allowed ", round(limit; sigdigits=3), "): the loss is not a symmetric ",
        "function of the cluster (it reads the values through the basis inside it, as ",
        "U diag(S) Vh does), and the part of the gradient that needs is not in the ",
        "cotangents, so this gradient depends on the basis LAPACK returned and is not ",
        "exact. Use ", get(EXACT_ROUTES, op, EXACT_ROUTES[:eig]),
        ": exact at every spectrum.")
end

"""
    check_weights(op::Symbol, Δλ, λ, tol, policy; gauge_atol=nothing) -> nothing

Apply the gauge `policy` where the cotangent `Δλ` of the spectrum `λ` (singular values,
eigenvalues, complex eigenvalues) weights the members of a degenerate cluster
(`|λᵢ - λⱼ| <= tol`) unequally. The pullback of the factors at a cluster is exact only
for a loss that is a symmetric function of the cluster's values, whose weights are
equal there; otherwise the loss reads the values through the basis inside the cluster
(`U Diagonal(S) Vᴴ`) and the part of the gradient that needs is not in the cotangents.
Tolerance per pair: `gauge_atol` (default `eps^(3/4) maximum(abs, Δλ)`) plus
`WEIGHT_SLOPE` times the relative gap times `|Δλᵢ| + |Δλⱼ|`. A recording policy
receives `Symbol(op, ":weights")`, the largest spread and its pair's allowance.
"""
function check_weights(op::Symbol, Δλ, λ, tol, policy; gauge_atol=nothing)
    (iszerotangent(Δλ) || !_checks_gauge(policy) || length(λ) < 2) && return nothing
    T = real(float(eltype(Δλ)))
    base = gauge_atol === nothing ? _eps34(T) * _maxabs(Δλ) : gauge_atol
    measured, limit = zero(T), zero(T)
    for j in eachindex(λ), i in eachindex(λ)
        i == j && continue
        gap = abs(λ[i] - λ[j])
        gap <= tol || continue
        spread = abs(Δλ[i] - Δλ[j])
        allowed = WEIGHT_SLOPE * (abs(Δλ[i]) + abs(Δλ[j])) *
                  (gap / max(abs(λ[i]) + abs(λ[j]), tol)) + base
        if spread > allowed && spread > measured
            measured, limit = T(spread), T(allowed)
        end
    end
    measured > 0 || return nothing
    return apply_gauge_policy(policy, Symbol(op, ":weights"), measured, limit,
                              weights_message(op, measured, limit))
end

# Same text as pyspectral.common.gauge.undetermined_message: a rank-deficient QR / LQ.
function undetermined_message(op, measured, tol)
    q, r, t = op === :qr ? ("columns", "rows", "R") : ("rows", "columns", "L")
    return string(op, ": A is rank deficient (a pivot |", t, "_ii| at or below ",
        "rank_atol); Q's ", q, " and ", t, "'s ", r, " past the rank are not determined ",
        "by A, and the incoming gradient depends on them (measured ",
        round(measured; sigdigits=3), " > gauge_atol ", round(tol; sigdigits=3),
        "); that part is dropped, so this gradient is not exact. Use a loss of Q's ", q,
        " and ", t, "'s ", r, " up to the rank, or a full-rank A.")
end
