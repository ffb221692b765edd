# A few eigenpairs of a square non-Hermitian matrix or linear map by KrylovKit's
# eigsolve (Krylov-Schur), in complex arithmetic; pyspectral/forward/eig_topk.py holds a
# block Krylov-Schur in torch with the same ordering, tie extension and tolerance.

const EIG_WHICH = (:LM, :SM, :LR, :SR, :LI, :SI)

# The quantity `which` orders by, largest first (ARPACK's and KrylovKit's meaning).
function _eig_key(λ::Number, which::Symbol)
    which === :LM && return abs(λ)
    which === :SM && return -abs(λ)
    which === :LR && return real(λ)
    which === :SR && return -real(λ)
    which === :LI && return imag(λ)
    return -imag(λ)
end

_eig_sorter(which::Symbol) =
    which === :SM ? KrylovKit.EigSorter(abs; rev=false) : which

"""
    eig_topk(A, k, which=:LM; x0=nothing, tol=nothing, krylovdim=nothing, maxiter=300,
             degeneracy_atol=nothing, gauge=:warn) -> (λ, V)

The `k'` eigenpairs `A v = λ v` of a square `A` (a matrix, or a function `v -> A v` with
a start vector `x0` of length `n`) that come first by `which` (`:LM`, `:SM`, `:LR`,
`:SR`, `:LI`, `:SI`), ordered by it: `λ` complex, `V` (`n × k'`) with unit-norm columns.
`k' ≥ k`: `k` is extended while the next eigenvalue ties with the `k`-th in the ordering
to `degeneracy_atol` (default `max|λ| max(eps^(3/4), 100 tol)`: a conjugate pair, a
modulus tie, a repeated eigenvalue), so no cluster is cut. A matrix with at most
`DENSE_EIG_TOPK` rows is decomposed densely (`eigen`; a single start vector's Krylov
space holds one vector of each eigenspace); otherwise `KrylovKit.eigsolve` (Arnoldi,
`tol` default `eps^(3/4)` times the largest modulus found), and an unconverged pair warns.

The rrule (`src/pullbacks/eig_topk.jl`) is exact for losses that see the eigenvectors
through complete clusters and the eigenvalues through symmetric functions of each;
`gauge` (`:warn`, `:raise`, `:ignore`) is its policy where a cotangent sees a basis or a
phase inside a cluster, as `eig`'s.
"""
function eig_topk(A, k::Integer, which::Symbol=:LM; x0=nothing, tol=nothing,
                  krylovdim=nothing, maxiter::Integer=300, degeneracy_atol=nothing,
                  gauge=:warn)
    _checks_gauge(gauge)  # throws on an unknown policy name
    which in EIG_WHICH || throw(ArgumentError("eig_topk: which must be one of " *
                                              "$(EIG_WHICH), got $(repr(which))"))
    if A isa AbstractMatrix
        _check_square("eig_topk", A)
        _check_finite("eig_topk", A)
    end
    n = A isa AbstractMatrix ? size(A, 1) : length(x0)
    1 <= k <= n || throw(ArgumentError("eig_topk: k must be in 1:$n, got $k"))
    T = complex(float(A isa AbstractMatrix ? eltype(A) : eltype(x0)))
    rtol = tol === nothing ? eps(real(T))^(3 / 4) : real(T)(tol)
    if A isa AbstractMatrix && n <= DENSE_EIG_TOPK
        E = LinearAlgebra.eigen(Matrix{T}(A))
        λs, Vs = E.values, E.vectors
    else
        f = A isa AbstractMatrix ? (v -> A * v) : A
        start = x0 === nothing ? Vector{T}(randn(Random.Xoshiro(0), real(T), n)) :
                Vector{T}(x0)
        howmany = min(n, k + 2)
        dim = min(n, krylovdim === nothing ? max(30, 2k + 2) : krylovdim)
        λs, vs, info = KrylovKit.eigsolve(f, start, howmany, _eig_sorter(which);
                                          tol=rtol * _eig_scale(f, start), krylovdim=dim,
                                          maxiter, verbosity=0)
        Vs = reduce(hcat, vs)
        if info.converged < min(k, length(λs))
            @warn "eig_topk: not converged after $(info.numiter) restarts " *
                  "($(info.numops) products): residual $(maximum(info.normres)). " *
                  "Raise maxiter or krylovdim; :SM and interior targets need a " *
                  "shift-invert map." maxlog = 1
        end
    end
    order = sortperm(_eig_key.(λs, which); rev=true)
    λs, Vs = λs[order], Vs[:, order]
    scale = maximum(abs, λs)
    tie = degeneracy_atol === nothing ?
          scale * max(eps(real(T))^(3 / 4), 100 * rtol) : degeneracy_atol
    kk = _eig_extend(λs, k, which, tie)
    V = Vs[:, 1:kk]
    for j in axes(V, 2)
        V[:, j] ./= norm(view(V, :, j))
    end
    return λs[1:kk], V
end

# Matrices up to this size are decomposed densely by eig_topk.
const DENSE_EIG_TOPK = 64

# The largest modulus the map shows on a few power steps: the scale of the tolerance.
function _eig_scale(f, start)
    v = start / norm(start)
    s = zero(real(eltype(v)))
    for _ in 1:3
        w = f(v)
        s = norm(w)
        s == 0 && return one(s)
        v = w / s
    end
    return s
end

function _eig_extend(λ, k, which, tie)
    key = _eig_key.(λ, which)
    kk = k
    while kk < length(λ) &&
              (abs(λ[kk + 1] - λ[kk]) <= tie || abs(key[kk] - key[kk + 1]) <= tie)
        kk += 1
    end
    return kk
end
