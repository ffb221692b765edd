# Polar pullback and pushforward: svd_function's (:polar, W = U Vᴴ) composed with the
# products that make P (pyspectral/polar.py composes the same operations).

# The Hermitian part of a cotangent of P (P is Hermitian: only that part acts).
_hermitian_part(::Nothing) = nothing
_hermitian_part(X) = (X + X') / 2

"""
    polar_pullback!(ΔA, W, P, U, S, Vᴴ, ΔW, ΔP; side=:right, degeneracy_atol=nothing)
        -> ΔA

Add to `ΔA` the gradient of [`polar`](@ref)'s `(W, P)` given their cotangents (either
may be `nothing`) and the SVD `A = U Diagonal(S) Vᴴ` they come from. With
`H = (ΔP + ΔPᴴ)/2`: on the right (`P = Wᴴ A`) `ΔA += W H` and `W`'s cotangent gains
`A H`; on the left (`P = A Wᴴ`) `ΔA += H W` and it gains `H A`; then the exact
[`svd_function_pullback!`](@ref) of `W = U Vᴴ` (`:polar`).
"""
function polar_pullback!(ΔA::AbstractMatrix, W::AbstractMatrix, P::AbstractMatrix,
                         U::AbstractMatrix, S::AbstractVector, Vᴴ::AbstractMatrix, ΔW, ΔP;
                         side::Symbol=:right, degeneracy_atol=nothing)
    _check_side(side)
    H = _hermitian_part(iszerotangent(ΔP) ? nothing : ΔP)
    ΔWt = iszerotangent(ΔW) ? nothing : ΔW
    if H !== nothing
        A = (U .* transpose(S)) * Vᴴ
        if side === :right
            ΔA .+= W * H
            ΔWt = _plus(ΔWt, A * H)
        else
            ΔA .+= H * W
            ΔWt = _plus(ΔWt, H * A)
        end
    end
    ΔWt === nothing || svd_function_pullback!(ΔA, U, S, Vᴴ, :polar, ΔWt; degeneracy_atol)
    return ΔA
end

"""
    polar_pushforward(W, P, U, S, Vᴴ, ΔA; side=:right, degeneracy_atol=nothing)
        -> (ΔW, ΔP)

Tangents of [`polar`](@ref) along `ΔA`: `ΔW` by [`svd_function_pushforward`](@ref)
(`:polar`), `ΔP` the Hermitian part of `ΔWᴴ A + Wᴴ ΔA` (right) or `ΔA Wᴴ + A ΔWᴴ`
(left): the transpose of [`polar_pullback!`](@ref).
"""
function polar_pushforward(W::AbstractMatrix, P::AbstractMatrix, U::AbstractMatrix,
                           S::AbstractVector, Vᴴ::AbstractMatrix, ΔA::AbstractMatrix;
                           side::Symbol=:right, degeneracy_atol=nothing)
    _check_side(side)
    ΔW = svd_function_pushforward(U, S, Vᴴ, :polar, ΔA; degeneracy_atol)
    A = (U .* transpose(S)) * Vᴴ
    X = side === :right ? ΔW' * A + W' * ΔA : ΔA * W' + A * ΔW'
    return ΔW, (X + X') / 2
end
