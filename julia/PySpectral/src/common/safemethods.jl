# Regularised inverses of spectral gaps and the stable divided difference.
# Every 1/gap in the pullbacks goes through one of these, never through a bare `/`.

"""
    iszerotangent(x) -> Bool

Whether `x` stands for an absent (zero) cotangent. `nothing` here; the rrule glue
adds ChainRulesCore's `AbstractZero`, so the pullbacks themselves need no AD package.
"""
iszerotangent(::Nothing) = true
iszerotangent(::Any) = false

"""
    inv_safe(x, tol)

Hard-cutoff inverse: `1/x` where `abs(x) > tol`, else `0`.
"""
inv_safe(x::Real, tol::Real) = abs(x) > tol ? inv(x) : zero(float(x))

"""
    inv_lorentz(x, η)

Lorentzian-broadened inverse of a signed gap: `x / (x^2 + η^2)`. Smooth, odd in `x`,
`≈ 1/x` for `|x| ≫ η` and `0` at `x = 0`. Evaluated in units of `m = max(|x|, η)`
(the same value for every `m > 0`): squaring `x` and `η` directly underflows to `0/0`
for `η` below `sqrt(floatmin)`.
"""
function inv_lorentz(x::Real, η::Real)
    x = float(x)
    η = oftype(x, η)
    m = max(abs(x), η)
    iszero(m) && return zero(x)
    xm, ηm = x / m, η / m
    return xm / ((xm * xm + ηm * ηm) * m)
end

"""
    gap_inverse(x, tol, broadening)

The inverse used for every gap `sⱼ - sᵢ`, `sⱼ + sᵢ` and `sᵢ`: [`inv_safe`](@ref)
`(x, tol)` when `broadening === nothing` (the default), else
[`inv_lorentz`](@ref)`(x, broadening)`.
"""
gap_inverse(x::Real, tol::Real, ::Nothing) = inv_safe(x, tol)
gap_inverse(x::Real, tol::Real, broadening::Real) = inv_lorentz(x, broadening)

# A complex gap λⱼ - λᵢ (eig): the cutoff on its modulus, and the Lorentzian
# conj(x) / (|x|² + η²), in units of m = max(|x|, η) as for a real gap.
inv_safe(x::Complex, tol::Real) = abs(x) > tol ? inv(x) : zero(float(x))
function inv_lorentz(x::Complex, η::Real)
    x = float(x)
    η = real(typeof(x))(η)
    m = max(abs(x), η)
    iszero(m) && return zero(x)
    xm, ηm = x / m, η / m
    return conj(xm) / ((abs2(xm) + ηm * ηm) * m)
end
gap_inverse(x::Complex, tol::Real, ::Nothing) = inv_safe(x, tol)
gap_inverse(x::Complex, tol::Real, broadening::Real) = inv_lorentz(x, broadening)

"""
    divdiff(a, b, fa, fb, da, db)

Stable divided difference `(fa - fb) / (a - b)`, tending to `(da + db) / 2` as
`a → b` (`fa = f(a)`, `da = f′(a)`). The quotient carries the rounding error of
`fa - fb`, about `eps (|fa| + |fb|) / |a - b|`; the derivative average a Taylor error
`O(f‴ (a - b)²)`. The quotient is used where it differs from the average by more than
twice its own rounding error, the average elsewhere (the two then agree to that
error), and always for nodes within `DIVDIFF_ULPS` ulps of each other (one node to
rounding). This assumes nothing about the scale on which `f` varies (`exp` near 0
varies on scale 1, not `|a|`) and squares nothing (no underflow). Same criterion as
`divided_difference` in pyspectral/common/safemethods.py.

An infinite derivative at an end (`sqrt` at 0) never replaces a finite quotient:
`sqrt[0, x] = sqrt(x) / x` is finite for `x ≠ 0`; only the limit `a = b` itself is
infinite (see [`with_infinite_weights`](@ref)).
"""
function divdiff(a, b, fa, fb, da, db)
    d = a - b
    average = (da + db) / 2
    ϵ = eps(real(float(typeof(d))))
    # nodes within DIVDIFF_ULPS ulps of each other are one node to rounding: the
    # quotient is noise whatever f (also where f's values cancel below eps |f|)
    abs(d) > DIVDIFF_ULPS * ϵ * max(abs(a), abs(b)) || return average
    quotient = (fa - fb) / d
    isfinite(average) || return quotient
    rounding = ϵ * (abs(fa) + abs(fb)) / abs(d)
    return abs(quotient - average) > 2 * rounding ? quotient : average
