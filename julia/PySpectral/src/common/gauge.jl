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
        "subspaces, or ", get(GAUGE_ROUTES, Symbol(op), GAUGE_ROUTES[Symbol("")]),
        ", exact at every spectrum.")
end

# The exact routes gauge_message names, by op (as in Python; Symbol(""): the others).
const GAUGE_ROUTES = Dict(
    :eig => "eig_function(A, f) for V f(L) V^-1 (A diagonalizable), which is",
    Symbol("") => "svd_function / matrix_function, which are")

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
    gauge_pairwise(P, λ, tol, gtol) -> (measured, allowed)

The basis check of a degenerate cluster (`|λⱼ - λᵢ| <= tol`) pair by pair, for the
default tolerance `gtol`: the largest `|P[i, j]|` over the cluster pairs above their own
allowance, `max(gtol, data_floor(λ) maximum(abs, λ))` (what a stationary point's rounding
shows in a cotangent of the vectors) plus `WEIGHT_SLOPE` times the pair's relative gap
times the cotangents' scale `gtol / eps^(3/4)` (an invariant loss of `U Diagonal(S) Vᴴ`
has `Jₐ + Kₐ` of about the gap times its cotangent inside the tolerance), and the least
allowance among them; `(0, gtol)` where none is above. The same measure as
pyspectral.common.gauge's `_pairwise`, so both backends warn alike.
"""
function gauge_pairwise(P, λ, tol, gtol)
    T = real(float(eltype(P)))
    x = abs.(λ)
    floor = max(T(gtol), data_floor(x, T) * _maxabs(x))
    scale = gtol > 0 ? gtol / _eps34(T) : zero(T)
    measured, allowed = zero(T), T(Inf)
    for j in eachindex(x), i in eachindex(x)
        abs(λ[j] - λ[i]) <= tol || continue
        # relative to the degeneracy tolerance at least: values at rounding level (a
        # cluster of zeros) have no meaningful relative gap
        rel = abs(x[i] - x[j]) / max(x[i] + x[j], T(tol), floatmin(T))
        a = floor + WEIGHT_SLOPE * rel * scale
        v = abs(P[i, j])
        if v > a
            measured, allowed = max(measured, v), min(allowed, a)
        end
    end
    return measured > 0 ? (measured, allowed) : (zero(T), T(gtol))
end

# The basis check of a pullback: `viol` (the largest entry of `P` on a cluster, and
# `extra` measured elsewhere) against `gtol`, pair by pair where the default tolerance
# applies (gauge_pairwise).
function check_cluster_gauge(op::Symbol, P, λ, tol, gtol, policy; extra=zero(gtol),
                             default_tol::Bool=true)
    viol = max(_cluster_max(P, λ, tol), extra)
    if viol > gtol && default_tol && extra <= gtol
        viol, gtol = gauge_pairwise(P, λ, tol, gtol)
    end
    return check_gauge(op, viol, gtol, policy)
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
    :eig => "eig_function(A, f) for V f(L) V^-1 (A diagonalizable), a symmetric " *
            "function of each cluster's eigenvalues (their sum, product or mean) or its " *
            "spectral projector")

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

# The floor of the weights allowance: the spread a stationary fit's cotangent shows from
# the rounding of A alone, FLOOR_CURVATURE 2 (k + 1) eps ‖A‖ (pyspectral.common.gauge's
# data_floor, where the derivation is; docs/settings.md "The allowance floor").
const FLOOR_CURVATURE = 2

"""
    data_floor(λ, T) -> T

The least weights allowance for the spectrum `λ` (k values) in the precision `T`:
`2 FLOOR_CURVATURE (k + 1) eps(T) maximum(abs, λ)`.
"""
data_floor(λ, ::Type{T}) where {T} =
    isempty(λ) ? zero(T) : T(2 * FLOOR_CURVATURE * (length(λ) + 1) * eps(T) * maximum(abs, λ))

"""
    weights_floor(λ, T) -> T

The least allowance of [`check_weights`](@ref): `eps(T)^(3/4) FLOOR_CURVATURE
maximum(abs, λ)` (the package's resolution relative to the cotangent of a loss of size
`‖A‖²`; near a stationary point the weights are the loss's residual noise, not its
scale), and [`data_floor`](@ref) at least. As pyspectral.common.gauge.weights_floor.
"""
weights_floor(λ, ::Type{T}) where {T} =
    isempty(λ) ? zero(T) : max(T(_eps34(T) * FLOOR_CURVATURE * _maxabs(λ)), data_floor(λ, T))

"""
    check_weights(op::Symbol, Δλ, λ, tol, policy; gauge_atol=nothing) -> nothing

