# Forward QR and LQ: plain matrices (LAPACK's Householder QR, its R with a real
# diagonal), optionally in the positive gauge. LQ is the QR of Aᴴ, transposed.
# `PySpectral.qr` / `PySpectral.lq` are functions of their own, not methods of
# `LinearAlgebra.qr` / `lq` (no type piracy): call them qualified.

"""
    positive_gauge(Q, R) -> (Q D, Dᴴ R)

`D = Diagonal(sign.(diag(R)))` (1 where `Rᵢᵢ = 0`): the QR with `diag(R) >= 0`, unique at
full rank. A complete `Q`'s columns past `min(m, n)` are left as they are.
"""
function positive_gauge(Q::AbstractMatrix, R::AbstractMatrix)
    p = min(size(R)...)
    s = [iszero(R[i, i]) ? one(eltype(R)) : sign(R[i, i]) for i in 1:p]
    Q = copy(Q)
    R = copy(R)
    for i in 1:p
        Q[:, i] .*= s[i]
        R[i, :] .*= conj(s[i])
    end
    return Q, R
end

"""
    qr(A; full=false, positive=false, rank_atol=nothing, gauge=:warn, gauge_atol=nothing)
        -> (Q, R)

QR decomposition `A = Q R` of an m×n matrix as plain matrices: `Q` m×k with orthonormal
columns and `R` k×n upper triangular with a real diagonal, `k = min(m, n)` (`full=true`:
`k = m`, the columns past `n` a basis of the complement of `A`'s range).
`positive=true` gives `diag(R) >= 0`, which makes `Q, R` unique at full rank (the gauge
of tensor-network codes and MatrixAlgebraKit.jl). The rule ([`qr_pullback!`](@ref)) is
exact at full rank, for a complete `Q` for losses of the complement's span, and at rank
`r` for losses of `Q[:, 1:r]` and `R[1:r, :]` (`r`: the leading `|Rᵢᵢ| > rank_atol`,
default `eps^(3/4) maximum(abs, R)`); `gauge`, `gauge_atol` say what happens when a
loss reaches what `A` does not determine. Not `LinearAlgebra.qr`: call it qualified.
"""
function qr(A::AbstractMatrix; full::Bool=false, positive::Bool=false, rank_atol=nothing,
            gauge=:warn, gauge_atol=nothing)
    _check_options("qr"; gauge, gauge_atol)
    _check_tolerance("qr", "rank_atol", rank_atol)
    _check_finite("qr", A)
    T = _lapack_eltype(A)
    m, n = size(A)
    F = LinearAlgebra.qr(Matrix{T}(A))
    k = full ? m : min(m, n)
    Q = LinearAlgebra.lmul!(F.Q, Matrix{T}(I, m, k))
    R = zeros(T, k, n)
    R[1:min(m, n), :] .= F.R
    return positive ? positive_gauge(Q, R) : (Q, R)
end

"""
    lq(A; full=false, positive=false, rank_atol=nothing, gauge=:warn, gauge_atol=nothing)
        -> (L, Q)

LQ decomposition `A = L Q`: `L` m×k lower triangular, `Q` k×n with orthonormal rows,
`k = min(m, n)` (`full=true`: `k = n`), the QR of `Aᴴ` transposed (`positive=true`:
`diag(L) >= 0`). Its rule is [`lq_pullback!`](@ref). Not `LinearAlgebra.lq`: call it
qualified.
"""
function lq(A::AbstractMatrix; full::Bool=false, positive::Bool=false, rank_atol=nothing,
            gauge=:warn, gauge_atol=nothing)
    Q, R = qr(A'; full, positive, rank_atol, gauge, gauge_atol)
    return Matrix(R'), Matrix(Q')
end
