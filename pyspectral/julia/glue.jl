# Glue between pyspectral's Python bridge (pyspectral/julia/_bridge.py, _convert.py) and the Julia
# package PySpectral. Evaluated once into Main by the bridge; not part of the
# Julia package, which stays free of anything Python-specific.
#
# Layout convention (DESIGN.md): a C-contiguous torch batch of shape (B, m, n)
# arrives here, without a copy, as the n×m×B array `At` (its transpose). Every
# decomposition below is of the transpose and the bridge swaps roles:
#   SVD:   Aᵀ = conj(V) S conj(U)ᴴ, so Julia's U is Python's Vhᵀ and Julia's Vt
#          is Python's Uᵀ; both come back C-contiguous on the Python side.
#   eigh:  Aᵀ = conj(A) for Hermitian A, so Julia's eigenvectors are conj(V),
#          and Python's lower triangle is Julia's upper one.
#
# Memory both ways. Python's memory arrives as a plain `Array` over the tensor's data
# ([`wrap`](@ref): `unsafe_wrap` of its address), never as PythonCall's `PyArray`, so
# that every product and factorisation below is BLAS/LAPACK on strided arrays (generic
# Julia code on `PyArray` views made the cost of a call grow like n³). Such an array is
# used only during the call that received it: nothing here keeps, returns or stores it
# (the bridge holds the tensor until the call returns). Results are arrays Julia
# allocates, returned with their address, size and element type ([`out`](@ref)); the
# bridge wraps that memory for torch and keeps the array alive as long as the tensor.
#
# Each entry point (called from Python, through `logged`) takes positional arguments
# only (no keyword conversion per call) and unwraps them before calling a typed `*_core`
# function, which works on plain arrays: those are what the benchmark times inside
# Julia (benchmarks/bench_julia.py) and what PySpectral's precompile workload compiles.
module PySpectralGlue

using LinearAlgebra
using ChainRulesCore
using Test
using PySpectral
import Logging

# Zygote takes a while to load and only ps.julia.function needs it.
function zygote()
    isdefined(Main, :Zygote) || Core.eval(Main, :(using Zygote))
    return getfield(Main, :Zygote)
end

# ------------------------------------------------------- memory crossing

# The element types that cross, by the code the bridge sends (pyspectral/julia/_convert.py
# `_CODES`): torch.float32, float64, complex64, complex128.
const ELTYPES = (Float32, Float64, ComplexF32, ComplexF64)

eltype_code(::Type{Float32}) = 1
eltype_code(::Type{Float64}) = 2
eltype_code(::Type{ComplexF32}) = 3
eltype_code(::Type{ComplexF64}) = 4
eltype_code(::Type{Int64}) = 5  # results only (truncation ranks); never wrapped

"""
    wrap(x)

An argument from Python as the array the functions below work on. A tensor arrives as
`(address, code, dims...)` (column-major dims: a C-contiguous `(B, m, n)` tensor is
`(address, code, n, m, B)`, a `(B, k)` one `(address, code, k, B)`) and becomes
`unsafe_wrap(Array, Ptr{T}(address), dims; own=false)`: the tensor's own memory, which
Julia neither copies nor frees, valid for this call only. A result of an earlier call
(an `Array` Julia allocated and the bridge passes back) and `nothing` (an absent
cotangent) are themselves.
"""
wrap(::Nothing) = nothing
wrap(x::Array) = x
wrap(s::NTuple{4,Integer}) = _wrap(ELTYPES[s[2]], s[1], (Int(s[3]), Int(s[4])))
wrap(s::NTuple{5,Integer}) = _wrap(ELTYPES[s[2]], s[1], (Int(s[3]), Int(s[4]), Int(s[5])))
_wrap(::Type{T}, address, dims) where {T} =
    unsafe_wrap(Array, Ptr{T}(UInt(address)), dims; own=false)

"""
    out(x::Array) -> (x, address, size, code)

A result for Python: the array itself (the bridge keeps it, which keeps it alive), the
address of its first element, its size and its element type code.
"""
out(x::Array) = (x, UInt(pointer(x)), size(x), eltype_code(eltype(x)))
out(x::AbstractArray) = out(Array(x))  # a lazy or strided result: Julia's own copy
outs(xs::Tuple) = map(out, xs)

slice(::Nothing, b) = nothing
slice(x::AbstractArray{<:Any,3}, b) = view(x, :, :, b)
slice(x::AbstractMatrix, b) = view(x, :, b)

# One matrix: return its own memory with a trailing batch axis (no copy);
# several: stack them (the only copy, made in Julia, of Julia-owned results).
batch(xs::Vector) = length(xs) == 1 ? reshape(xs[1], size(xs[1])..., 1) : stack(xs)

# ------------------------------------------------------- threads over a batch

# A batch of small matrices runs on Julia's threads (pyspectral starts Julia with one per
# CPU, as torch has), only while the call's BLAS is single-threaded (pyspectral/julia/
# _blas.py: below 768² entries; larger matrices keep one Julia thread and BLAS's own).
# The matrices go in ranges of CHUNK, each worker taking the next free range, rather than
# one fixed share per thread: right after a torch op, torch's intra-op threads spin for a
# while on the other cores, and a thread kept from its core then delays nothing, the
# others take its share (measured: 4096 8×8 eighs, 14 ms alone, 22 ms after a torch op
# with fixed halves).
const CHUNK = 16

function nworkers(nb::Integer)
    nt = Threads.nthreads()
    (nt == 1 || nb < 2CHUNK || BLAS.get_num_threads() > 1) && return 1
    return min(nt, cld(nb, CHUNK))
end

"""
    each_range(work, init, nb) -> Vector

Run `work(r, state)` over ranges `r` that cover `1:nb` in order, on `nworkers(nb)`
workers, each with its own `state = init()`; returns the states. Every worker is waited
for before this returns or throws (they write into Python's buffers); a failure stops
the others taking new ranges and rethrows the exception of the first failing range, the
one the sequential loop would have thrown.
"""
function each_range(work, init, nb::Integer)
    nw = nworkers(nb)
    if nw == 1
        single = init()
        work(1:nb, single)
        return [single]
    end
    next, stop = Threads.Atomic{Int}(1), Threads.Atomic{Bool}(false)
    function worker()
        # `local`: each worker's own state (a name also assigned in the enclosing
        # function would be one variable, shared by every worker's closure)
        local state = init()
        while !stop[]
            i = Threads.atomic_add!(next, CHUNK)
            i > nb && break
            try
                work(i:min(i + CHUNK - 1, nb), state)
            catch e
                stop[] = true
                return state, (i, e)
            end
        end
        return state, nothing
    end
    tasks = [Threads.@spawn worker() for _ in 2:nw]
    results = [worker(); fetch.(tasks)]  # a worker catches its range's exceptions
    failures = [f for (_, f) in results if f !== nothing]
    isempty(failures) || throw(last(argmin(first, failures)))
    return [state for (state, _) in results]
end

# `[f(b) for b in 1:nb]`, on threads by ranges.
function batchmap(f, nb::Integer)
    nworkers(nb) == 1 && return map(f, 1:nb)
    first_ = f(1)
    results = Vector{typeof(first_)}(undef, nb)
    results[1] = first_
    each_range((r, _) -> foreach(b -> b == 1 || (results[b] = f(b)), r), () -> nothing, nb)
    return results
end

# `f(b, opts)` for b in 1:nb, on threads by ranges; a GaugeRecorder is not thread-safe,
# so each worker records into its own, and the call's recorder gets all their records.
function foreach_matrix(f, nb::Integer, opts)
    recording = opts.gauge isa PySpectral.GaugeRecorder
    init() = recording ? merge(opts, (; gauge=PySpectral.GaugeRecorder())) : opts
    states = each_range((r, o) -> foreach(b -> f(b, o), r), init, nb)
    recording && foreach(o -> append!(opts.gauge.records, o.gauge.records), states)
    return nothing