end

# Nodes closer than this many ulps (of the larger) count as one node in `divdiff`; the
# same number as ULPS in pyspectral/common/safemethods.py.
const DIVDIFF_ULPS = 8

# The skew numerators of the svd / eigh pullbacks, (Jₐ ± Kₐ)ᵢⱼ with J = UᴴΔU, K = VᴴΔV,
# are divided by the gaps sⱼ - sᵢ (and sⱼ + sᵢ, λⱼ - λᵢ). For a loss invariant under
# rotations of a near-degenerate pair (a polar factor, a projector onto a subspace
# that contains the pair) the numerator is 0 in exact arithmetic; computed, it is the
# rounding error of the products, and that divided by a gap just above the degeneracy
# tolerance would be the gradient. So, with the criterion of `divdiff`, a numerator at
# or below its own rounding error counts as 0. For J = Uᴴ G (m rows, orthonormal
# columns), |fl(J)ᵢⱼ - Jᵢⱼ| <= γₘ ‖gⱼ‖ (Higham, Accuracy and Stability of Numerical
# Algorithms, 2nd ed., §3.1 and Lemma 3.5, with Cauchy-Schwarz); the skew part adds
# the error of Jⱼᵢ and a subtraction, complex products a factor √2: eps (m + 2)
# (‖gᵢ‖ + ‖gⱼ‖) per factor covers it. One norm per column, no product. Same rule as
# `column_rounding` / `pair_rounding` / `cut_rounding` in
# pyspectral/common/safemethods.py.

"""
    column_rounding(G, inner; dims=1) -> Vector

`eps (inner + 2) ‖gⱼ‖` per column `gⱼ` of `G` (`dims=2`: per row): with `cᵢ + cⱼ`
([`pair_rounding`](@ref)), a bound on the rounding error of entry `(i, j)` of the skew
part of `Qᴴ G`, `Q` with `inner` rows and orthonormal columns.
"""
function column_rounding(G::AbstractMatrix, inner::Integer; dims::Integer=1)
    scale = eps(real(float(eltype(G)))) * (inner + 2)
    lines = dims == 1 ? eachcol(G) : eachrow(G)
    return [scale * LinearAlgebra.norm(g) for g in lines]
end

"""
    pair_rounding(c) -> Matrix

`rᵢⱼ = cᵢ + cⱼ`.
"""
pair_rounding(c::AbstractVector) = c .+ transpose(c)

"""
    cut_rounding(X, r) -> Matrix

`X` with every entry `abs(Xᵢⱼ) <= rᵢⱼ` (its rounding error, [`pair_rounding`](@ref))
set to zero, as [`divdiff`](@ref) treats a quotient within its rounding error. `NaN` is
never cut.
"""
cut_rounding(X::AbstractMatrix, r::AbstractMatrix) =
    ifelse.(abs.(X) .<= r, zero(eltype(X)), X)

# cut_rounding(X, pair_rounding(c)) in X's own memory, without the matrix of bounds
# (for a pullback's own new X: the svd and eigh pullbacks).
_cut_pairs!(X, c) = (X .= ifelse.(abs.(X) .<= c .+ transpose(c), zero(eltype(X)), X))

# X - Xᴴ in X's own memory (square X; a pullback's own product UᴴΔU, not differentiated).
function _skew!(X::AbstractMatrix)
    n = LinearAlgebra.checksquare(X)
    @inbounds for j in 1:n
        for i in 1:(j - 1)
            a = X[i, j] - conj(X[j, i])
            X[i, j], X[j, i] = a, -conj(a)
        end
        X[j, j] -= conj(X[j, j])
    end
    return X
end

# The cut changes a result only where a gap is small: entry (i, j) of the middle matrix
# by at most rᵢⱼ / (2 gap) <= eps (m + n + 4) g / gap (g the largest column norm of the
# cotangents), against its natural scale g / maximum(S). Where a gap is at least
# (m + n + 4) eps^(1/4) maximum(S) that is below eps^(3/4) relative, the package's
# resolution, so the pullbacks cut only where some gap is below that window: the
# differences (all of them, if an adjacent one is) and, for singular values, the sums
# sᵢ + sⱼ in the trailing block where 2 sᵢ is below it (as pyspectral's plain pullbacks).

