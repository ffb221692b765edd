# Matrix functions of a diagonalizable (non-Hermitian) matrix, Y = V f(Λ) V⁻¹ (the
# forward of pyspectral.eig_function); the pullback and pushforward are in
# src/pullbacks/eigfun.jl.

const EIG_FUNCTIONS = ":exp, :log, :sqrt, :invsqrt, (:pow, p), (f, f′)"

"""
    eig_function(A, f) -> Matrix

`Y = V f(Λ) V⁻¹` for a square, diagonalizable `A = V Diagonal(λ) V⁻¹` ([`eig`](@ref)),
with `f` one of $EIG_FUNCTIONS (principal branches; see [`eig_function_values`](@ref)).
A real `A` gives a real `Y`: the named functions commute with conjugation off their
cut, so the imaginary part of `V f(Λ) V⁻¹` is rounding; for a user pair `(f, f′)` the
real part is taken after checking `f(conj λ) = conj f(λ)` on the spectrum. A
(numerically) defective `A` (eigenvector condition number `>= eps^(-1/2)`) throws a
`DomainError`: there `V f(Λ) V⁻¹` is inaccurate and no eigenbasis derivative exists
(`exp(A)` for exp, `A^k` for integer powers compute it without `eig`). The rule
([`eig_function_pullback!`](@ref)) is exact at every diagonalizable `A`, repeated
eigenvalues included.
"""
function eig_function(A::AbstractMatrix, f)
    E = eig(A)
    Vinv = check_diagonalizable(E.values, E.vectors; op=:eig_function, pairs=false)
    return eig_function_apply(E.values, E.vectors, Vinv, f; real=!(eltype(A) <: Complex))
end

"""
    eig_function_apply(λ, V, Vinv, f; real=false) -> Matrix

`V f(Λ) V⁻¹` from an eigendecomposition (`Vinv = V⁻¹`), for callers that keep it for
the pullback; `real`: the real part, for a real `A` (see [`eig_function`](@ref)).
"""
function eig_function_apply(λ::AbstractVector, V::AbstractMatrix, Vinv::AbstractMatrix, f;
                            real::Bool=false)
    fλ, _ = eig_function_values(f, λ)
    real && _is_user_pair(_fspec(f)) && _check_real_values(f, λ, fλ)
    Y = (V .* transpose(fλ)) * Vinv
    return real ? Base.real(Y) : Y
end

# For a real A and a user f: f must commute with conjugation on the spectrum (real
# eigenvalues of a real A have an exact +0 imaginary part; their conjugates too).
function _check_real_values(f, λ, fλ)
    λc = complex.(Base.real(λ), -imag(λ) .+ 0.0)
    fc, _ = eig_function_values(f, λc)
    scale = maximum(abs, fλ; init=zero(Base.real(eltype(fλ))))
    ϵ = eps(Base.real(eltype(fλ)))
    worst = maximum(abs.(fc .- conj.(fλ)); init=zero(scale))
    worst <= 64ϵ * max(scale, maximum(abs, fc; init=zero(scale))) && return nothing
    throw(ArgumentError(string(
        "eig_function: f(A) of this real A is not real: the user f does not commute ",
        "with conjugation on its spectrum (f(conj l) != conj f(l), max difference ",
        round(worst; sigdigits=3), "). Pass A as a complex matrix for the complex f(A)")))
end