end

# --------------------------------------------------------- gauge records

# Gauge violations are recorded, not acted on: Python applies the policy once per call,
# with the native backend's message and batch-wide tolerance (so both backends warn and
# raise alike). Each pullback call gets its own recorder and returns what it recorded,
# `(op, measured, tol)` per violation: no state outlives the call. `measure = false`
# (Python's gauge="ignore") skips the measurement.
function pullback_options(degeneracy_atol, broadening, measure::Bool, gauge_atol)
    recorder = PySpectral.GaugeRecorder()
    gauge = measure ? recorder : :ignore
    return (; degeneracy_atol, broadening, gauge, gauge_atol), recorder
end

records(r::PySpectral.GaugeRecorder) = Tuple((String(op), v, t) for (op, v, t) in r.records)

"""
Collects the log records of level `Warn` and above that a glue call emits (Python
re-emits them as warnings, as the native backend warns for the same events); lower
levels go on to the logger that was current.
"""
struct WarningCollector <: Logging.AbstractLogger
    parent::Logging.AbstractLogger
    records::Vector{Any}
    lock::ReentrantLock  # the tasks of a threaded batch log into one collector
end
WarningCollector() = WarningCollector(Logging.current_logger(), Any[], ReentrantLock())

Logging.min_enabled_level(l::WarningCollector) =
    min(Logging.Warn, Logging.min_enabled_level(l.parent))
Logging.shouldlog(::WarningCollector, level, _module, group, id) = true
Logging.catch_exceptions(l::WarningCollector) = Logging.catch_exceptions(l.parent)

function Logging.handle_message(l::WarningCollector, level, message, _module, group, id,
                                file, line; kwargs...)
    if level >= Logging.Warn
        record = (string(level), string(message), string(_module), string(group),
                  Tuple((string(k), v) for (k, v) in kwargs))
        lock(() -> push!(l.records, record), l.lock)
    elseif Logging.min_enabled_level(l.parent) <= level &&
           Logging.shouldlog(l.parent, level, _module, group, id)
        Logging.handle_message(l.parent, level, message, _module, group, id, file, line;
                               kwargs...)
    end
    return nothing
end

"""
    logged(f, args...) -> (value, warnings)

Every call from Python comes through here: `f(args...)` with its warnings collected,
`(level, message, module, group, kwargs)` each.
"""
function logged(f, args...)
    collector = WarningCollector()
    value = Logging.with_logger(() -> f(args...), collector)
    return value, Tuple(collector.records)
end

"""
A `DomainError` of a spectral function with the spectra (k×B) it was found on:
Python reruns the native domain check on them, so the error reads as the native
backend's (0-based index, batch element). `backtrace` is the original one.
"""
struct SpectrumError <: Exception
    exception::DomainError
    spectrum::Any
    backtrace::Any
end
Base.showerror(io::IO, e::SpectrumError) = showerror(io, e.exception)
Base.showerror(io::IO, e::SpectrumError, bt; backtrace=true) =
    showerror(io, e.exception, e.backtrace; backtrace)

function on_spectrum(f, spectrum)
    try
        return f()
    catch e
        e isa DomainError || rethrow()
        throw(SpectrumError(e, spectrum, catch_backtrace()))
    end
end

function exception_kind(e)
    e isa PySpectral.GaugeError && return "gauge"
    e isa DomainError && return "domain"
    (e isa ArgumentError || e isa DimensionMismatch) && return "argument"
    return "other"
end

"""
    error_description(e) -> (kind, message, spectrum)

A Julia exception as Python reports it: its kind (`"gauge"`, `"domain"`,
`"argument"`, `"other"`), Julia's message without the backtrace, and the spectra
of a [`SpectrumError`](@ref) as [`out`](@ref) gives them (else `nothing`).
"""
function error_description(e)
    spectrum = nothing
    if e isa SpectrumError
        e, spectrum = e.exception, out(e.spectrum)
    end
    message = e isa PySpectral.GaugeError ? e.msg : sprint(showerror, e)
    return exception_kind(e), message, spectrum
end

gc_enable(on::Bool) = GC.enable(on)

# Julia's BLAS threads for the calls that follow (the bridge's policy, pyspectral/julia/
# _blas.py); returns the count now in effect.
set_blas_threads(n::Integer) = (BLAS.set_num_threads(n); BLAS.get_num_threads())

missing_packages(names) = [String(n) for n in names if Base.find_package(String(n)) === nothing]

fspec(f::AbstractString) = Symbol(f)
fspec(f::Tuple{AbstractString,Real}) = (Symbol(f[1]), f[2])

# ------------------------------------------------------------------- SVD

function svd_core(At::Array{T,3}, full::Bool) where {T}
    Fs = batchmap(b -> PySpectral.svd(view(At, :, :, b); full=full), size(At, 3))
    return batch([F.U for F in Fs]), batch([F.S for F in Fs]), batch([F.Vt for F in Fs])
end
svd_batched(At, full::Bool) = outs(svd_core(wrap(At), full))

svdvals_core(At::Array{T,3}) where {T} =
    batch(batchmap(b -> PySpectral.svdvals(view(At, :, :, b)), size(At, 3)))
svdvals_batched(At) = out(svdvals_core(wrap(At)))

function svd_pullback_core!(ΔAt, U, S, Vt, ΔU, ΔS, ΔVt, opts)
    foreach_matrix(size(ΔAt, 3), opts) do b, o
        PySpectral.svd_pullback!(slice(ΔAt, b), slice(U, b), slice(S, b), slice(Vt, b),
                                 slice(ΔU, b), slice(ΔS, b), slice(ΔVt, b); o...)
    end
    return ΔAt
end

# Writes the gradient into Python's zeroed buffer ΔAt; returns the gauge records.
function svd_pullback_batched!(ΔAt, U, S, Vt, ΔU, ΔS, ΔVt, degeneracy_atol, broadening,
                               gauge::Bool, gauge_atol)
    opts, recorder = pullback_options(degeneracy_atol, broadening, gauge, gauge_atol)
    svd_pullback_core!(wrap(ΔAt), U, S, Vt, wrap(ΔU), wrap(ΔS), wrap(ΔVt), opts)
    return records(recorder)
end

# Forward mode: the tangents of svd_batched's factors (Julia's, of the transposes) along
# the tangent ΔAt of the transposes; the bridge swaps roles as for the factors. No gauge
# options: a pushforward checks nothing.
function svd_pushforward_core(U, S, Vt, ΔAt, degeneracy_atol, broadening)
    Δs = [PySpectral.svd_pushforward(slice(U, b), slice(S, b), slice(Vt, b), slice(ΔAt, b);
                                     degeneracy_atol, broadening) for b in axes(ΔAt, 3)]
    return batch([Δ[1] for Δ in Δs]), batch([Δ[2] for Δ in Δs]), batch([Δ[3] for Δ in Δs])
end
svd_pushforward_batched(U, S, Vt, ΔAt, degeneracy_atol, broadening) =
    outs(svd_pushforward_core(U, S, Vt, wrap(ΔAt), degeneracy_atol, broadening))

# The truncation-inside-a-cluster check runs on the Python side (gauge=:ignore
# here), so both backends warn with the same message and policy.
function svd_function_core(At::Array{T,3}, f, degeneracy_atol) where {T}
    g = fspec(f)
    Fs = [PySpectral.svd(view(At, :, :, b)) for b in axes(At, 3)]
    S = batch([F.S for F in Fs])
    Ys = on_spectrum(S) do
        [PySpectral.svd_function_apply(F, g; degeneracy_atol, gauge=:ignore) for F in Fs]
    end
    return batch(Ys), batch([F.U for F in Fs]), S, batch([F.Vt for F in Fs])
