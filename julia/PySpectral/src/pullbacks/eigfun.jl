# The exact pullback and pushforward of a matrix function of a diagonalizable matrix,
# Y = V f(Λ) V⁻¹ (the math of pyspectral/pullbacks/eigfun.py; docs/math.md, "Matrix
# functions of a diagonalizable matrix").
#
# For A = V Diagonal(λ) V⁻¹ and f analytic at the eigenvalues, the Fréchet derivative
# is, in the eigenbasis, L_f(A)[E] = V (F ∘ (V⁻¹ E V)) V⁻¹ with Fᵢⱼ = f[λᵢ, λⱼ] the
# divided differences on the complex nodes (f′(λᵢ) where λᵢ = λⱼ; any eigenbasis of a
# repeated eigenvalue gives the same map). Its adjoint under ⟨X, Y⟩ = Re tr(Xᴴ Y):
#     L_f(A)*[G] = V⁻ᴴ (conj(F) ∘ (Vᴴ G V⁻ᴴ)) Vᴴ.
# A real A with a real Y takes the real part: for a real tangent L_f(A) is real, and so
# is its adjoint on a real cotangent.

"""
    eig_function_values(f, λ) -> (fλ, f′λ)

Values and derivatives of `f` at the complex eigenvalues `λ`: `:exp`; `:log`, `:sqrt`,
`:invsqrt` and non-integer `(:pow, p)` on their principal branches, which need every
eigenvalue off the closed negative real axis (within `eps^(3/4) maximum(abs, λ)`;
`DomainError` otherwise: `f` is discontinuous or not differentiable there); integer
powers (single-valued; negative ones need `λ ≠ 0`); a user pair `(f, f′)` of analytic
functions, applied elementwise.
"""
function eig_function_values(f, λ::AbstractVector{<:Complex})
    f = _fspec(f)
    f === :exp && return (exp.(λ), exp.(λ))
    if f === :log
        _off_cut(":log", λ)
        return (log.(λ), inv.(λ))
    end
    f === :sqrt && return eig_function_values((:pow, 1 // 2), λ)
    f === :invsqrt && return eig_function_values((:pow, -1 // 2), λ)
    _is_user_pair(f) && return (f[1].(λ), f[2].(λ))
    named = _named(f, (:pow,))
    named === nothing && throw(ArgumentError(
        "eig_function: f must be one of $EIG_FUNCTIONS, got $(repr(f))"))
    p = named[2]
    isfinite(p) || throw(ArgumentError(
        "eig_function: (:pow, p) needs a finite real number p, got $p"))
    if isinteger(p)
        q = Int(p)
        q == 0 && return (ones(eltype(λ), length(λ)), zeros(eltype(λ), length(λ)))
        q < 0 && _nonzero_spectrum(p, λ)
        return (λ .^ q, q .* λ .^ (q - 1))
    end
    _off_cut("(:pow, $p)", λ)
    r = Base.real(eltype(λ))(p)
    return (λ .^ r, r .* λ .^ (r - 1))
end

function _off_cut(name, λ)
    isempty(λ) && return nothing
    tol = _eps34(eltype(λ)) * _maxabs(λ)
    i = findfirst(x -> abs(imag(x)) <= tol && Base.real(x) <= tol, λ)
    i === nothing && return nothing
    throw(DomainError(λ[i], string(
        "eig_function: $name (principal branch) needs the eigenvalues off the closed ",
        "negative real axis, where it is discontinuous or not differentiable, but ",
        "eigenvalue $i (1-based) is ", λ[i], ". Shift or rotate the spectrum (A + c*I, ",
        "c*A) or use a function analytic there (exp, an integer power)")))
end

function _nonzero_spectrum(p, λ)
    isempty(λ) && return nothing
    i = findfirst(x -> abs(x) <= _eps34(eltype(λ)) * _maxabs(λ), λ)
    i === nothing && return nothing
    throw(DomainError(λ[i], string(
        "eig_function: (:pow, $p) needs an invertible A, but eigenvalue $i (1-based) is ",
        "(within rounding of) 0. Shift the spectrum (A + c*I) or use a non-negative power")))
end

# Fᵢⱼ = f[λᵢ, λⱼ] on complex nodes.
function _eig_divided_differences(λ, f)
    fλ, dλ = eig_function_values(f, λ)
    return divdiff.(λ, transpose(λ), fλ, transpose(fλ), dλ, transpose(dλ))
end

"""
    eig_function_pullback!(ΔA, λ, V, Vinv, f, ΔY) -> ΔA

Add to `ΔA` the gradient of `Y = V f(Λ) V⁻¹` ([`eig_function`](@ref); `Vinv = V⁻¹`):
`V⁻ᴴ (conj(F) ∘ (Vᴴ ΔY V⁻ᴴ)) Vᴴ` with `Fᵢⱼ = divdiff(λᵢ, λⱼ, fᵢ, fⱼ, f′ᵢ, f′ⱼ)`, exact
at every diagonalizable `A`, repeated eigenvalues included; the real part for a real
`ΔA`.
"""
function eig_function_pullback!(ΔA::AbstractMatrix, λ::AbstractVector, V::AbstractMatrix,
                                Vinv::AbstractMatrix, f, ΔY)
    iszerotangent(ΔY) && return ΔA
    F = _eig_divided_differences(λ, f)
    G = Vinv' * (conj.(F) .* (V' * ΔY * Vinv')) * V'
    ΔA .+= eltype(ΔA) <: Complex ? G : Base.real(G)
    return ΔA
end

"""
    eig_function_pushforward(λ, V, Vinv, f, ΔA; real=false) -> ΔY

Tangent of `Y = V f(Λ) V⁻¹` along `ΔA`: `V (F ∘ (V⁻¹ ΔA V)) V⁻¹`, the transpose of
[`eig_function_pullback!`](@ref); `real`: the real part, for a real `A`.
"""
function eig_function_pushforward(λ::AbstractVector, V::AbstractMatrix,
                                  Vinv::AbstractMatrix, f, ΔA::AbstractMatrix;
                                  real::Bool=false)
    F = _eig_divided_differences(λ, f)
    ΔY = V * (F .* (Vinv * ΔA * V)) * Vinv
    return real ? Base.real(ΔY) : ΔY
end
