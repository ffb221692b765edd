# Forward polar decomposition: W = U Vᴴ (svd_function's :polar) and the Hermitian
# positive semidefinite P built from it and A, so that one copy of the math (the
# divided differences of svd_function) serves both factors (pyspectral/polar.py).

const SIDES = (:right, :left)

function _check_side(side)
    side in SIDES && return side
    throw(ArgumentError("polar: side must be :right or :left, got $(repr(side))"))
end

# W, P and the SVD they come from, after the domain check: at a (numerically) zero
# singular value W = U Vᴴ is not unique (the singular vectors of a zero value are
# arbitrary), as svd_function(A, :polar) reports in pyspectral.
function _polar(A::AbstractMatrix, side::Symbol, degeneracy_atol)
    _check_side(side)
    _check_options("polar"; degeneracy_atol)
    F = svd(A)
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(F.S) : degeneracy_atol
    i = findfirst(<=(tol), F.S)
    i === nothing || throw(DomainError(F.S[i], string(
        "polar: A has a (numerically) zero singular value, S[", i, "] = ", F.S[i],
        " <= degeneracy_atol ", tol, ", so the unitary factor W is not unique there (the ",
        "singular vectors of a zero value are arbitrary) and not differentiable. Use a ",
        "full-rank A (e.g. A + eps * I), or svd_function(A, (:pow, 1)) / a scale where ",
        "W P itself is what the loss needs.")))
    W = F.U * F.Vt
    B = Matrix{eltype(W)}(A)
    P = side === :right ? W' * B : B * W'
    return W, (P + P') / 2, F
end

"""
    polar(A; side=:right, degeneracy_atol=nothing) -> (W, P)

Polar decomposition of an m×n matrix: `A = W P` (`side = :right`, `P` n×n) or `A = P W`
(`:left`, `P` m×m), `W = U Vᴴ` (m×n, orthonormal columns if m >= n, rows if m < n) and
`P` Hermitian positive semidefinite (`Wᴴ A` or `A Wᴴ`, made exactly Hermitian). Both
factors have exact pullbacks ([`polar_pullback!`](@ref)) at every spectrum with
nonzero singular values, repeated ones included; a (numerically) zero singular value
(`<= degeneracy_atol`, default `maximum(S) eps^(3/4)`) throws a `DomainError` (`W` is
not unique there).
"""
function polar(A::AbstractMatrix; side::Symbol=:right, degeneracy_atol=nothing)
    W, P, _ = _polar(A, side, degeneracy_atol)
    return W, P
end