end
svd_function_batched(At, f, degeneracy_atol) =
    outs(svd_function_core(wrap(At), f, degeneracy_atol))

function svd_function_pullback_core!(ΔAt, U, S, Vt, f, ΔYt, degeneracy_atol)
    g = fspec(f)
    for b in axes(ΔAt, 3)
        PySpectral.svd_function_pullback!(slice(ΔAt, b), slice(U, b), slice(S, b), slice(Vt, b),
                                          g, slice(ΔYt, b); degeneracy_atol)
    end
    return ΔAt
end
function svd_function_pullback_batched!(ΔAt, U, S, Vt, f, ΔYt, degeneracy_atol)
    svd_function_pullback_core!(wrap(ΔAt), U, S, Vt, f, wrap(ΔYt), degeneracy_atol)
    return nothing
end

# The tangent of Yᵀ (as svd_function_batched returns Y) along ΔAt.
function svd_function_pushforward_core(U, S, Vt, f, ΔAt, degeneracy_atol)
    g = fspec(f)
    return batch([PySpectral.svd_function_pushforward(slice(U, b), slice(S, b), slice(Vt, b),
                                                      g, slice(ΔAt, b); degeneracy_atol)
                  for b in axes(ΔAt, 3)])
end
svd_function_pushforward_batched(U, S, Vt, f, ΔAt, degeneracy_atol) =
    out(svd_function_pushforward_core(U, S, Vt, f, wrap(ΔAt), degeneracy_atol))

# Top-k: Julia's svd_topk_block of the transposes, per batch element. Each returns its
# block of p Ritz triplets (kept k first, the first d certified); under method "auto" an
# element that does not certify takes the full path (its block is the whole thin SVD),
# and then the whole batch does, as the native backend decides for its whole batch, so
# that the blocks stack. The truncated pullbacks multiply by the input again, which the
# bridge passes back (wrapped again: the tensor saved for backward), with the blocks and
# the d's.
function topk_blocks(block, width, At, k; method, kw...)
    Bs = [block(view(At, :, :, b), k; method=Symbol(method), kw...) for b in axes(At, 3)]
    w = maximum(width, Bs; init=0)
    return [width(B) < w ? block(view(At, :, :, b), k; method=:full, kw...) : B
            for (b, B) in enumerate(Bs)]
end

function svd_topk_core(At::Array{T,3}, k::Integer, method, oversample, n_iter, rtol,
                       maxiter, degeneracy_atol) where {T}
    Bs = topk_blocks(PySpectral.svd_topk_block, B -> length(B.S), At, k; method, oversample,
                     n_iter, rtol, maxiter, degeneracy_atol)
    return (batch([B.U for B in Bs]), batch([B.S for B in Bs]), batch([B.Vt for B in Bs]),
            Tuple(B.d for B in Bs))
end
function svd_topk_batched(At, k::Integer, method, oversample, n_iter, rtol, maxiter,
                          degeneracy_atol)
    U, S, Vt, d = svd_topk_core(wrap(At), k, method, oversample, n_iter, rtol, maxiter,
                                degeneracy_atol)
    return (outs((U, S, Vt))..., d)
end

function svd_trunc_pullback_core!(ΔAt, At, U, S, Vt, d, ΔU, ΔS, ΔVt, rtol, maxiter, opts)
    for b in axes(ΔAt, 3)
        PySpectral.svd_trunc_pullback!(slice(ΔAt, b), slice(At, b), slice(U, b), slice(S, b),
                                       slice(Vt, b), slice(ΔU, b), slice(ΔS, b),
                                       slice(ΔVt, b); d=d[b], rtol, maxiter, opts...)
    end
    return ΔAt
end
function svd_trunc_pullback_batched!(ΔAt, At, U, S, Vt, d, ΔU, ΔS, ΔVt, rtol, maxiter,
                                     degeneracy_atol, broadening, gauge::Bool, gauge_atol)
    opts, recorder = pullback_options(degeneracy_atol, broadening, gauge, gauge_atol)
    svd_trunc_pullback_core!(wrap(ΔAt), wrap(At), U, S, Vt, d, wrap(ΔU), wrap(ΔS),
                             wrap(ΔVt), rtol, maxiter, opts)
    return records(recorder)
end

# Forward mode of the top-k: the tangents of the kept k triplets of svd_topk_batched
# (Julia's, of the transposes) along the tangent ΔAt of the transposes, through the
# blocks and d's it returned (passed back as they are) and the input (wrapped again: the
# tensor saved for forward mode), by PySpectral.truncated_svd_pushforward (dense
# fallback and warning included); the bridge swaps roles as for the factors. No gauge
# options: a pushforward checks nothing.
function svd_trunc_pushforward_core(At, U, S, Vt, d, k::Integer, ΔAt, rtol, maxiter,
                                    degeneracy_atol, broadening)
    Δs = [PySpectral.truncated_svd_pushforward(slice(At, b), slice(U, b), slice(S, b),
                                               slice(Vt, b), k, slice(ΔAt, b); d=d[b],
                                               rtol, maxiter, degeneracy_atol, broadening)
          for b in axes(ΔAt, 3)]
    return batch([Δ[1] for Δ in Δs]), batch([Δ[2] for Δ in Δs]), batch([Δ[3] for Δ in Δs])
end
function svd_trunc_pushforward_batched(At, U, S, Vt, d, k::Integer, ΔAt, rtol, maxiter,
                                       degeneracy_atol, broadening)
    return outs(svd_trunc_pushforward_core(wrap(At), U, S, Vt, d, k, wrap(ΔAt), rtol,
                                           maxiter, degeneracy_atol, broadening))
end

# ----------------------------------------------------------------- split

# The split L = U g(S), R = h(S) Vt (PySpectral.svd_split_pullback!, _pushforward) on the
# triplets the bridge holds. The bridge passes Python's factors (of A), which are those of
# the transposes with the roles swapped: Python's U is Julia's Vt, its Vh Julia's U, its
# L Julia's R and the other way round, and "left" is Julia's :right. The kept count of
# each matrix (the rest: a batch's padding) arrives as the 1×B array of a (B, 1) float
# tensor.
function svd_split_pullback_core!(ΔAt, U, S, Vt, kept, absorb::Symbol, ΔL, ΔR,
                                  degeneracy_atol)
    cots = map(axes(ΔAt, 3)) do b
        PySpectral.svd_split_pullback!(slice(ΔAt, b), slice(U, b), slice(S, b),
                                       slice(Vt, b), Int(kept[1, b]), absorb, slice(ΔL, b),
                                       slice(ΔR, b); degeneracy_atol)
    end
    zero_or(x, like) = x === nothing ? zero(like) : x
    return batch([zero_or(c[1], slice(U, b)) for (b, c) in enumerate(cots)]),
           batch([c[2] for c in cots]),
           batch([zero_or(c[3], slice(Vt, b)) for (b, c) in enumerate(cots)])
end
function svd_split_pullback_batched!(ΔAt, U, S, Vt, kept, absorb::AbstractString, ΔL, ΔR,
                                     degeneracy_atol)
    return outs(svd_split_pullback_core!(wrap(ΔAt), wrap(U), wrap(S), wrap(Vt), wrap(kept),
                                         Symbol(absorb), wrap(ΔL), wrap(ΔR),
                                         degeneracy_atol))
end

