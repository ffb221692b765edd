# Glue between pyspectral's Python bridge (pyspectral/_julia.py) and the Julia
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
# Every function takes and returns plain arrays, never wrappers.
module PySpectralGlue

using LinearAlgebra
using ChainRulesCore
using Test
using PySpectral

# Zygote takes a while to load and only ps.julia.function needs it.
function zygote()
    isdefined(Main, :Zygote) || Core.eval(Main, :(using Zygote))
    return getfield(Main, :Zygote)
end

# ------------------------------------------------------------------ helpers

slice(::Nothing, b) = nothing
slice(x::AbstractArray{<:Any,3}, b) = view(x, :, :, b)
slice(x::AbstractMatrix, b) = view(x, :, b)

# One matrix: return its own memory with a trailing batch axis (no copy);
# several: stack them (the only copy, made in Julia, of Julia-owned results).
batch(xs::Vector) = length(xs) == 1 ? reshape(xs[1], size(xs[1])..., 1) : stack(xs)

# Gauge violations recorded under the "warn" policy, read back by Python,
# which turns them into a GaugeWarning with the native backend's message.
const GAUGE_LOG = Tuple{String,Float64,Float64}[]
record_gauge(op, viol, tol) = (push!(GAUGE_LOG, (String(op), Float64(viol), Float64(tol))); nothing)
gauge_policy(p::AbstractString) = p == "warn" ? record_gauge : Symbol(p)
take_gauge_log() = (log = copy(GAUGE_LOG); empty!(GAUGE_LOG); log)

function exception_kind(e)
    e isa PySpectral.GaugeError && return "gauge"
    e isa DomainError && return "domain"
    (e isa ArgumentError || e isa DimensionMismatch) && return "argument"
    return "other"
end

gc_enable(on::Bool) = GC.enable(on)

missing_packages(names) = [String(n) for n in names if Base.find_package(String(n)) === nothing]

fspec(f::AbstractString) = Symbol(f)
fspec(f::Tuple{AbstractString,Real}) = (Symbol(f[1]), f[2])

options(; degeneracy_atol=nothing, broadening=nothing, gauge="warn", gauge_atol=nothing) =
    (; degeneracy_atol, broadening, gauge=gauge_policy(gauge), gauge_atol)

# ------------------------------------------------------------------- SVD

function svd_batched(At::AbstractArray{<:Any,3}, full::Bool)
    Fs = [PySpectral.svd(view(At, :, :, b); full=full) for b in axes(At, 3)]
    return batch([F.U for F in Fs]), batch([F.S for F in Fs]), batch([F.Vt for F in Fs])
end

svdvals_batched(At::AbstractArray{<:Any,3}) =
    batch([PySpectral.svdvals(view(At, :, :, b)) for b in axes(At, 3)])

function svd_pullback_batched!(ΔAt, U, S, Vt, ΔU, ΔS, ΔVt; kw...)
    opts = options(; kw...)
    for b in axes(ΔAt, 3)
        PySpectral.svd_pullback!(slice(ΔAt, b), slice(U, b), slice(S, b), slice(Vt, b),
                                 slice(ΔU, b), slice(ΔS, b), slice(ΔVt, b); opts...)
    end
    return ΔAt
end

# The truncation-inside-a-cluster check runs on the Python side (gauge=:ignore
# here), so both backends warn with the same message and policy.
function svd_function_batched(At::AbstractArray{<:Any,3}, f; degeneracy_atol=nothing)
    g = fspec(f)
    Fs = [PySpectral.svd(view(At, :, :, b)) for b in axes(At, 3)]
    Ys = [PySpectral.svd_function_apply(F, g; degeneracy_atol, gauge=:ignore) for F in Fs]
    return batch(Ys), batch([F.U for F in Fs]), batch([F.S for F in Fs]), batch([F.Vt for F in Fs])
end

function svd_function_pullback_batched!(ΔAt, U, S, Vt, f, ΔYt; degeneracy_atol=nothing)
    g = fspec(f)
    for b in axes(ΔAt, 3)
        PySpectral.svd_function_pullback!(slice(ΔAt, b), slice(U, b), slice(S, b), slice(Vt, b),
                                          g, slice(ΔYt, b); degeneracy_atol)
    end
    return ΔAt
