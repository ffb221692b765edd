# Spectral functions f, given as values f(x) and derivatives f′(x) on a spectrum,
# for svd_function (singular values) and matrix_function (eigenvalues), and the
# Daleckii–Krein pullback of V f(Λ) Vᴴ.

const SVD_FUNCTIONS = ":polar, :normalize, (:truncate, r), (:threshold, τ), (:pow, p), " *
                      "(f, f′), SpectralValues"
const MATRIX_FUNCTIONS = ":sqrt, :invsqrt, :log, :exp, (:pow, p), (f, f′), SpectralValues"

"""
    SpectralValues(values, derivatives)

A spectral function given by its values `f(xᵢ)` and derivatives `f′(xᵢ)` at the points
`xᵢ` of one spectrum, in that spectrum's order (singular values descending, as in
`PySpectral.svd(A).S`; eigenvalues ascending, as in `eigh(A).values`), instead of by `f`
itself. Accepted wherever `f` is: [`svd_function`](@ref), [`matrix_function`](@ref),
[`svd_function_apply`](@ref), [`matrix_function_apply`](@ref) and their pullbacks,
whose divided differences need nothing else ([`svd_function_values`](@ref) and
[`matrix_function_values`](@ref) return the stored vectors, after checking their
length against the spectrum). For an `f` evaluated elsewhere (pyspectral evaluates a
user's PyTorch functions in Python) or values at hand:

    S = PySpectral.svd(A).S
    svd_function(A, SpectralValues(f.(S), f′.(S)))   # == svd_function(A, (f, f′))

Like any `f`, the values get no tangent: the gradient w.r.t. `A` is the exact one at
the `A` whose spectrum they were computed on.
"""
struct SpectralValues{V<:AbstractVector{<:Real},D<:AbstractVector{<:Real}}
    values::V
    derivatives::D
    function SpectralValues(values::V, derivatives::D) where {V<:AbstractVector{<:Real},
                                                              D<:AbstractVector{<:Real}}
        length(values) == length(derivatives) || throw(DimensionMismatch(
            "SpectralValues: $(length(values)) values but $(length(derivatives)) derivatives"))
        return new{V,D}(values, derivatives)
    end
end

# The stored values of `f`, which must belong to the spectrum `x` (one per point).
function _stored_values(op, f::SpectralValues, x::AbstractVector)
    length(f.values) == length(x) || throw(DimensionMismatch(string(
        "$op: SpectralValues holds $(length(f.values)) values, but the spectrum has ",
        "$(length(x)) points; evaluate f and f′ on this matrix's spectrum")))
    return (f.values, f.derivatives)
end

# Names may arrive as strings (from Python): one spelling, Symbols, from here on.
_fspec(f::AbstractString) = Symbol(f)
_fspec(f::Tuple{AbstractString,Any}) = (Symbol(f[1]), f[2])
_fspec(f) = f

_is_user_pair(f) = f isa Tuple{Any,Any} && !(f[1] isa Union{Symbol,AbstractString})

# (name, number) if f is such a pair with name in `names`, else nothing.
function _named(f, names)
    (f isa Tuple{Symbol,Real} && f[1] in names && !(f[2] isa Bool)) || return nothing
    return f
end

"""
    power_values(x, p) -> (x.^p, p x.^(p-1))

Values and derivatives of `x^p` on a spectrum (`x^0 = 1`, integer `p` exactly).
"""
function power_values(x::AbstractVector, p::Real)
    R = float(eltype(x))
    iszero(p) && return (ones(R, length(x)), zeros(R, length(x)))
    if isinteger(p)
        q = Int(p)
        return (x .^ q, q .* x .^ (q - 1))
    end
    q = R(p)
    return (x .^ q, q .* x .^ (q - 1))
end