function svd_split_pushforward_core(U, S, Vt, kept, absorb::Symbol, ΔAt, ΔU, ΔS, ΔVt,
                                    degeneracy_atol)
    Δs = map(axes(ΔAt, 3)) do b
        PySpectral.svd_split_pushforward(slice(U, b), slice(S, b), slice(Vt, b),
                                         Int(kept[1, b]), absorb, slice(ΔAt, b),
                                         slice(ΔU, b), slice(ΔS, b), slice(ΔVt, b);
                                         degeneracy_atol)
    end
    return batch([Δ[1] for Δ in Δs]), batch([Δ[2] for Δ in Δs])
end
function svd_split_pushforward_batched(U, S, Vt, kept, absorb::AbstractString, ΔAt, ΔU,
                                       ΔS, ΔVt, degeneracy_atol)
    return outs(svd_split_pushforward_core(wrap(U), wrap(S), wrap(Vt), wrap(kept),
                                           Symbol(absorb), wrap(ΔAt), wrap(ΔU), wrap(ΔS),
                                           wrap(ΔVt), degeneracy_atol))
end

# ------------------------------------------------------------ qr, lq

# Python's QR of A is the LQ of the transpose Julia reads (Aᵀ = Rᵀ Qᵀ), Python's LQ the
# QR: `lq_batched` returns (L, Q) of each Aᵀ, which Python reads as (R, Q) without a
# copy, `qr_batched` (Q, R), read as (Q, L). Each pullback names Python's op in its gauge
# records (`op`), and writes into Python's zeroed buffer ΔAt.
function _factor_batch(f, At::Array{T,3}, full::Bool, positive::Bool) where {T}
    Fs = [f(view(At, :, :, b); full, positive) for b in axes(At, 3)]
    return batch([F[1] for F in Fs]), batch([F[2] for F in Fs])
end
lq_batched(At, full::Bool, positive::Bool) =
    outs(_factor_batch(PySpectral.lq, wrap(At), full, positive))
qr_batched(At, full::Bool, positive::Bool) =
    outs(_factor_batch(PySpectral.qr, wrap(At), full, positive))

function _factor_pullback!(pullback!, op, ΔAt, X, Y, ΔX, ΔY, rank_atol, degeneracy_atol,
                           broadening, gauge::Bool, gauge_atol)
    opts, recorder = pullback_options(degeneracy_atol, broadening, gauge, gauge_atol)
    ΔAt, ΔX, ΔY = wrap(ΔAt), wrap(ΔX), wrap(ΔY)
    for b in axes(ΔAt, 3)
        pullback!(slice(ΔAt, b), slice(X, b), slice(Y, b), slice(ΔX, b), slice(ΔY, b);
                  rank_atol, gauge=opts.gauge, gauge_atol=opts.gauge_atol, op)
    end
    return records(recorder)
end
function lq_pullback_batched!(ΔAt, L, Q, ΔL, ΔQ, rank_atol, degeneracy_atol, broadening,
                              gauge::Bool, gauge_atol)
    return _factor_pullback!(PySpectral.lq_pullback!, :qr, ΔAt, L, Q, ΔL, ΔQ, rank_atol,
                             degeneracy_atol, broadening, gauge, gauge_atol)
end
function qr_pullback_batched!(ΔAt, Q, R, ΔQ, ΔR, rank_atol, degeneracy_atol, broadening,
                              gauge::Bool, gauge_atol)
    return _factor_pullback!(PySpectral.qr_pullback!, :lq, ΔAt, Q, R, ΔQ, ΔR, rank_atol,
                             degeneracy_atol, broadening, gauge, gauge_atol)
end

function _factor_pushforward(pushforward, X, Y, ΔAt, rank_atol)
    # gauge=:ignore: Python applies the policy at rank deficiency (qr.py's _julia_jvp)
    Δs = [pushforward(slice(X, b), slice(Y, b), slice(ΔAt, b); rank_atol, gauge=:ignore)
          for b in axes(ΔAt, 3)]
    return batch([Δ[1] for Δ in Δs]), batch([Δ[2] for Δ in Δs])
end
lq_pushforward_batched(L, Q, ΔAt, rank_atol) =
    outs(_factor_pushforward(PySpectral.lq_pushforward, L, Q, wrap(ΔAt), rank_atol))
qr_pushforward_batched(Q, R, ΔAt, rank_atol) =
    outs(_factor_pushforward(PySpectral.qr_pushforward, Q, R, wrap(ΔAt), rank_atol))

# ----------------------------------------------------------------- polar

# Python's right polar decomposition of A is the left one of the transpose Julia reads
# (Aᵀ = Pᵀ Wᵀ); the bridge swaps the side. Returns (W, P, U, S, Vt) of each Aᵀ, the SVD
# being what the pullback reads.
function polar_core(At::Array{T,3}, side::Symbol, degeneracy_atol) where {T}
    out3 = [PySpectral._polar(view(At, :, :, b), side, degeneracy_atol)
            for b in axes(At, 3)]
    return batch([o[1] for o in out3]), batch([o[2] for o in out3]),
           batch([o[3].U for o in out3]), batch([o[3].S for o in out3]),
           batch([o[3].Vt for o in out3])
end
polar_batched(At, side::AbstractString, degeneracy_atol) =
    outs(polar_core(wrap(At), Symbol(side), degeneracy_atol))

function polar_pullback_batched!(ΔAt, W, P, U, S, Vt, ΔW, ΔP, side::AbstractString,
                                 degeneracy_atol)
    ΔAt, ΔW, ΔP = wrap(ΔAt), wrap(ΔW), wrap(ΔP)
    for b in axes(ΔAt, 3)
        PySpectral.polar_pullback!(slice(ΔAt, b), slice(W, b), slice(P, b), slice(U, b),
                                   slice(S, b), slice(Vt, b), slice(ΔW, b), slice(ΔP, b);
                                   side=Symbol(side), degeneracy_atol)
    end
    return ()
end

function polar_pushforward_batched(W, P, U, S, Vt, ΔAt, side::AbstractString,
                                   degeneracy_atol)
    ΔAt = wrap(ΔAt)
    Δs = [PySpectral.polar_pushforward(slice(W, b), slice(P, b), slice(U, b), slice(S, b),
                                       slice(Vt, b), slice(ΔAt, b); side=Symbol(side),
                                       degeneracy_atol) for b in axes(ΔAt, 3)]
    return outs((batch([Δ[1] for Δ in Δs]), batch([Δ[2] for Δ in Δs])))
end

# ------------------------------------------------------------------- eig

# An eigendecomposition does not transpose into one of the same kind (Aᵀ has A's left
# eigenvectors), so Julia decomposes A itself, the transpose of the Aᵀ it reads (LAPACK
# overwrites its input: Julia copies it either way). The eigenvectors return with their
# own indexing (column-major), the gradient of A is written transposed into ΔAt.
function eig_core(At::Array{T,3}) where {T}
    Es = [PySpectral.eig(transpose(view(At, :, :, b))) for b in axes(At, 3)]
    return batch([E.values for E in Es]), batch([E.vectors for E in Es])
end
eig_batched(At) = outs(eig_core(wrap(At)))
function eigvals_batched(At)
    At = wrap(At)
    return out(batch([PySpectral.eigvals(transpose(view(At, :, :, b))) for b in axes(At, 3)]))
end

function eig_pullback_batched!(ΔAt, λ, V, Δλ, ΔV, degeneracy_atol, broadening,
                               gauge::Bool, gauge_atol)
    opts, recorder = pullback_options(degeneracy_atol, broadening, gauge, gauge_atol)
    ΔAt, Δλ, ΔV = wrap(ΔAt), wrap(Δλ), wrap(ΔV)
    for b in axes(ΔAt, 3)
        PySpectral.eig_pullback!(transpose(slice(ΔAt, b)), slice(λ, b), slice(V, b),
                                 slice(Δλ, b), slice(ΔV, b); opts...)
    end
    return records(recorder)
end