end

# Top-k: Julia's svd_topk of the transposes; the truncated pullbacks multiply by
# the input again, which the bridge passes back (the same zero-copy view).
function svd_topk_batched(At::AbstractArray{<:Any,3}, k::Integer; oversample, n_iter)
    Fs = [PySpectral.svd_topk(view(At, :, :, b), k; oversample, n_iter) for b in axes(At, 3)]
    return batch([F.U for F in Fs]), batch([F.S for F in Fs]), batch([F.Vt for F in Fs])
end

function svd_trunc_pullback_batched!(ΔAt, At, U, S, Vt, ΔU, ΔS, ΔVt; rtol, maxiter, kw...)
    opts = options(; kw...)
    for b in axes(ΔAt, 3)
        PySpectral.svd_trunc_pullback!(slice(ΔAt, b), slice(At, b), slice(U, b), slice(S, b),
                                       slice(Vt, b), slice(ΔU, b), slice(ΔS, b),
                                       slice(ΔVt, b); rtol, maxiter, opts...)
    end
    return ΔAt
end

# ------------------------------------------------------------------ eigh

# Julia decomposes conj(A), whose eigenvectors are conj(V): conjugate them in
# place (Julia owns them), so Python wraps V itself without a copy or lazy conj.
function eigh_batched(At::AbstractArray{<:Any,3}, uplo::AbstractString)
    Es = [PySpectral.eigh(view(At, :, :, b); uplo=Symbol(uplo)) for b in axes(At, 3)]
    return batch([E.values for E in Es]), conj!(batch([E.vectors for E in Es]))
end

# V and ΔV arrive as Python's (V, gV); the pullback of conj(A) needs conj of both
# (`conj` of a real array is the array itself, no copy).
function eigh_pullback_batched!(ΔAt, λ, V, Δλ, ΔV, uplo::AbstractString; kw...)
    opts = options(; kw...)
    for b in axes(ΔAt, 3)
        PySpectral.eigh_pullback!(slice(ΔAt, b), slice(λ, b), conj(slice(V, b)), slice(Δλ, b),
                                  conjugate(slice(ΔV, b)); uplo=Symbol(uplo), opts...)
    end
    return ΔAt
end

conjugate(::Nothing) = nothing
conjugate(x) = conj(x)

function eigh_topk_batched(At::AbstractArray{<:Any,3}, k::Integer, uplo::AbstractString;
                           oversample, n_iter)
    Es = [PySpectral.eigh_topk(view(At, :, :, b), k; uplo=Symbol(uplo), oversample, n_iter)
          for b in axes(At, 3)]
    return batch([E.values for E in Es]), conj!(batch([E.vectors for E in Es]))
end

function eigh_trunc_pullback_batched!(ΔAt, At, λ, V, Δλ, ΔV, uplo::AbstractString;
                                      rtol, maxiter, kw...)
    opts = options(; kw...)
    for b in axes(ΔAt, 3)
        PySpectral.eigh_trunc_pullback!(slice(ΔAt, b), slice(At, b), slice(λ, b),
                                        conj(slice(V, b)), slice(Δλ, b),
                                        conjugate(slice(ΔV, b)); uplo=Symbol(uplo), rtol,
                                        maxiter, opts...)
    end
    return ΔAt
end

function matrix_function_batched(At::AbstractArray{<:Any,3}, f, uplo::AbstractString;
                                 degeneracy_atol=nothing)
    g = fspec(f)
    Es = [PySpectral.eigh(view(At, :, :, b); uplo=Symbol(uplo)) for b in axes(At, 3)]
    Ys = [PySpectral.matrix_function_apply(E, g; degeneracy_atol) for E in Es]
    return batch(Ys), batch([E.values for E in Es]), batch([E.vectors for E in Es])
end

