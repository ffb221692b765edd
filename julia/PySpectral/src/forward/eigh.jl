# Forward Hermitian eigendecomposition. Like torch.linalg.eigh and LAPACK, only the
# `uplo` triangle of `A` is read (`Hermitian(A, uplo)`); the imaginary parts of the
# diagonal are ignored, and only what is read must be finite. `uplo` is `:L` or `:U`,
# in either case (`:l`, `:u`), as torch.linalg.eigh's UPLO. The pullbacks return the
# gradient w.r.t. the entries read.

function _check_square(op, A)
    size(A, 1) == size(A, 2) && return nothing
    throw(ArgumentError("$op: A must be square, got size $(size(A))"))
end

# `uplo` as `:L` or `:U` (what `Hermitian` takes), from either case.
function _check_uplo(op, uplo)
    (uplo === :L || uplo === :l) && return :L
    (uplo === :U || uplo === :u) && return :U
    throw(ArgumentError("$op: uplo must be :L or :U (either case), got $(repr(uplo))"))
end

# Only what LAPACK reads must be finite: the strict `uplo` triangle and the real part of
# the diagonal (as torch.linalg.eigh, which ignores NaN elsewhere).
function _check_finite_triangle(op, A, uplo)
    n = size(A, 1)
    finite_diagonal = all(j -> isfinite(real(A[j, j])), 1:n)
    finite_triangle = all(isfinite(A[i, j]) for j in 1:n
                          for i in (uplo === :L ? (j+1:n) : (1:j-1)))
    finite_diagonal && finite_triangle && return nothing
    throw(ArgumentError("$op: A contains NaN or Inf entries in the uplo=$(repr(uplo)) " *
                        "triangle it reads (size $(size(A))); the decomposition of such " *
                        "a matrix is undefined"))
end