# Forward mode; a tangent that splits a cluster is recorded (op "eig:split"), and the
# bridge applies the call's policy to the records, returned after the two tangents.
function eig_pushforward_batched(λ, V, ΔAt, degeneracy_atol, broadening, gauge::Bool,
                                 gauge_atol)
    opts, recorder = pullback_options(degeneracy_atol, broadening, gauge, gauge_atol)
    ΔAt = wrap(ΔAt)
    Δs = [PySpectral.eig_pushforward(slice(λ, b), slice(V, b), transpose(slice(ΔAt, b));
                                     opts...) for b in axes(ΔAt, 3)]
    return (outs((batch([Δ[1] for Δ in Δs]), batch([Δ[2] for Δ in Δs])))...,
            records(recorder))
end

# ------------------------------------------------------------------ eig_topk

# One dense matrix (pyspectral loops over a batch), solved as A itself from the Aᵀ it
# reads, as eig. Its own non-convergence warning is not logged: the bridge certifies
# the pairs by their true residuals, as the native backend does, and warns in its words.
function eig_topk_dense(At, k::Integer, which::AbstractString, tol, krylovdim,
                        maxiter::Integer, degeneracy_atol)
    A = transpose(view(wrap(At), :, :, 1))
    λ, V = Logging.with_logger(Logging.NullLogger()) do
        PySpectral.eig_topk(A, k, Symbol(which); tol, krylovdim, maxiter,
                            degeneracy_atol, gauge=:ignore)
    end
    return outs((batch([λ]), batch([V])))
end

# ΔA = U Vᴴ (its real part for a real A), written transposed into ΔAt; products by
# Aᴴ = conj(Aᵀ). Returns the cotangent's part inside the clusters for the gauge check.
function eig_topk_pullback_dense!(ΔAt, At, λ, V, Δλ, ΔV, cluster_tol, tol,
                                  krylovdim::Integer, maxiter::Integer)
    ΔAt, At, Δλ, ΔV = wrap(ΔAt), wrap(At), wrap(Δλ), wrap(ΔV)
    AH = conj(At[:, :, 1])
    V1 = slice(V, 1)
    U = similar(V1)
    _, Nin = PySpectral.eig_topk_pullback!(U, slice(λ, 1), V1, slice(Δλ, 1), slice(ΔV, 1),
                                           x -> AH * x; cluster_tol, tol, krylovdim,
                                           maxiter)
    ΔA = U * V1'
    view(ΔAt, :, :, 1) .= eltype(ΔAt) <: Real ? real.(transpose(ΔA)) : transpose(ΔA)
    return out(batch([Nin]))
end

# ------------------------------------------------------------------ linsolve

# A batch of dense systems (a0 I + a1 A) x = b, A read as its transpose Aᵀ (so solved with
# transpose(Aᵀ) = A, no copy), each with its own a0, a1 and absolute tolerance (1 × B:
# the bridge's max(atol, rtol ‖b‖), passed as atol with rtol = 0, so that both backends
# stop at the same residual). Julia's warning is not logged: the bridge certifies x by
# its true residual and warns in its words, as the native backend does.
function linsolve_dense(At, b, x0, a0, a1, tol, ishermitian::Bool, isposdef::Bool,
                        krylovdim::Integer, maxiter::Integer)
    At, b, x0, a0, a1, tol = map(wrap, (At, b, x0, a0, a1, tol))
    xs = Logging.with_logger(Logging.NullLogger()) do
        [PySpectral.linsolve(transpose(slice(At, j)), slice(b, j), a0[j], a1[j];
                             x0=slice(x0, j), ishermitian, isposdef, atol=tol[j], rtol=0,
                             krylovdim, maxiter) for j in axes(At, 3)]
    end
    return out(batch(xs))
end

# The adjoint solve of each system: ΔA = -conj(a1) y xᴴ written transposed into ΔAt (its
# real part for a real A); returns (Δb, Δa0, Δa1) as n × B, 1 × B, 1 × B.
function linsolve_pullback_dense!(ΔAt, At, x, Δx, a0, a1, tol, ishermitian::Bool,
                                  isposdef::Bool, krylovdim::Integer, maxiter::Integer)
    ΔAt, At, x, Δx, a0, a1, tol = map(wrap, (ΔAt, At, x, Δx, a0, a1, tol))
    B = size(At, 3)
    Δb, Δa0, Δa1 = similar(x), similar(x, 1, B), similar(x, 1, B)
    Logging.with_logger(Logging.NullLogger()) do
        for j in 1:B
            # A itself (one copy): A' of a lazy transpose would not reach BLAS
            A = Matrix(transpose(slice(At, j)))
            G = zeros(eltype(x), size(A))
            y, Δa0[j], Δa1[j] = PySpectral.linsolve_pullback!(
                G, A, slice(x, j), slice(Δx, j), a0[j], a1[j];
                ishermitian, isposdef, atol=tol[j], rtol=0, krylovdim, maxiter)
            view(Δb, :, j) .= y
            view(ΔAt, :, :, j) .= eltype(ΔAt) <: Real ? real.(transpose(G)) : transpose(G)
        end
    end
    return outs((Δb, Δa0, Δa1))
end

# ---------------------------------------------------------- eig_function

# f(Aᵀ) = f(A)ᵀ for a matrix function, so Julia works on the Aᵀ it reads: its Yᵀ, and
# the gradient ΔAᵀ and tangent ΔYᵀ of that problem, are read back as Y, A's gradient and
# Y's tangent with no transpose. The eigenbasis is Aᵀ's own, Aᵀ = Vₜ Λ Vₜ⁻¹ (the bridge
# has A = Vₜ⁻ᵀ Λ Vₜᵀ from it for the native second-order maps), after the eigenvector
# conditioning check; the bridge checks f's domain on λ before the forms.
function eig_function_eigenbasis_core(At::Array{T,3}) where {T}
    Es = [PySpectral.eig(view(At, :, :, b)) for b in axes(At, 3)]
    Vinvs = [PySpectral.check_diagonalizable(E.values, E.vectors; op=:eig_function,
                                              pairs=false) for E in Es]
    return batch([E.values for E in Es]), batch([E.vectors for E in Es]), batch(Vinvs)
end
eig_function_eigenbasis_batched(At) = outs(eig_function_eigenbasis_core(wrap(At)))

function eig_function_apply_batched(λ, V, Vinv, f, real::Bool)
    g = fspec(f)
    return out(batch([PySpectral.eig_function_apply(slice(λ, b), slice(V, b),
                                                    slice(Vinv, b), g; real)
                      for b in axes(V, 3)]))
end

function eig_function_pullback_batched!(ΔAt, λ, V, Vinv, f, ΔYt)
    g, ΔAt, ΔYt = fspec(f), wrap(ΔAt), wrap(ΔYt)
    for b in axes(ΔAt, 3)
        PySpectral.eig_function_pullback!(slice(ΔAt, b), slice(λ, b), slice(V, b),
                                          slice(Vinv, b), g, slice(ΔYt, b))
    end
    return nothing
end

function eig_function_pushforward_batched(λ, V, Vinv, f, ΔAt, real::Bool)
    g, ΔAt = fspec(f), wrap(ΔAt)
    return out(batch([PySpectral.eig_function_pushforward(slice(λ, b), slice(V, b),
                                                          slice(Vinv, b), g,
                                                          slice(ΔAt, b); real)
                      for b in axes(ΔAt, 3)]))
end

# ------------------------------------------------------------ truncation