"""
    rounding_cut_window(x, inner; descending) -> (differences, tail)

Where the rounding cut can matter for the sorted spectrum `x`, the window being
`(inner + 4) eps^(1/4) maximum(abs, x)` (`inner`: `m + n` for svd, `n` for eigh):
`differences`, whether some adjacent gap is below it (the cut of `Jₐ + Kₐ`, `Kₐ`), and,
for singular values (`descending = true`), `tail`, the first index `i` of the trailing
block where `2 x[i]` is below it (the cut of `Jₐ - Kₐ`; `length(x) + 1`: none; `1` for
an unsorted `x`). `NaN` takes every cut. Same rule as `gap_checks` in
pyspectral/common/safemethods.py.
"""
function rounding_cut_window(x::AbstractVector, inner::Integer; descending::Bool)
    k = length(x)
    k == 0 && return (false, 1)
    any(isnan, x) && return (true, 1)
    y = descending ? reverse(x) : x  # ascending
    w = (inner + 4) * eps(real(float(eltype(x))))^(1 / 4) * max(abs(y[1]), abs(y[end]))
    differences = !all(i -> y[i+1] - y[i] >= w, 1:k-1)
    descending || return (differences, k + 1)
    issorted(y) || return (differences, 1)
    return (differences, k - count(v -> !(2 * v >= w), y) + 1)
end

"""
    cut_trailing(X, r, tail) -> Matrix

[`cut_rounding`](@ref) of the trailing block `X[tail:end, tail:end]` alone (elsewhere
the bound is 0, which cuts only an exact 0). Not in place (differentiable).
"""
function cut_trailing(X::AbstractMatrix, r::AbstractMatrix, tail::Integer)
    inblock = (axes(X, 1) .>= tail) .& (transpose(axes(X, 2)) .>= tail)
    return cut_rounding(X, r .* inblock)
end

"""
    with_infinite_weights(linear, tol, weights...)

`linear(weights...)` for a function `linear` that is linear in each weight array, without
the NaN of `0 * Inf` where some weights are infinite.

A divided difference is infinite where `f′` is (`:sqrt` at an exact zero eigenvalue or
singular value): the true gradient is then infinite in the entries that the infinite
weights reach and finite elsewhere, but the matrix products of a pullback would mix
`Inf` with zeros into NaN everywhere. So `linear` is evaluated twice: with the infinite
weights set to 0 (the finite part) and with only their signs (the direction `D` of the
infinite part). An entry is `sign(D) * Inf` where `abs(D) > tol` (the rounding level,
[`infinite_weights_tol`](@ref)), else the finite part; complex entries by real and
imaginary part. Without infinite weights `linear` runs once. Same rule as
`with_infinite_weights` in pyspectral/common/safemethods.py.
"""
function with_infinite_weights(linear, tol::Real, weights::AbstractArray...)
    any(w -> any(isinf, w), weights) || return linear(weights...)
    finite = linear(map(w -> map(x -> isinf(x) ? zero(x) : x, w), weights)...)
    direction = linear(map(w -> map(x -> isinf(x) ? sign(x) : zero(x), w), weights)...)
    return _infinite_where.(direction, finite, tol)
end

_infinite_where(d::Real, g::Real, tol) = abs(d) > tol ? copysign(oftype(g, Inf), d) : g
_infinite_where(d::Complex, g::Complex, tol) =
    complex(_infinite_where(real(d), real(g), tol), _infinite_where(imag(d), imag(g), tol))

"""
    infinite_weights_tol(ΔY) -> Real

The rounding level below which [`with_infinite_weights`](@ref) counts an entry of the
infinite part's direction as zero: `eps^(3/4) * maximum(abs, ΔY)` of the incoming
cotangent (`0` if it is empty).
"""
function infinite_weights_tol(ΔY::AbstractArray)
    isempty(ΔY) && return 0.0
    return eps(real(float(eltype(ΔY))))^(3 / 4) * maximum(abs, ΔY)
end
