# Forward non-Hermitian eigendecomposition: complex eigenvalues and unit-norm
# eigenvectors in LAPACK's order (`sortby = nothing`; LinearAlgebra sorts by default),
# always complex (LinearAlgebra returns real vectors when every eigenvalue is real), as
# torch.linalg.eig returns them.

"""
    eig(A; degeneracy_atol=nothing, broadening=nothing, gauge=:warn, gauge_atol=nothing)
        -> Eigen

Eigendecomposition `A = V Diagonal(λ) V⁻¹` of a square matrix: `E.values` (complex, in
LAPACK's order) and `E.vectors` (complex, unit-norm columns). Each eigenvector is
defined up to a phase, and those of a repeated eigenvalue up to any basis of its
eigenspace. The rule ([`eig_pullback!`](@ref)) is exact at every diagonalizable `A` for
losses invariant under those choices (spectral projectors, symmetric functions of
each cluster's eigenvalues; the keywords configure it as [`eig_pullback!`](@ref)'s);
at a (numerically) defective `A` it throws a `DomainError`. `eig` is not a
LinearAlgebra name (that is `eigen`).
"""
function eig(A::AbstractMatrix; degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
             gauge_atol=nothing)
    _check_options("eig"; degeneracy_atol, broadening, gauge, gauge_atol)
    LinearAlgebra.checksquare(A)
    _check_finite("eig", A)
    T = _lapack_eltype(A)
    E = LinearAlgebra.eigen(Matrix{T}(A); sortby=nothing)
    C = complex(T)
    return Eigen(Vector{C}(E.values), Matrix{C}(E.vectors))
end

"""
    eigvals(A) -> Vector

The eigenvalues of [`eig`](@ref), complex, in LAPACK's order. Not
`LinearAlgebra.eigvals`: call it qualified.
"""
function eigvals(A::AbstractMatrix)
    LinearAlgebra.checksquare(A)
    _check_finite("eigvals", A)
    T = _lapack_eltype(A)
    return Vector{complex(T)}(LinearAlgebra.eigvals(Matrix{T}(A); sortby=nothing))
end