# The rank of each spectrum, a column of X (descending from the wanted end: singular
# values, or eigenvalues read from the wanted end; the same on both sides of the
# transpose), by PySpectral.truncation_rank. The bridge holds the decomposition and
# applies the ranks to it; its pullback is Julia's svd_pullback! / eigh_pullback! (or
# the top-k ones) with cotangents zero past each rank, as tsvd_pullback! does. X arrives
# as the k×B array of a (B, k) tensor; the ranks return as a Vector{Int64} of length B
# (`out`, element type code 5), with the tail norms of each spectrum ((k+1)×B:
# PySpectral.tail_norms, the numbers the discarded-weight rule compared, which the bridge
# returns as the truncation errors). `nothing` (Python's None) leaves a rule out.
function truncation_ranks_core(X::AbstractMatrix{<:Real}, k, atol, rtol, error_atol,
                               error_rtol, multiplets::Symbol, min_rank, degeneracy_atol)
    return Int64[PySpectral.truncation_rank(view(X, :, b); k, atol, rtol, error_atol,
                                            error_rtol, multiplets, min_rank,
                                            degeneracy_atol)
                 for b in axes(X, 2)]
end
tail_norms_core(X::AbstractMatrix{<:Real}) =
    reduce(hcat, [PySpectral.tail_norms(view(X, :, b)) for b in axes(X, 2)];
           init=zeros(eltype(X), size(X, 1) + 1, 0))
function truncation_ranks_batched(X, k, atol, rtol, error_atol, error_rtol,
                                  multiplets::AbstractString, min_rank, degeneracy_atol)
    Xw = wrap(X)
    ranks = truncation_ranks_core(Xw, k, atol, rtol, error_atol, error_rtol,
                                  Symbol(multiplets), min_rank, degeneracy_atol)
    return out(ranks), out(tail_norms_core(Xw))
end

# ------------------------------------------------------------------ eigh

# Julia decomposes conj(A), whose eigenvectors are conj(V): conjugate them in
# place (Julia owns them), so Python wraps V itself without a copy or lazy conj.
function eigh_core(At::Array{T,3}, uplo::AbstractString) where {T}
    Es = batchmap(b -> PySpectral.eigh(view(At, :, :, b); uplo=Symbol(uplo)), size(At, 3))
    return batch([E.values for E in Es]), conj!(batch([E.vectors for E in Es]))
end
eigh_batched(At, uplo::AbstractString) = outs(eigh_core(wrap(At), uplo))

# V and ΔV arrive as Python's (V, gV); the pullback of conj(A) needs conj of both
# (`conj` of a real array is the array itself, no copy). `gradient`: "triangle" (the
# entries read) or "hermitian" (torch's: the Hermitian part; transposing commutes with it).
function eigh_pullback_core!(ΔAt, λ, V, Δλ, ΔV, uplo::AbstractString, opts,
                             gradient::AbstractString="triangle")
    foreach_matrix(size(ΔAt, 3), opts) do b, o
        PySpectral.eigh_pullback!(slice(ΔAt, b), slice(λ, b), conj(slice(V, b)), slice(Δλ, b),
                                  conjugate(slice(ΔV, b)); uplo=Symbol(uplo),
                                  gradient=Symbol(gradient), o...)
    end
    return ΔAt
end
function eigh_pullback_batched!(ΔAt, λ, V, Δλ, ΔV, uplo::AbstractString,
                                gradient::AbstractString, degeneracy_atol, broadening,
                                gauge::Bool, gauge_atol)
    opts, recorder = pullback_options(degeneracy_atol, broadening, gauge, gauge_atol)
    eigh_pullback_core!(wrap(ΔAt), λ, V, wrap(Δλ), wrap(ΔV), uplo, opts, gradient)
    return records(recorder)
end

conjugate(::Nothing) = nothing
conjugate(x) = conj(x)

# Forward mode: Julia's problem is conj(A) with eigenvectors conj(V) (V as eigh_batched
# returned it, Python's), read from the swapped triangle of the tangent's transpose;
# its eigenvector tangent is conj(ΔV), conjugated in place (Julia owns it).
function eigh_pushforward_core(λ, V, ΔAt, uplo::AbstractString, degeneracy_atol, broadening)
    Δs = [PySpectral.eigh_pushforward(slice(λ, b), conj(slice(V, b)), slice(ΔAt, b);
                                      uplo=Symbol(uplo), degeneracy_atol, broadening)
          for b in axes(ΔAt, 3)]
    return batch([first(Δ) for Δ in Δs]), conj!(batch([last(Δ) for Δ in Δs]))
end
eigh_pushforward_batched(λ, V, ΔAt, uplo::AbstractString, degeneracy_atol, broadening) =
    outs(eigh_pushforward_core(λ, V, wrap(ΔAt), uplo, degeneracy_atol, broadening))

function eigh_topk_core(At::Array{T,3}, k::Integer, uplo::AbstractString, largest::Bool,
                        method, oversample, n_iter, rtol, maxiter, degeneracy_atol) where {T}
    Bs = topk_blocks(PySpectral.eigh_topk_block, B -> length(B.values), At, k; method,
                     uplo=Symbol(uplo), largest, oversample, n_iter, rtol, maxiter,
                     degeneracy_atol)
    return (batch([B.values for B in Bs]), conj!(batch([B.vectors for B in Bs])),
            Tuple(B.d for B in Bs))
end
function eigh_topk_batched(At, k::Integer, uplo::AbstractString, largest::Bool, method,
                           oversample, n_iter, rtol, maxiter, degeneracy_atol)
    λ, V, d = eigh_topk_core(wrap(At), k, uplo, largest, method, oversample, n_iter, rtol,
                             maxiter, degeneracy_atol)
    return (outs((λ, V))..., d)
end

function eigh_trunc_pullback_core!(ΔAt, At, λ, V, d, Δλ, ΔV, uplo::AbstractString,
                                   largest::Bool, rtol, maxiter, opts)
    for b in axes(ΔAt, 3)
        PySpectral.eigh_trunc_pullback!(slice(ΔAt, b), slice(At, b), slice(λ, b),
                                        conj(slice(V, b)), slice(Δλ, b),
                                        conjugate(slice(ΔV, b)); uplo=Symbol(uplo), largest,
                                        d=d[b], rtol, maxiter, opts...)
    end
    return ΔAt
end
function eigh_trunc_pullback_batched!(ΔAt, At, λ, V, d, Δλ, ΔV, uplo::AbstractString,
                                      largest::Bool, rtol, maxiter, degeneracy_atol,
                                      broadening, gauge::Bool, gauge_atol)
    opts, recorder = pullback_options(degeneracy_atol, broadening, gauge, gauge_atol)
    eigh_trunc_pullback_core!(wrap(ΔAt), wrap(At), λ, V, d, wrap(Δλ), wrap(ΔV), uplo,
                              largest, rtol, maxiter, opts)
    return records(recorder)
end

# Forward mode of the top-k: as eigh_pushforward_batched, through eigh_topk_batched's
# blocks (V as it returned them, Python's: Julia's problem conj(A) has conj(V)) and the
# input, read from the swapped triangle; the tangent of conj(V_k) conjugated in place
# (Julia owns it).
function eigh_trunc_pushforward_core(At, λ, V, d, k::Integer, ΔAt, uplo::AbstractString,
                                     largest::Bool, rtol, maxiter, degeneracy_atol,
                                     broadening)
    Δs = [PySpectral.truncated_eigh_pushforward(slice(At, b), slice(λ, b), conj(slice(V, b)),
                                                k, slice(ΔAt, b); uplo=Symbol(uplo), largest,
                                                d=d[b], rtol, maxiter, degeneracy_atol,
                                                broadening)
          for b in axes(ΔAt, 3)]
    return batch([first(Δ) for Δ in Δs]), conj!(batch([last(Δ) for Δ in Δs]))
end
function eigh_trunc_pushforward_batched(At, λ, V, d, k::Integer, ΔAt, uplo::AbstractString,
                                        largest::Bool, rtol, maxiter, degeneracy_atol,
                                        broadening)
    return outs(eigh_trunc_pushforward_core(wrap(At), λ, V, d, k, wrap(ΔAt), uplo, largest,
                                            rtol, maxiter, degeneracy_atol, broadening))
