# Top-k decompositions without a full one: a randomized range finder (Halko,
# Martinsson, Tropp 2011, Alg. 4.4) with products by A and Aᴴ only.

_orth(X) = Matrix(LinearAlgebra.qr(X).Q)  # thin Q: size(X, 1) × size(X, 2)

"""
    svd_topk(A, k; oversample=10, n_iter=4) -> SVD

The top `k` singular triplets of `A` (plain `U`, `S`, `Vt`) from `k + oversample`
random probes and `n_iter` power iterations: O(mnk), as accurate as the range finder
(`(s_{k+p}/s_k)^(2n_iter+1)`), so for spectra that decay past `k`. Its rrule pulls
back through the Sylvester system of the discarded spectrum
([`svd_trunc_pullback!`](@ref)), exact without the discarded vectors.
"""
function svd_topk(A::AbstractMatrix, k::Integer; oversample::Integer=10, n_iter::Integer=4)
    m, n = size(A)
    _check_options("svd_topk"; oversample, n_iter)
    _check_topk("svd_topk", k, false, min(m, n))
    _check_finite("svd_topk", A)
    T = _lapack_eltype(A)
    p = min(k + oversample, m, n)
    Q = _orth(A * Random.randn(Random.Xoshiro(0), T, n, p))  # seeded: reproducible
    for _ in 1:n_iter
        Q = _orth(A * _orth(A' * Q))
    end
    F = LinearAlgebra.svd!(Matrix{T}(Q' * A))
    return SVD(Q * F.U[:, 1:k], F.S[1:k], F.Vt[1:k, :])
end

"""
    eigh_topk(A, k; uplo=:L, oversample=10, n_iter=4) -> Eigen

The `k` largest eigenpairs (ascending) of `Hermitian(A, uplo)`, by subspace iteration
and a Rayleigh–Ritz step; for matrices whose largest eigenvalues are also the largest
in magnitude (e.g. positive semidefinite). Warns when the Ritz pairs have not
converged. Products use `Hermitian(A, uplo)`, so only that triangle is read.
"""
function eigh_topk(A::AbstractMatrix, k::Integer; uplo::Symbol=:L, oversample::Integer=10,
                   n_iter::Integer=4)
    _check_square("eigh_topk", A)
    uplo = _check_uplo("eigh_topk", uplo)
    _check_options("eigh_topk"; oversample, n_iter)
    n = size(A, 1)
    _check_topk("eigh_topk", k, false, n)
    T = _lapack_eltype(A)
    H = Hermitian(A, uplo)
    p = min(k + oversample, n)
    Q = _orth(H * Random.randn(Random.Xoshiro(0), T, n, p))
    for _ in 1:2n_iter
        Q = _orth(H * Q)
    end
    Tm = Q' * (H * Q)
    E = LinearAlgebra.eigen!(Hermitian((Tm + Tm') / 2))
    λ, V = E.values[p-k+1:p], Q * E.vectors[:, p-k+1:p]
    residual = maximum(abs, H * V - V .* transpose(λ))
    scale = max(maximum(abs, λ), floatmin(real(T)))
    residual > sqrt(eps(real(T))) * scale &&
        @warn "eigh_topk: the Ritz pairs have not converged (residual " *
              "$(round(residual / scale; sigdigits=2)) relative); the k largest eigenvalues " *
              "must be the largest in magnitude and separated from the rest. Raise n_iter."
    return Eigen(λ, V)
end
