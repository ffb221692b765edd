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