end

function matrix_function_core(At::Array{T,3}, f, uplo::AbstractString,
                              degeneracy_atol) where {T}
    g = fspec(f)
    Es = [PySpectral.eigh(view(At, :, :, b); uplo=Symbol(uplo)) for b in axes(At, 3)]
    λ = batch([E.values for E in Es])
    Ys = on_spectrum(λ) do
        [PySpectral.matrix_function_apply(E, g; degeneracy_atol) for E in Es]
    end
    return batch(Ys), λ, batch([E.vectors for E in Es])
end
matrix_function_batched(At, f, uplo::AbstractString, degeneracy_atol) =
    outs(matrix_function_core(wrap(At), f, uplo, degeneracy_atol))

function matrix_function_pullback_core!(ΔAt, λ, V, f, ΔYt, uplo::AbstractString,
                                        degeneracy_atol)
    g = fspec(f)
    for b in axes(ΔAt, 3)
        PySpectral.matrix_function_pullback!(slice(ΔAt, b), slice(λ, b), slice(V, b), g,
                                             slice(ΔYt, b); uplo=Symbol(uplo),
                                             degeneracy_atol)
    end
    return ΔAt
end
function matrix_function_pullback_batched!(ΔAt, λ, V, f, ΔYt, uplo::AbstractString,
                                           degeneracy_atol)
    matrix_function_pullback_core!(wrap(ΔAt), λ, V, f, wrap(ΔYt), uplo, degeneracy_atol)
    return nothing
end

# The tangent of Yᵀ (λ, V: matrix_function_batched's, Julia's own eigenvectors).
function matrix_function_pushforward_core(λ, V, f, ΔAt, uplo::AbstractString,
                                          degeneracy_atol)
    g = fspec(f)
    return batch([PySpectral.matrix_function_pushforward(slice(λ, b), slice(V, b), g,
                                                         slice(ΔAt, b); uplo=Symbol(uplo),
                                                         degeneracy_atol)
                  for b in axes(ΔAt, 3)])
end
matrix_function_pushforward_batched(λ, V, f, ΔAt, uplo::AbstractString, degeneracy_atol) =
    out(matrix_function_pushforward_core(λ, V, f, wrap(ΔAt), uplo, degeneracy_atol))

# ------------------------------------------------- f given by its values (user pairs)

# A user's (f, f′) pair of Python functions cannot run here. The bridge decomposes
# with svd_batched / eigh_batched, evaluates f and f′ on that spectrum in Python and
# passes the values as k×B arrays fX, dX (column b: batch element b, in the
# spectrum's order); PySpectral.SpectralValues carries them through the package's own
# forward and pullback. No degeneracy_atol: it enters only named functions' checks.
spectral_values(fX, dX, b) = PySpectral.SpectralValues(slice(fX, b), slice(dX, b))

# U, S, Vt: svd_batched's results, Julia's factors of the transposes, so this is
# Yᵀ = conj(V) f(S) conj(U)ᴴ, which Python reads as Y. (Plain copies of the factors:
# LinearAlgebra.SVD's field types differ between Julia versions, views may not fit.)
function svd_function_values_core(U, S, Vt, fS, dS)
    Fs = [LinearAlgebra.SVD(U[:, :, b], S[:, b], Vt[:, :, b]) for b in axes(U, 3)]
    return batch([PySpectral.svd_function_apply(Fs[b], spectral_values(fS, dS, b))
                  for b in axes(U, 3)])
end
svd_function_values_batched(U, S, Vt, fS, dS) =
    out(svd_function_values_core(U, S, Vt, wrap(fS), wrap(dS)))

function svd_function_values_pullback_core!(ΔAt, U, S, Vt, fS, dS, ΔYt)
    for b in axes(ΔAt, 3)
        PySpectral.svd_function_pullback!(slice(ΔAt, b), slice(U, b), slice(S, b), slice(Vt, b),
                                          spectral_values(fS, dS, b), slice(ΔYt, b))
    end
    return ΔAt
end
function svd_function_values_pullback_batched!(ΔAt, U, S, Vt, fS, dS, ΔYt)
    svd_function_values_pullback_core!(wrap(ΔAt), U, S, Vt, wrap(fS), wrap(dS), wrap(ΔYt))
    return nothing
end

svd_function_values_pushforward_core(U, S, Vt, fS, dS, ΔAt) =
    batch([PySpectral.svd_function_pushforward(slice(U, b), slice(S, b), slice(Vt, b),
                                               spectral_values(fS, dS, b), slice(ΔAt, b))
           for b in axes(ΔAt, 3)])
svd_function_values_pushforward_batched(U, S, Vt, fS, dS, ΔAt) =
    out(svd_function_values_pushforward_core(U, S, Vt, wrap(fS), wrap(dS), wrap(ΔAt)))

# λ, V: eigh_batched's results, V already conjugated to Python's V; Julia's problem
# is conj(A), whose eigenvectors are conj(V), giving conj(V) f(Λ) conj(V)ᴴ = Yᵀ.
function matrix_function_values_core(λ, V, fλ, dλ)
    Es = [LinearAlgebra.Eigen(slice(λ, b), conj(slice(V, b))) for b in axes(V, 3)]
    return batch([PySpectral.matrix_function_apply(Es[b], spectral_values(fλ, dλ, b))
                  for b in axes(V, 3)])
end
matrix_function_values_batched(λ, V, fλ, dλ) =
    out(matrix_function_values_core(λ, V, wrap(fλ), wrap(dλ)))

function matrix_function_values_pullback_core!(ΔAt, λ, V, fλ, dλ, ΔYt, uplo::AbstractString)
    for b in axes(ΔAt, 3)
        PySpectral.matrix_function_pullback!(slice(ΔAt, b), slice(λ, b), conj(slice(V, b)),
                                             spectral_values(fλ, dλ, b), slice(ΔYt, b);
                                             uplo=Symbol(uplo))
    end
    return ΔAt
end
function matrix_function_values_pullback_batched!(ΔAt, λ, V, fλ, dλ, ΔYt,
                                                  uplo::AbstractString)
    matrix_function_values_pullback_core!(wrap(ΔAt), λ, V, wrap(fλ), wrap(dλ), wrap(ΔYt),
                                          uplo)
    return nothing
end

function matrix_function_values_pushforward_core(λ, V, fλ, dλ, ΔAt, uplo::AbstractString)
    return batch([PySpectral.matrix_function_pushforward(slice(λ, b), conj(slice(V, b)),
                                                         spectral_values(fλ, dλ, b),
                                                         slice(ΔAt, b); uplo=Symbol(uplo))
                  for b in axes(ΔAt, 3)])
end
matrix_function_values_pushforward_batched(λ, V, fλ, dλ, ΔAt, uplo::AbstractString) =
    out(matrix_function_values_pushforward_core(λ, V, wrap(fλ), wrap(dλ), wrap(ΔAt), uplo))

# ------------------------------------------- user functions (ps.julia.function)

# User code is evaluated in its own module, so re-including a file redefines
# the user's functions and rrules without touching anything else.
const USER = Module(:PySpectralUser)
Core.eval(USER, :(using LinearAlgebra, ChainRulesCore))

user_include(path::AbstractString) = (Base.include(USER, path); nothing)
user_eval(src::AbstractString) = Core.eval(USER, Meta.parse(src))

# Inputs become plain Arrays: user functions and their rrules may dispatch on
# Array or mutate; the zero-copy path is reserved for the built-in rules.
julia_value(x::AbstractArray) = Array(x)
julia_value(x) = x