"""
    svd_function_values(f, S; degeneracy_atol=nothing) -> (fS, f′S)

Values and derivatives of the singular value function `f` (see
[`svd_function`](@ref)) at the singular values `S` (descending):
`:polar` → (1, 0); `(:truncate, r)` → (sᵢ, 1) for i <= r else (0, 0);
`(:threshold, τ)` → (max(sᵢ - τ, 0), sᵢ > τ); `(:pow, p)` → (sᵢ^p, p sᵢ^(p-1)), with a
`DomainError` for `p < 0` and a singular value `<= degeneracy_atol`; `(f, f′)` → both
applied elementwise; a [`SpectralValues`](@ref) → its stored vectors.
"""
function svd_function_values(f, S::AbstractVector{<:Real}; degeneracy_atol=nothing)
    f = _fspec(f)
    R, k = float(eltype(S)), length(S)
    f === :polar && return (ones(R, k), zeros(R, k))
    _is_user_pair(f) && return (f[1].(S), f[2].(S))
    f isa SpectralValues && return _stored_values("svd_function", f, S)
    f === :normalize && throw(ArgumentError(
        "svd_function: :normalize is the composite A / maximum(S), not a function of " *
        "each singular value; call svd_function(A, :normalize)"))
    named = _named(f, (:truncate, :threshold, :pow))
    named === nothing && throw(ArgumentError(
        "svd_function: f must be one of $SVD_FUNCTIONS, got $(repr(f))"))
    name, x = named
    # a NaN or infinite τ or p would give a NaN Y (as pyspectral's named_argument)
    name === :truncate || isfinite(x) || throw(ArgumentError(
        "svd_function: (:$name, x) needs a finite real number x, got $x"))
    if name === :truncate
        (isinteger(x) && 1 <= x <= k) || throw(ArgumentError(
            "svd_function: (:truncate, r) needs an integer 1 <= r <= min(m, n) = $k, got $x"))
        keep = R[i <= x for i in 1:k]
        return (S .* keep, keep)
    elseif name === :threshold
        x >= 0 || throw(ArgumentError("svd_function: threshold τ must be >= 0, got $x"))
        τ = R(x)
        return (max.(S .- τ, zero(R)), R.(S .> τ))
    end
    if x < 0
        tol = degeneracy_atol === nothing ? default_degeneracy_atol(S) : degeneracy_atol
        i = findfirst(<=(tol), S)
        i === nothing || throw(DomainError(S[i], string(
            "svd_function: (:pow, $x) needs nonzero singular values, but S[$i] = ", S[i],
            " is numerically zero (<= degeneracy_atol ", tol, "). Use p >= 0 or regularise A.")))
    end
    return power_values(S, x)
end

