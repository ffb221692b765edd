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
`≈ 1/x` for `|x| ≫ η` and `0` at `x = 0`.
"""
function inv_lorentz(x::Real, η::Real)
    η = oftype(float(x), η)
    return x / (x * x + η * η)
end

"""
    gap_inverse(x, tol, broadening)

The inverse used for every gap `sⱼ - sᵢ`, `sⱼ + sᵢ` and `sᵢ`: [`inv_safe`](@ref)
`(x, tol)` when `broadening === nothing` (the default), else
[`inv_lorentz`](@ref)`(x, broadening)`.
"""
gap_inverse(x::Real, tol::Real, ::Nothing) = inv_safe(x, tol)
gap_inverse(x::Real, tol::Real, broadening::Real) = inv_lorentz(x, broadening)

"""
    divdiff(a, b, fa, fb, da, db)

Stable divided difference `(fa - fb) / (a - b)`, tending to `(da + db) / 2` as
`a → b` (`fa = f(a)`, `da = f′(a)`). With `d = a - b` and `m = max(|a|, |b|)` the
quotient is used iff `d ≠ 0` and `|fa - fb| d² ≥ eps max(|fa|, |fb|) m²`, i.e. when its
rounding error `eps max|f| / |fa - fb|` is below the error `(d/m)²` of the derivative
average.
"""
function divdiff(a, b, fa, fb, da, db)
    d = a - b
    δf = fa - fb
    m = max(abs(a), abs(b))
    fmax = max(abs(fa), abs(fb))
    if d != 0 && abs(δf) * d * d >= eps(real(float(typeof(d)))) * fmax * m * m
        return δf / d
    end
    return (da + db) / 2
end