function _require_hermitian(op, A, tol)
    err = isempty(A) ? false : maximum(abs, A - A')
    tol = tol === nothing ? default_hermitian_tol(A) : tol
    err <= tol && return nothing
    throw(ArgumentError("$op: A is not Hermitian: max|A - Aᴴ| = $(round(err; sigdigits=3)) " *
                        "> hermitian_tol $(round(tol; sigdigits=3)). Symmetrise it, e.g. " *
                        "(A + A') / 2, or pass check_hermitian=false to read only the " *
                        "uplo triangle"))
end

# The Hermitian matrix LAPACK sees: a private copy (LAPACK overwrites it).
function _hermitian_copy(op, A, uplo, check_hermitian, hermitian_tol)
    _check_square(op, A)
    uplo = _check_uplo(op, uplo)
    if check_hermitian
        _check_finite(op, A)  # the check reads both triangles
        _require_hermitian(op, A, hermitian_tol)
    else
        _check_finite_triangle(op, A, uplo)
    end
    return _read_triangle(A, uplo, _lapack_eltype(A))
end

"""
    _read_triangle(A, uplo, T) -> Hermitian{T,Matrix{T}}

A private dense copy of exactly what is read from `A`: the `uplo` triangle, the real part
of the diagonal, zeros in the other triangle. LAPACK is handed nothing it may reject:
`LinearAlgebra.LAPACK.syevd!` first checks with `chkuplofinite` that the `uplo` triangle
it is given, diagonal included, is finite, so a copy of `A` itself would make it throw on
a NaN imaginary part of the diagonal, which LAPACK never reads.
"""
function _read_triangle(A::AbstractMatrix, uplo::Symbol, ::Type{T}) where {T}
    n = size(A, 1)
    H = zeros(T, n, n)
    for j in 1:n
        H[j, j] = real(A[j, j])
        for i in (uplo === :L ? (j+1:n) : (1:j-1))
            H[i, j] = A[i, j]
        end
    end
    return Hermitian(H, uplo)
end

"""
    eigh(A; uplo=:L, check_hermitian=false, hermitian_tol=nothing,
         degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
         gauge_atol=nothing) -> LinearAlgebra.Eigen

Eigendecomposition `A = V Diagonal(λ) Vᴴ` of a Hermitian (real symmetric) matrix,
eigenvalues real and ascending, `E.values::Vector`, `E.vectors::Matrix`. Only the
`uplo` triangle is read (`:L` or `:U`, either case, as torch.linalg.eigh's `UPLO`),
and only it must be finite (of its diagonal, the real part), unless
`check_hermitian=true`, which reads both and first throws if
`max|A - Aᴴ| > hermitian_tol` (default [`default_hermitian_tol`](@ref)).

The pullback is the true gradient w.r.t. the entries read: with `G` the Hermitian
gradient, `2G` below (above) the diagonal, `real(G)` on it, zero on the other triangle
(what ChainRules gives for `eigen(Hermitian(A, uplo))` of a plain matrix). The
other keywords configure it as for [`svd`](@ref); gradients are exact for losses that
see eigenvectors through complete degenerate clusters; for `V f(Λ) Vᴴ` use
[`matrix_function`](@ref).

Each eigenvector's sign (complex: phase) is LAPACK's (`syevd`, as torch.linalg.eigh),
which can flip under perturbations at rounding level; only losses invariant under it have
a derivative, and finite differences of the raw eigenvectors are meaningless.
"""
function eigh(A::AbstractMatrix; uplo::Symbol=:L, check_hermitian::Bool=false,
              hermitian_tol=nothing, degeneracy_atol=nothing, broadening=nothing,
              gauge=:warn, gauge_atol=nothing)
    _check_options("eigh"; degeneracy_atol, broadening, gauge, gauge_atol, hermitian_tol)
    H = _hermitian_copy("eigh", A, uplo, check_hermitian, hermitian_tol)
    λ, V = LAPACK.syevd!('V', H.uplo, H.data)
    return Eigen(λ, V)
end

# LAPACK's divide and conquer (syevd / heevd, torch.linalg.eigh's driver) rather than the
# MRRR (syevr) of `eigen!(::Hermitian)`: measured faster from 8×8 (6 against 10 µs, the
# batches of small matrices) to 1024² (182 against 232 ms) with Julia's OpenBLAS.

"""
    eigvalsh(A; uplo=:L, check_hermitian=false, hermitian_tol=nothing) -> Vector

Eigenvalues of the Hermitian matrix read from the `uplo` triangle of `A`, ascending.
The pullback `V Diagonal(Δλ) Vᴴ` (folded onto the triangle) is exact for symmetric
functions of the eigenvalues at every spectrum.
"""
function eigvalsh(A::AbstractMatrix; uplo::Symbol=:L, check_hermitian::Bool=false,
                  hermitian_tol=nothing)
    _check_options("eigvalsh"; hermitian_tol)
    H = _hermitian_copy("eigvalsh", A, uplo, check_hermitian, hermitian_tol)
    return LAPACK.syevd!('N', H.uplo, H.data)  # as eigh, without the vectors
end

"""
    matrix_function(A, f; uplo=:L, check_hermitian=false, hermitian_tol=nothing,
                    degeneracy_atol=nothing) -> Matrix

Spectral function `Y = V f(Λ) Vᴴ` of the Hermitian matrix read from the `uplo`
triangle, with the exact (Daleckii–Krein) pullback at every spectrum. `f` is `:sqrt`,
`:invsqrt`, `:log`, `:exp`, `(:pow, p)`, a pair `(f, f′)` of real scalar functions, or
their values on the eigenvalues of `A`, as a [`SpectralValues`](@ref).
`:log`, `:invsqrt` and negative powers need a positive definite input, `:sqrt` and
fractional powers a semidefinite one (eigenvalues down to `-degeneracy_atol` are
clamped to 0); outside the domain a `DomainError` names the eigenvalue (1-based,
ascending) and its value.
"""
function matrix_function(A::AbstractMatrix, f; uplo::Symbol=:L, check_hermitian::Bool=false,
                         hermitian_tol=nothing, degeneracy_atol=nothing)
    _check_options("matrix_function"; degeneracy_atol, hermitian_tol)
    E = eigh(A; uplo, check_hermitian, hermitian_tol)
    return matrix_function_apply(E, f; degeneracy_atol)
end

"""
    matrix_function_apply(E::Eigen, f; degeneracy_atol=nothing) -> Matrix

`V f(Λ) Vᴴ` from a computed decomposition `E`; the forward of
[`matrix_function`](@ref) for callers that keep `E` for the pullback.
"""
function matrix_function_apply(E::Eigen, f; degeneracy_atol=nothing)
    fλ, _ = matrix_function_values(f, E.values; degeneracy_atol)
    V = E.vectors
    return (V .* transpose(fλ)) * V'
end

"""
    teigh(A; uplo=:L, largest=true, k=nothing, atol=nothing, rtol=nothing,
          error_atol=nothing, error_rtol=nothing, multiplets=:cut, min_rank=nothing,
          check_hermitian=false, hermitian_tol=nothing, degeneracy_atol=nothing,
          broadening=nothing, gauge=:warn, gauge_atol=nothing) -> (E::Eigen, ϵ)

The truncated eigendecomposition of `Hermitian(A, uplo)`, by order: the `r` eigenpairs
at the wanted end (the largest, or with `largest = false` the smallest), eigenvalues
ascending as in [`eigh`](@ref), and the truncation error `ϵ = norm(λ_discarded)` (every
discarded eigenvalue, at either end; `ϵ / norm(A)` is the relative error). The rules
([`truncation_rank`](@ref)) read the eigenvalues from the wanted end, `x = λ` descending
or `x = -λ` from the smallest: `k` at most, `xᵢ > max(atol, rtol |x₁|)`, the fewest with
`norm(λ_discarded) <= max(error_atol, error_rtol norm(λ))`, the `multiplets` policy and
the floor `min_rank`.
Both outputs are differentiable ([`teigh_pullback!`](@ref): the fixed-rank problem, with
the exact coupling to the discarded pairs and `∂ϵ/∂λᵢ = λᵢ / ϵ` on the discarded ones).
The other keywords as for [`eigh`](@ref).
"""
function teigh(A::AbstractMatrix; uplo::Symbol=:L, largest::Bool=true,
               k::Union{Nothing,Integer}=nothing, atol=nothing, rtol=nothing,
               error_atol=nothing, error_rtol=nothing, multiplets::Symbol=:cut,
               min_rank=nothing, check_hermitian::Bool=false, hermitian_tol=nothing,
               degeneracy_atol=nothing, broadening=nothing, gauge=:warn, gauge_atol=nothing)
    Eall, r = _teigh(A; uplo, largest, k, atol, rtol, error_atol, error_rtol, multiplets,
                     min_rank, check_hermitian, hermitian_tol, degeneracy_atol, broadening,
                     gauge, gauge_atol)
    return _kept_eigen(Eall, r, largest), _eigh_truncation_error(Eall.values, r, largest)
end

# The whole decomposition and the rank the rules keep (shared by teigh and its rules).
function _teigh(A; uplo, largest, k, atol, rtol, error_atol, error_rtol, multiplets,
                min_rank, check_hermitian, hermitian_tol, degeneracy_atol, broadening, gauge,
                gauge_atol)
    _check_options("teigh"; degeneracy_atol, broadening, gauge, gauge_atol, hermitian_tol)
    trunc = (; k, atol, rtol, error_atol, error_rtol, multiplets, min_rank)
    _check_truncation("teigh", size(A, 2); trunc...)
    Eall = eigh(A; uplo, check_hermitian, hermitian_tol)
    r = truncation_rank(_wanted_first(Eall.values, largest); trunc..., degeneracy_atol)
    return Eall, r
end

function _kept_eigen(E::Eigen, r, largest)
    kept = _kept_range(length(E.values), r, largest)
    return Eigen(E.values[kept], E.vectors[:, kept])
end

# norm(λ_discarded): the values at the wanted end are read first, so the discarded ones
# are the tail of the wanted-first spectrum.
_eigh_truncation_error(λ, r, largest) = truncation_error(_wanted_first(λ, largest), r)