"""
    matrix_function_values(f, λ; degeneracy_atol=nothing) -> (fλ, f′λ)

Values and derivatives of the matrix function `f` (see [`matrix_function`](@ref)) at
the eigenvalues `λ` (ascending). Functions of a positive (semi)definite spectrum throw
a `DomainError` naming the first eigenvalue outside it (1-based index and value);
`:sqrt` and fractional powers clamp eigenvalues in `[-degeneracy_atol, 0)` to 0.
A [`SpectralValues`](@ref) gives its stored vectors.
"""
function matrix_function_values(f, λ::AbstractVector{<:Real}; degeneracy_atol=nothing)
    f = _fspec(f)
    if f === :exp
        e = exp.(λ)
        return (e, copy(e))
    elseif f === :log
        λ = _positive_spectrum(":log", λ, true, degeneracy_atol)
        return (log.(λ), inv.(λ))
    elseif f === :sqrt
        return _matrix_power(":sqrt", λ, 1 // 2, degeneracy_atol)
    elseif f === :invsqrt
        return _matrix_power(":invsqrt", λ, -1 // 2, degeneracy_atol)
    end
    _is_user_pair(f) && return (f[1].(λ), f[2].(λ))
    f isa SpectralValues && return _stored_values("matrix_function", f, λ)
    named = _named(f, (:pow,))
    named === nothing && throw(ArgumentError(
        "matrix_function: f must be one of $MATRIX_FUNCTIONS, got $(repr(f))"))
    isfinite(named[2]) || throw(ArgumentError(
        "matrix_function: (:pow, p) needs a finite real number p, got $(named[2])"))
    return _matrix_power("(:pow, $(named[2]))", λ, named[2], degeneracy_atol)
end

# Non-negative integer powers are defined on any spectrum; others need λ > 0 (p < 0)
# or λ >= 0, with rounding noise of a semidefinite matrix clamped to 0.
function _matrix_power(name, λ, p, degeneracy_atol)
    isinteger(p) && p >= 0 && return power_values(λ, p)
    return power_values(_positive_spectrum(name, λ, p < 0, degeneracy_atol), p)
end

function _positive_spectrum(name, λ, strict, degeneracy_atol)
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(λ) : degeneracy_atol
    i = findfirst(x -> strict ? x <= 0 : x < -tol, λ)
    if i !== nothing
        need = strict ? "positive definite" : "positive semidefinite"
        throw(DomainError(λ[i], string(
            "matrix_function: $name needs a $need input, but eigenvalue $i (1-based, ",
            "ascending) is λ[$i] = ", λ[i], ". Shift the spectrum (A + c*I) or use a ",
            "function defined there.")))
    end
    return strict ? λ : max.(λ, zero(eltype(λ)))
end

"""
    matrix_function_pullback!(ΔA, λ, V, f, ΔY; uplo=:L, degeneracy_atol=nothing) -> ΔA

Add to `ΔA` the gradient of `Y = V f(Λ) Vᴴ` w.r.t. the `uplo` triangle read by
[`matrix_function`](@ref) (Daleckii–Krein, exact at every spectrum): with
`X = Vᴴ ΔY V` and `Lᵢⱼ = divdiff(λᵢ, λⱼ, fᵢ, fⱼ, f′ᵢ, f′ⱼ)`,
`G = V (L ∘ (X + Xᴴ)/2) Vᴴ`, then [`fold_triangle!`](@ref). Where `f′` is infinite
(`:sqrt` at an exact zero eigenvalue) only `L` on that eigenvalue's pairs with itself is,
and the gradient is `±Inf` in the entries that part reaches, finite elsewhere, never NaN
([`with_infinite_weights`](@ref)).
"""
function matrix_function_pullback!(ΔA::AbstractMatrix, λ::AbstractVector, V::AbstractMatrix,
                                   f, ΔY; uplo::Symbol=:L, degeneracy_atol=nothing)
    uplo = _check_uplo("matrix_function", uplo)
    iszerotangent(ΔY) && return ΔA
    fλ, dλ = matrix_function_values(f, λ; degeneracy_atol)
    L = divdiff.(λ, transpose(λ), fλ, transpose(fλ), dλ, transpose(dλ))
    X = V' * ΔY * V
    G = with_infinite_weights(infinite_weights_tol(ΔY), L) do Lw
        V * ((Lw .* (X .+ X')) ./ 2) * V'
    end
    return fold_triangle!(ΔA, G, uplo)
end

"""
    matrix_function_pushforward(λ, V, f, ΔA; uplo=:L, degeneracy_atol=nothing) -> ΔY

Tangent of `Y = V f(Λ) Vᴴ` along `ΔA` read from its `uplo` triangle (Daleckii–Krein,
exact at every spectrum; the transpose of [`matrix_function_pullback!`](@ref)): with
`ΔP = Vᴴ ΔA_h V` ([`hermitian_from_triangle`](@ref)) and `Lᵢⱼ = divdiff(λᵢ, λⱼ, fᵢ, fⱼ,
f′ᵢ, f′ⱼ)`, `ΔY = V (L ∘ ΔP) Vᴴ`. Where `f′` is infinite (`:sqrt` at an exact zero
eigenvalue) the tangent is `±Inf` where `L` is, finite elsewhere, never NaN
([`with_infinite_weights`](@ref), at the scale of `ΔA`).
"""
function matrix_function_pushforward(λ::AbstractVector, V::AbstractMatrix, f,
                                     ΔA::AbstractMatrix; uplo::Symbol=:L,
                                     degeneracy_atol=nothing)
    uplo = _check_uplo("matrix_function", uplo)
    fλ, dλ = matrix_function_values(f, λ; degeneracy_atol)
    L = divdiff.(λ, transpose(λ), fλ, transpose(fλ), dλ, transpose(dλ))
    ΔP = V' * hermitian_from_triangle(ΔA, uplo) * V
    return with_infinite_weights(infinite_weights_tol(ΔA), L) do Lw
        V * (Lw .* ΔP) * V'
    end
end