function matrix_function_pullback_batched!(ΔAt, λ, V, f, ΔYt, uplo::AbstractString;
                                           degeneracy_atol=nothing)
    g = fspec(f)
    for b in axes(ΔAt, 3)
        PySpectral.matrix_function_pullback!(slice(ΔAt, b), slice(λ, b), slice(V, b), g,
                                             slice(ΔYt, b); uplo=Symbol(uplo),
                                             degeneracy_atol)
    end
    return ΔAt
end

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
function svd_function_values_batched(U, S, Vt, fS, dS)
    Fs = [LinearAlgebra.SVD(U[:, :, b], S[:, b], Vt[:, :, b]) for b in axes(U, 3)]
    return batch([PySpectral.svd_function_apply(Fs[b], spectral_values(fS, dS, b))
                  for b in axes(U, 3)])
end

function svd_function_values_pullback_batched!(ΔAt, U, S, Vt, fS, dS, ΔYt)
    for b in axes(ΔAt, 3)
        PySpectral.svd_function_pullback!(slice(ΔAt, b), slice(U, b), slice(S, b), slice(Vt, b),
                                          spectral_values(fS, dS, b), slice(ΔYt, b))
    end
    return ΔAt
end

# λ, V: eigh_batched's results, V already conjugated to Python's V; Julia's problem
# is conj(A), whose eigenvectors are conj(V), giving conj(V) f(Λ) conj(V)ᴴ = Yᵀ.
function matrix_function_values_batched(λ, V, fλ, dλ)
    Es = [LinearAlgebra.Eigen(slice(λ, b), conj(slice(V, b))) for b in axes(V, 3)]
    return batch([PySpectral.matrix_function_apply(Es[b], spectral_values(fλ, dλ, b))
                  for b in axes(V, 3)])
end

function matrix_function_values_pullback_batched!(ΔAt, λ, V, fλ, dλ, ΔYt,
                                                  uplo::AbstractString)
    for b in axes(ΔAt, 3)
        PySpectral.matrix_function_pullback!(slice(ΔAt, b), slice(λ, b), conj(slice(V, b)),
                                             spectral_values(fλ, dλ, b), slice(ΔYt, b);
                                             uplo=Symbol(uplo))
    end
    return ΔAt
end

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
Nested `@testset`s inherit this type and record themselves into their parent."""
mutable struct RecordingTestSet <: Test.AbstractTestSet
    description::String
    results::Vector{Any}
end
RecordingTestSet(desc::AbstractString; kw...) = RecordingTestSet(String(desc), Any[])
Test.record(ts::RecordingTestSet, r) = (push!(ts.results, r); r)
function Test.finish(ts::RecordingTestSet)
    Test.get_testset_depth() > 0 && Test.record(Test.get_testset(), ts)
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

"""Top-level expressions of a test file: the setup ones and the named @testsets."""
function split_testfile(path::AbstractString)
    ex = Meta.parseall(read(path, String); filename=path)
    setup, sets = Any[], Pair{String,Any}[]
    for e in ex.args
        if Meta.isexpr(e, :macrocall) && e.args[1] === Symbol("@testset") &&
           length(e.args) >= 4 && e.args[3] isa String
            push!(sets, e.args[3] => e)
        else
            push!(setup, e)
        end
    end
    return setup, sets
end

testset_names(path::AbstractString) = first.(last(split_testfile(path)))

const TEST_MODULES = Dict{String,Module}()

"""Run the top-level `@testset name` of `path`; the file's other top-level code
runs once per file in a fresh module. Returns `(passed, failure_messages)`."""
function run_testset(path::AbstractString, name::AbstractString)
    setup, sets = split_testfile(path)
    mod = get!(TEST_MODULES, path) do
        m = Module(:PySpectralTestFile)
        task_local_storage(:SOURCE_PATH, path) do
            for e in setup
                Core.eval(m, e)
            end
        end
        m
    end
    i = findfirst(p -> first(p) == name, sets)
    i === nothing && throw(ArgumentError("no top-level @testset \"$name\" in $path"))
    e = copy(last(sets[i]))
    insert!(e.args, 3, :(Main.PySpectralGlue.RecordingTestSet))
    ts = task_local_storage(:SOURCE_PATH, path) do
        Core.eval(mod, e)
    end
    return passes(ts), failures(ts)
end

end # module