python_value(x::AbstractArray) = Array(x)
python_value(x::Tuple) = map(python_value, x)
python_value(x) = x

python_cotangent(g) = python_cotangent_(unthunk(g))
python_cotangent_(::Union{Nothing,AbstractZero}) = nothing
python_cotangent_(g::AbstractArray) = Array(g)
python_cotangent_(g::Number) = g
python_cotangent_(g) = throw(ArgumentError(
    "the pullback returned a cotangent of type $(typeof(g)); pyspectral passes only " *
    "arrays and numbers back to PyTorch"))

"""
    function_forward(f, args...) -> (y, pullback, which)

Evaluate `f(args...)` and keep its pullback: the `rrule` of `f` when one exists
(`which = "rrule"`), else `Zygote.pullback` (`which = "zygote"`).
"""
function function_forward(f, args...)
    xs = map(julia_value, args)
    Zy = zygote()  # loading Zygote loads ChainRules, whose rrules (inv, logdet, ...) count
    r = Base.invokelatest(ChainRulesCore.rrule, f, xs...)
    if r === nothing
        y, back = Base.invokelatest(Zy.pullback, f, xs...)
        return python_value(y), ȳ -> map(python_cotangent, back(ȳ)), "zygote"
    end
    y, back = r
    return python_value(y), ȳ -> map(python_cotangent, Base.tail(back(ȳ))), "rrule"
end

function_pullback(pullback, ȳ) = Base.invokelatest(pullback, julia_value_cotangent(ȳ))
julia_value_cotangent(ȳ::Tuple) = map(julia_value_cotangent, ȳ)
julia_value_cotangent(ȳ) = julia_value(ȳ)

# ------------------------------------------------------------- Julia tests

"""Records results instead of throwing, so Python can report each failure.
Nested `@testset`s inherit this type (`typeof(get_testset())`), get the options of
their own `@testset` call (`verbose`, `showtiming`, ...: ignored here) and record
themselves into their parent when they finish; outermost ones (each iteration of a
`@testset for`) go to `FINISHED`, whatever a wrapper around them returns."""
mutable struct RecordingTestSet <: Test.AbstractTestSet
    description::String
    results::Vector{Any}
end
RecordingTestSet(desc::AbstractString; kw...) = RecordingTestSet(String(desc), Any[])
Test.record(ts::RecordingTestSet, r) = (push!(ts.results, r); r)

const FINISHED = RecordingTestSet[]

function Test.finish(ts::RecordingTestSet)
    if Test.get_testset_depth() > 0
        Test.record(Test.get_testset(), ts)
    else
        push!(FINISHED, ts)
    end
    return ts
end

passes(r::Test.Pass) = 1
passes(ts::RecordingTestSet) = sum(passes, ts.results; init=0)
passes(ts::Test.DefaultTestSet) = ts.n_passed + sum(passes, ts.results; init=0)
passes(v::AbstractVector) = sum(passes, v; init=0)  # `@testset "name" for ...`
passes(r) = 0

failures(r::Union{Test.Fail,Test.Error}) = [sprint(show, r)]
failures(ts::Union{RecordingTestSet,Test.DefaultTestSet}) =
    reduce(vcat, map(failures, ts.results); init=String[])
failures(v::AbstractVector) = reduce(vcat, map(failures, v); init=String[])
failures(r) = String[]

# `@testset` takes its testset type as a bare Symbol (Julia 1.9 and 1.10 accept nothing
# else; later versions also a dotted name), evaluated where the macro expands: each
# test file's module binds this name to RecordingTestSet.
const TESTSET_TYPE = :PySpectralRecordingTestSet

is_testset(e) = Meta.isexpr(e, :macrocall) && e.args[1] === Symbol("@testset")

# What a top-level @testset may be wrapped in (e.g. to run every testset of a file as
# a script whatever the earlier ones do): try/catch, begin/end, let, another macro.
const WRAPPERS = (:try, :block, :let, :macrocall)

"""The first `@testset` of a top-level expression: the expression itself or, in a
wrapper, the first one in source order (pyspectral.julia.testset_names, which reads
the file without Julia, applies the same rule)."""
function first_testset(e)
    is_testset(e) && return e
    Meta.isexpr(e, WRAPPERS) || return nothing
    return first_testset_in(e.args)
end

function first_testset_in(args)
    for a in args
        a isa Expr || continue
        is_testset(a) && return a
        t = first_testset_in(a.args)
        t === nothing || return t
    end
    return nothing
end

"""The description of a `@testset` call if it is a string literal, else `nothing`."""
function testset_name(t::Expr)
    for a in t.args[3:end-1]  # after the macro name and location, before the body
        a isa String && return a
    end
    return nothing
end

"""Top-level expressions of a test file: the setup ones, and `name => (e, t)` for
each one, `e`, whose (first) `@testset`, `t`, has a literal name (`e === t` when
not wrapped)."""
function split_testfile(path::AbstractString)
    ex = Meta.parseall(read(path, String); filename=path)
    setup, sets = Any[], Pair{String,Tuple{Any,Expr}}[]
    for e in ex.args
        t = first_testset(e)
        name = t === nothing ? nothing : testset_name(t)
        name === nothing ? push!(setup, e) : push!(sets, name => (e, t))
        # a wrapper around several testsets would hide all but the first
        name === nothing || count_testsets(e) == count_testsets(t) || throw(ArgumentError(
            "$path:$(t.args[2].line): a top-level expression wraps more than one " *
            "@testset; give each its own top-level expression"))
    end
    return setup, sets
end

count_testsets(e) = e isa Expr ? is_testset(e) + sum(count_testsets, e.args; init=0) : 0

testset_names(path::AbstractString) = first.(last(split_testfile(path)))

"""The top-level expression `e` with its `@testset` call `t` given the recording
testset type (in place of any type the file gave it); the rest of `e`, a wrapper
(its bindings, its try/catch), stays as written."""
function recording(e, t::Expr)
    r = copy(t)
    i = findfirst(a -> a isa Symbol || Meta.isexpr(a, :.), r.args[3:end-1])
    i === nothing ? insert!(r.args, 3, TESTSET_TYPE) : (r.args[i+2] = TESTSET_TYPE)
    return replace_node(e, t, r)
end

replace_node(e, old, new) =
    e === old ? new :
    e isa Expr ? Expr(e.head, (replace_node(a, old, new) for a in e.args)...) : e

const TEST_MODULES = Dict{String,Module}()

"""A fresh module for a test file, with what `module` would define (`eval`,
`include`) and the recording testset type; the file's setup code runs in it once."""
function test_module(path::AbstractString, setup)
    m = Module(:PySpectralTestFile)
    Core.eval(m, :(eval(x) = Core.eval($m, x)))
    Core.eval(m, :(include(p) = Base.include($m, p)))
    Core.eval(m, Expr(:const, Expr(:(=), TESTSET_TYPE, RecordingTestSet)))
    task_local_storage(:SOURCE_PATH, path) do
        for e in setup
            Core.eval(m, e)
        end
    end
    return m
end

"""Run the top-level `@testset name` of `path`; the file's other top-level code
runs once per file in a fresh module. Returns `(passed, failure_messages)`, each
failure as Julia shows it (message and location)."""
function run_testset(path::AbstractString, name::AbstractString)
    setup, sets = split_testfile(path)
    mod = get!(() -> test_module(path, setup), TEST_MODULES, path)
    i = findfirst(p -> first(p) == name, sets)
    i === nothing && throw(ArgumentError("no top-level @testset \"$name\" in $path"))
    empty!(FINISHED)
    task_local_storage(:SOURCE_PATH, path) do
        Core.eval(mod, recording(last(sets[i])...))
    end
    finished = copy(FINISHED)
    empty!(FINISHED)
    return passes(finished), failures(finished)
end

end # module