Apply the gauge `policy` where the cotangent `Δλ` of the spectrum `λ` (singular values,
eigenvalues, complex eigenvalues) weights the members of a degenerate cluster
(`|λᵢ - λⱼ| <= tol`) unequally. The pullback of the factors at a cluster is exact only
for a loss that is a symmetric function of the cluster's values, whose weights are
equal there; otherwise the loss reads the values through the basis inside the cluster
(`U Diagonal(S) Vᴴ`) and the part of the gradient that needs is not in the cotangents.
Tolerance per pair: `gauge_atol` (default `eps^(3/4) maximum(abs, Δλ)`, at least
[`weights_floor`](@ref)) plus
`WEIGHT_SLOPE` times the relative gap times `|Δλᵢ| + |Δλⱼ|`, and (default only) plus
`FLOOR_CURVATURE` times the gap. A recording policy
receives `Symbol(op, ":weights")`, the largest spread and its pair's allowance.
"""
function check_weights(op::Symbol, Δλ, λ, tol, policy; gauge_atol=nothing)
    (iszerotangent(Δλ) || !_checks_gauge(policy) || length(λ) < 2) && return nothing
    T = real(float(eltype(Δλ)))
    base = gauge_atol === nothing ? max(_eps34(T) * _maxabs(Δλ), weights_floor(λ, T)) :
           gauge_atol
    measured, limit = zero(T), zero(T)
    for j in eachindex(λ), i in eachindex(λ)
        i == j && continue
        gap = abs(λ[i] - λ[j])
        gap <= tol || continue
        spread = abs(Δλ[i] - Δλ[j])
        allowed = WEIGHT_SLOPE * (abs(Δλ[i]) + abs(Δλ[j])) *
                  (gap / max(abs(λ[i]) + abs(λ[j]), tol)) + base
        # the floor's curvature across the gap (default tolerance only): a symmetric
        # loss's weights differ by f″ times the gap, small weights or not (pyspectral's
        # check_weights)
        gauge_atol === nothing && (allowed += FLOOR_CURVATURE * gap)
        if spread > allowed && spread > measured
            measured, limit = T(spread), T(allowed)
        end
    end
    measured > 0 || return nothing
    return apply_gauge_policy(policy, Symbol(op, ":weights"), measured, limit,
                              weights_message(op, measured, limit))
end

# The words of a QR / LQ's factors past pivot j (as pyspectral.common.gauge._qr_names).
_qr_names(op) = op === :qr ? ("columns", "rows", "Q[..., :, j:]", "R[..., j:, :]") :
                ("rows", "columns", "Q[..., j:, :]", "L[..., :, j:]")

# Same text as pyspectral.common.gauge.undetermined_message: a rank-deficient QR / LQ
# whose cotangent depends on the factors past the first small pivot.
function undetermined_message(op, measured, tol)
    q, r, q2, r2 = _qr_names(op)
    t = op === :qr ? "R" : "L"
    prod = op === :qr ? string(q2, " @ ", r2) : string(r2, " @ ", q2)
    return string(op, ": A is rank deficient (a pivot |", t, "_jj| at or below ",
        "rank_atol); Q's ", q, " and ", t, "'s ", r, " from the first such pivot j on ",
        "are one choice of many (A determines only their product ", prod, " and the ",
        "factors before j), and the incoming gradient depends on that choice (measured ",
        round(measured; sigdigits=3), " > gauge_atol ", round(tol; sigdigits=3),
        "); that part is dropped, so this gradient is not exact. Use a loss of Q @ R ",
        "(L @ Q) and of Q's ", q, " and ", t, "'s ", r, " before j (any function of ",
        "the product is exact), or a full-rank A.")
end

# Same text as pyspectral.common.gauge.lost_message: a thin Q at rank deficiency whose
# cotangent reaches what no cotangent of the reduced factors carries.
function lost_message(op, measured, tol)
    t, shape = op === :qr ? ("R", "m > n") : ("L", "m < n")
    return string(op, ": A is rank deficient (a pivot |", t, "_jj| at or below ",
        "rank_atol) and Q is thin (", shape, "): the derivative along the directions ",
        "that raise the rank outside the span of Q is in no cotangent of the reduced ",
        "factors, and the incoming gradient reaches them (measured ",
        round(measured; sigdigits=3), " > gauge_atol ", round(tol; sigdigits=3),
        "); that part is missing, so this gradient is not exact. Use ", op,
        "(A, mode=\"complete\"), whose factors carry it (exact for every loss of the ",
        "product and of the factors before j), or a full-rank A.")
end

# Same text as pyspectral.common.gauge.complement_message: a complete QR / LQ whose
# cotangent depends on the basis of the complement of A's range.
function complement_message(op, measured, tol)
    part, proj = op === :qr ? ("columns Q2 = Q[..., :, n:]", "Q2 Q2^H") :
                 ("rows Q2 = Q[..., m:, :]", "Q2^H Q2")
    return string(op, ": the incoming gradient depends on the basis of Q's last ", part,
        " (mode=\"complete\"), a basis of the complement of the span of A that A ",
        "determines only up to rotations (measured ", round(measured; sigdigits=3),
        " > gauge_atol ", round(tol; sigdigits=3), "); that part is dropped, so this ",
        "gradient is not exact. Use a loss of the complement through its projector ",
        proj, " (or of the other factors), which is exact.")
end

# Same text as pyspectral.common.gauge.qr_forward_message: forward mode of a QR / LQ
# whose tangent moves the factors past the first small pivot.
function qr_forward_message(op, measured, tol)
    _, _, q2, r2 = _qr_names(op)
    t = op === :qr ? "R" : "L"
    return string(op, ": forward mode at a rank-deficient A (a pivot |", t, "_jj| at or ",
        "below rank_atol): the tangent moves the factors from the first such pivot j ",
        "on (measured ", round(measured; sigdigits=3), " > gauge_atol ",
        round(tol; sigdigits=3), "), which are one choice of many, so the tangents of ",
        q2, " and ", r2, " depend on that choice; those of the factors before j and of ",
        "Q @ R are exact. Use reverse mode (torch.autograd.grad, torch.func.vjp), whose ",
        "rule sees how the loss uses the factors: exact for losses of the product and ",
        "of the factors before j.")
end
