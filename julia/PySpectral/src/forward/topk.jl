# Certified top-k forward without a full decomposition: block subspace iteration with a
# Rayleigh-Ritz step per iteration, for `svd` and `eigh`, touching `A` only through
# products with a block. Same algorithm, constants, certificate and budget as
# pyspectral/forward/topk.py; change them in both places or in neither.
#
# Certificate. The Rayleigh-Ritz step on the block `Q` (`B = Qᴴ A = W S Vᴴ`, `U = Q W`)
# makes `Aᴴ U = V S` and `Uᴴ A V = S` exact, so the Ritz triplets are the exact top
# triplets of `A - R Vᴴ` with `R = A V - U S`: `‖rᵢ‖ = ‖A vᵢ - sᵢ uᵢ‖` is a backward
# error.
# A triplet is certified when `‖rᵢ‖ <= tol s₁`, `tol = eps^(3/4)` (the relative size
# below which `degeneracy_atol` already treats two singular values as equal). A call is
# certified when the kept triplets are and the cluster of `s_k` (Ritz values within
# `degeneracy_atol`) closes inside the certified block, so that the backward can treat
# the pairs that `k` cuts exactly (pullbacks/truncated.jl). `eigh` is the same with
# `T = Qᴴ A Q`.
#
# Work budget. The residual norms fall like `(s_{p+1}/sᵢ)²` per iteration, a rate
# measured from successive residuals, which also gives the condition number of the
# backward's CG, `1 / (1 - rate)`. From the third iteration on, the iteration stops as
# soon as the predicted total (iterations left plus the CG) exceeds the budget, or the
# rate shows no convergence (under `:randomized` from the `RANDOMIZED_MIN_ITERATIONS`-th
# on, and never with `n_iter`, which then alone limits the iterations). `:auto`
# iterates only where three iterations cost at most `AUTO_TRIAL` of the full path and a
# fast convergence at most `AUTO_TRY` of it, spends at most `AUTO_BUDGET` of it, and
# takes the full path when the result is not certified; `:randomized` returns what it
# has, with a warning that gives the measured residual.

# Cost model (pyspectral/forward/topk.py documents its calibration). Unit: one
# multiply-add; a product with p columns costs m n max(p, MIN_COLUMNS).
const SVD_FULL_COST = 10.0
const EIGH_FULL_COST = 5.0
const MIN_COLUMNS = 32
const BLOCK_COST = 10.0  # QR and SVD/eigh of the block: BLOCK_COST (m + n) p²
const ITERATION_OVERHEAD = 1e6
const AUTO_BUDGET = 0.5
const AUTO_TRY = 0.3
const AUTO_TRIAL = 0.05
const MIN_RATE_ITERATIONS = 3  # iterations before the measured rate may stop one
# :randomized (without n_iter): iterations before it may give up, by the measured rate
# (stalled, or predicted over its budget: the full path's cost or this many iterations,
# whichever is more)
const RANDOMIZED_MIN_ITERATIONS = 100
const AUTO_MIN_SIZE = 96       # below this size the full decomposition is faster

"""
    TopKConfig

Settings of one iterative top-k call, from [`topk_config`](@ref): `method` (`:auto` or
`:randomized`), block size `p = k + oversample` (at most `min(m, n)`), `max_iter`
(`nothing`: the work budget decides), certificate tolerance `tol`, and the backward's
CG settings `rtol`, `maxiter`.
"""
struct TopKConfig
    method::Symbol
    p::Int
    max_iter::Union{Nothing,Int}
    tol::Float64
    rtol::Float64
    maxiter::Int
end

_full_cost(op::Symbol, m, n) = (op === :svd ? SVD_FULL_COST : EIGH_FULL_COST) * m * n * min(m, n)

# One product with the block plus its share of the block's QR and SVD / eigh.
_unit(m, n, p) = float(m) * n * max(p, MIN_COLUMNS) + BLOCK_COST * (m + n) * p^2 +
                 ITERATION_OVERHEAD

function _check_method(op, method)
    method in (:auto, :full, :randomized) && return method
    throw(ArgumentError("$op: method must be :auto, :full or :randomized, got $(repr(method))"))
end

"""
    topk_config(op, m, n, T, k, method, oversample, n_iter, rtol, maxiter) -> (path, cfg)

The path of a top-`k` call of `op` (`:svd` or `:eigh`) on an `m×n` matrix of element
type `T`: `:full` or `:iterative`, and its [`TopKConfig`](@ref). `oversample = nothing`
means `max(10, k)`; `rtol = nothing` means `eps^(3/4)`. `:auto` takes the full path
outright for small matrices, blocks wider than `min(m, n) / 4`, and whenever even a
fast-converging iteration would cost more than `AUTO_TRY` of the full decomposition.
"""
function topk_config(op::Symbol, m, n, ::Type{T}, k, method, oversample, n_iter, rtol,
                     maxiter) where {T}
    kmax = min(m, n)
    extra = oversample === nothing ? max(10, k) : oversample
    p = min(k + extra, kmax)
    tol = Float64(_eps34(T))
    cfg = TopKConfig(method, p, n_iter, tol, rtol === nothing ? tol : Float64(rtol), maxiter)
    (method === :full || m * n == 0) && return :full, cfg
    if method === :auto
        unit = _unit(m, n, p)
        full = _full_cost(op, m, n)
        products = op === :svd ? 2 : 1
        # the least an iteration can cost (3 iterations and 4 CG steps) must be well
        # below the full path, and giving up after the iterations that measure the rate
        # must cost next to nothing
        trial = MIN_RATE_ITERATIONS * products * unit
        least = trial + 2 * 4 * unit
        small = kmax < AUTO_MIN_SIZE || 4p > kmax
        (small || least > AUTO_TRY * full || trial > AUTO_TRIAL * full) && return :full, cfg
    end
    return :iterative, cfg
end

"""
    cg_iterations(κ, rtol, maxiter) -> Int

Conjugate-gradient steps to reduce the residual by `rtol` at condition number `κ`, from
the Chebyshev bound `2 qʲ`, `q = (√κ - 1) / (√κ + 1)`.
"""
function cg_iterations(κ, rtol, maxiter)
    κ < 1e300 || return maxiter  # also NaN
    root = sqrt(max(κ, 1.0))
    root - 1 < 1e-8 && return 1
    return min(maxiter, floor(Int, log(2 / rtol) / log((root + 1) / (root - 1))) + 1)
end

# ------------------------------------------------------------------ the monitor

"""
Decides after each Rayleigh-Ritz step: certified, go on, or stop. `values` are the
Ritz values, wanted end first (descending), `res` the residual norms relative to
`scale`. Keeps the worst needed residual per iteration to measure the rate; `reason`,
`worst` and `stop` say why a call is not certified (`reason = ""` when it is).
"""
mutable struct TopKMonitor
    op::Symbol
    cfg::TopKConfig
    k::Int
    kmax::Int
    unit::Float64
    budget::Float64
    products::Int
    degeneracy_atol::Any
    spent::Float64
    history::Vector{Float64}
    iterations::Int
    d::Int
    κ::Float64
    certified::Bool
    reason::String   # "", "cluster" or "residual"
    worst::Float64   # the largest needed relative residual (reason "residual")
    stop::String     # "", "stalled" or "budget" (reason "residual")
end

function TopKMonitor(op::Symbol, cfg::TopKConfig, k, m, n, degeneracy_atol)
    unit = _unit(m, n, cfg.p)
    full = _full_cost(op, m, n)
    # auto: well below the full path; randomized: the full path's cost, but at least
    # RANDOMIZED_MIN_ITERATIONS iterations (small matrices, where the full path is
    # cheap), or n_iter iterations when given (no budget: step!)
    products = op === :svd ? 2 : 1
    least = RANDOMIZED_MIN_ITERATIONS * products * unit
    budget = cfg.method === :auto ? AUTO_BUDGET * full : max(full, least)
    (cfg.method === :randomized && cfg.max_iter !== nothing) && (budget = Inf)
    return TopKMonitor(op, cfg, k, min(m, n), unit, budget, products,
                       degeneracy_atol, 0.0, Float64[], 0, k, Inf, false, "", 0.0, "")
end

_monitor_deg(mon, scale) =
    mon.degeneracy_atol === nothing ? scale * _eps34(typeof(scale)) : mon.degeneracy_atol

# Number of leading residuals at most `tol`.
function _certified_prefix(res, tol)
    i = findfirst(r -> !(r <= tol), res)
    return i === nothing ? length(res) : i - 1
end

# How many leading Ritz pairs the backward needs exactly: the kept ones and the rest
# of the cluster of value k (`p + 1`: the cluster does not end inside the block).
function _needed(mon::TopKMonitor, values, scale)
    k, p = mon.k, length(values)
    deg = _monitor_deg(mon, scale)
    first = p == mon.kmax ? p : p + 1
    for i in k+1:p
        if values[i] < values[k] - deg
            first = i - 1
            break
        end
    end
    # s_k numerically zero: the kept zeros get pseudo-inverse (zero) couplings,
    # whatever the size of the zero block
    mon.op === :svd && values[k] <= deg && (first = k)
    return first
end

# Condition number of the backward's CG for column k when the first value past what it
# deflates is values[j] (j > kmax: nothing is past it).
function _kappa(mon::TopKMonitor, values, scale, j)
    j > mon.kmax && return 1.0
    j = min(j, length(values))  # only with s_k = 0 (svd), where κ = 1 below
    k = mon.k
    safe = scale > 0 ? scale : one(scale)  # in units of the scale: no overflow
    vk, vn = values[k] / safe, values[j] / safe
    if mon.op === :svd
        vk * safe <= _monitor_deg(mon, scale) && return 1.0
        κ = vk^2 / max(vk^2 - vn^2, zero(vk))
    else
        low = min(values[end] / safe, zero(vk))
        κ = (vk - low) / max(vk - vn, zero(vk))
    end
    return isnan(κ) ? Inf : Float64(κ)
end

"""
    step!(mon, values, res, scale) -> Bool

Record one Rayleigh-Ritz step; true when the iteration should stop (certified, or not
certifiable within the settings and budget).
"""
function step!(mon::TopKMonitor, values, res, scale)
    mon.iterations += 1
    mon.spent += mon.products * mon.unit
    cfg, k, p = mon.cfg, mon.k, length(values)
    prefix = _certified_prefix(res, cfg.tol)
    needed = _needed(mon, values, scale)
    mon.d = max(k, prefix)
    if prefix >= needed
        mon.certified, mon.reason = true, ""
        # the CG is preconditioned by the uncertified extras: predict it from the
        # block's end (exact when they are converged)
        past = p < mon.kmax ? p : p + 1
        mon.κ = _kappa(mon, values, scale, max(past, needed + 1))
        return true
    end
    if prefix >= k && needed > p
        mon.reason = "cluster"
        return true
    end
    mon.reason, mon.stop = "residual", ""
    mon.worst = Float64(maximum(view(res, 1:min(needed, p))))
    push!(mon.history, max(mon.worst / cfg.tol, 1.0))
    if cfg.max_iter !== nothing
        # n_iter given: the iteration runs until certified or n_iter (under :auto the
        # budget still applies: :auto falls back cheaply)
        mon.iterations >= cfg.max_iter && return true
        cfg.method === :randomized && return false
    end
    cfg.method === :randomized && mon.iterations < RANDOMIZED_MIN_ITERATIONS && return false
    return _over_budget!(mon)
end

# Predict the cost of finishing (iterations left and the backward's CG, both from the
# measured rate); stop when it breaks the budget.
function _over_budget!(mon::TopKMonitor)
    h = mon.history
    length(h) < MIN_RATE_ITERATIONS && return false  # early rates are erratic
    rate = max(h[end-1] / h[end-2], h[end] / h[end-1])  # the slower of the last two
    if rate >= 1
        mon.stop = "stalled"
        return true
    end
    left = log(h[end]) / -log(rate) + 1
    # the rate is about (s_{p+1} / s_k)², which also sets the condition number of the
    # backward's CG: 1 / (1 - rate)
    cg = cg_iterations(1 / (1 - rate), mon.cfg.rtol, mon.cfg.maxiter)
    if mon.spent + (left * mon.products + 2 * cg) * mon.unit > mon.budget
        mon.stop = "budget"
        return true
    end
    return false
end

_round2(x) = round(x; sigdigits=2)

# Why a call is not certified, in the words of pyspectral/forward/topk.py.
function _uncertified_reason(mon::TopKMonitor)
    kind = mon.op === :svd ? "singular " : "eigen"
    mon.reason == "cluster" && return string(
        "the ", kind, "values at k = ", mon.k, " form a cluster (within degeneracy_atol) ",
        "that extends past the block of k + oversample = ", mon.cfg.p, "; raise oversample")
    what = mon.op === :svd ? "|A v - s u| / s_1 of the triplets" :
           "|A v - w v| / max|w| of the eigenpairs"
    its = string(mon.iterations, mon.iterations > 1 ? " iterations" : " iteration")
    why = string("after ", its, " the largest relative residual ", what, " needed is ",
                 _round2(mon.worst), " (tolerance ", _round2(mon.cfg.tol), ")")
    mon.stop == "stalled" && return why * "; it is not converging"
    mon.stop == "budget" && return why * "; at the measured rate it would exceed the work budget"
    return why
end

# The iteration's outcome: true when its result is to be returned (certified and, under
# :auto, with the backward's CG inside the budget), false under :auto otherwise (the
# caller takes the full path); under :randomized an uncertified result warns.
function _accept!(mon::TopKMonitor)
    cfg = mon.cfg
    if cfg.method === :auto
        mon.certified || return false
        cg = cg_iterations(mon.κ, cfg.rtol, cfg.maxiter)
        return mon.spent + 2 * cg * mon.unit <= mon.budget
    end
    if !mon.certified
        mon.d = mon.k
        op, k, reason, p = mon.op, mon.k, mon.reason, cfg.p
        # the residual is the measurement behind reason "residual" (0 for "cluster")
        residual = reason == "residual" ? mon.worst : 0.0
        iterations, tol, stop = mon.iterations, cfg.tol, mon.stop
        full = op === :svd ? "SVD" : "eigh"
        message = "$(op)_topk(k=$k, method=:randomized): not certified: " *
                  "$(_uncertified_reason(mon)). The result is approximate; use " *
                  "method=:auto (which falls back to the full $full), or raise n_iter " *
                  "or oversample."
        # the measurements as keyword arguments too: pyspectral's bridge reads them
        @warn message reason residual iterations tol stop p
    end
    return true
end

# ------------------------------------------------------------------ iterations

_orth(X) = Matrix(LinearAlgebra.qr(X).Q)  # thin Q: size(X, 1) × size(X, 2)

# A dense copy for BLAS products (none when `A` already is one).
_dense(A, ::Type{T}) where {T} = A isa Matrix{T} ? A : Matrix{T}(A)

# Column norms of R / scale (0 where scale is 0: the zero matrix, whose Ritz pairs are
# exact). Divided first: the squares of entries of 1e200 overflow.
function _relative_norms(R, scale)
    safe = scale > 0 ? scale : one(scale)
    return [LinearAlgebra.norm(c) for c in eachcol(R ./ safe)]
end

_start(::Type{T}, n, p) where {T} = Random.randn(Random.Xoshiro(0), T, n, p)  # reproducible

"""
    svd_topk_block(A, k; method=:auto, oversample=nothing, n_iter=nothing, rtol=nothing,
                   maxiter=500, degeneracy_atol=nothing) -> (; U, S, Vt, d)

The top-`k` singular triplets of `A` with what their pullback needs: the block of Ritz
triplets (`U` m×p, `S`, `Vt` p×n), kept `k` first, the first `d` certified, the others
only preconditioning the backward's CG ([`svd_trunc_pullback!`](@ref)). The full path
(`method = :full`, and `:auto` where iterating would not pay or is not certified) gives
the whole thin SVD with `d = min(m, n)`. Block subspace iteration on `A Aᴴ` with a
Rayleigh-Ritz step per iteration; see the top of this file for the certificate and the
budget. `rtol` and `maxiter` are the backward's, which the budget includes.
"""
function svd_topk_block(A::AbstractMatrix, k::Integer; method::Symbol=:auto,
                        oversample::Union{Nothing,Integer}=nothing,
                        n_iter::Union{Nothing,Integer}=nothing, rtol=nothing,
                        maxiter::Integer=500, degeneracy_atol=nothing)
    m, n = size(A)
    _check_options("svd_topk"; oversample, n_iter, rtol, maxiter, degeneracy_atol)
    _check_method("svd_topk", method)
    _check_topk("svd_topk", k, false, min(m, n))
    _check_finite("svd_topk", A)
    T = _lapack_eltype(A)
    path, cfg = topk_config(:svd, m, n, T, k, method, oversample, n_iter, rtol, maxiter)
    if path === :iterative
        B = _svd_iterate(_dense(A, T), k, cfg, degeneracy_atol)
        B === nothing || return B
    end
    F = LinearAlgebra.svd!(Matrix{T}(A))
    return (; U=F.U, S=F.S, Vt=F.Vt, d=length(F.S))
end

function _svd_iterate(A, k, cfg, degeneracy_atol)
    m, n = size(A)
    mon = TopKMonitor(:svd, cfg, k, m, n, degeneracy_atol)
    Q = _orth(A * _start(eltype(A), n, cfg.p))
    local U, S, V
    while true
        # Rayleigh-Ritz: B = Qᴴ A = (Aᴴ Q)ᴴ = W S Vᴴ, U = Q W; then Aᴴ U = V S exactly
        # and the residual is R = A V - U S, whose product A V is the next iterate's.
        F = LinearAlgebra.svd(A' * Q)
        V, S, U = F.U, F.S, Q * F.V
        AV = A * V
        res = _relative_norms(AV .- U .* transpose(S), S[1])
        step!(mon, S, res, S[1]) && break
        Q = _orth(AV)
    end
    _accept!(mon) || return nothing
    return (; U, S, Vt=Matrix(V'), d=mon.d)
end

"""
    eigh_topk_block(A, k; uplo=:L, largest=true, method=:auto, oversample=nothing,
                    n_iter=nothing, rtol=nothing, maxiter=500,
                    degeneracy_atol=nothing) -> (; values, vectors, d)

The `k` largest (or smallest) eigenpairs of `Hermitian(A, uplo)` with the block its
pullback needs: kept `k` first (ascending), then the other Ritz pairs (wanted end
first), the first `d` certified ([`eigh_trunc_pullback!`](@ref)); the full path gives
the whole decomposition in that order, `d = n`.

Subspace iteration favours the eigenvalues largest in magnitude. Eigenvalues past `k`
larger in magnitude than the k-th enter the block and cost nothing while they fit in
its extra columns; once they fill all but one, the iteration runs on `A - σI` (on `-A`
for the smallest), `σ = min(0, (θ_low + θ_{k+1}) / 2)` from the Ritz values seen so far,
which folds the other end below the wanted eigenvalues.
"""
function eigh_topk_block(A::AbstractMatrix, k::Integer; uplo::Symbol=:L, largest::Bool=true,
                         method::Symbol=:auto, oversample::Union{Nothing,Integer}=nothing,
                         n_iter::Union{Nothing,Integer}=nothing, rtol=nothing,
                         maxiter::Integer=500, degeneracy_atol=nothing)
    _check_square("eigh_topk", A)
    uplo = _check_uplo("eigh_topk", uplo)
    _check_options("eigh_topk"; oversample, n_iter, rtol, maxiter, degeneracy_atol)
    _check_method("eigh_topk", method)
    n = size(A, 1)
    _check_topk("eigh_topk", k, false, n)
    _check_finite_triangle("eigh_topk", A, uplo)
    T = _lapack_eltype(A)
    H = _read_triangle(A, uplo, T)  # a private copy of what is read: BLAS products
    path, cfg = topk_config(:eigh, n, n, T, k, method, oversample, n_iter, rtol, maxiter)
    if path === :iterative
        B = _eigh_iterate(H, k, largest, cfg, degeneracy_atol)
        B === nothing || return B
    end
    E = LinearAlgebra.eigen(H)
    # kept ascending first, then the rest from the wanted end
    order = largest ? [n-k+1:n; n-k:-1:1] : collect(1:n)
    return (; values=E.values[order], vectors=E.vectors[:, order], d=n)
end

function _eigh_iterate(H, k, largest, cfg, degeneracy_atol)
    n, p = size(H, 1), cfg.p
    sgn = largest ? 1 : -1
    mon = TopKMonitor(:eigh, cfg, k, n, n, degeneracy_atol)
    Q = _orth(_start(eltype(H), n, p))
    R = real(eltype(H))  # the scales stay in the matrix's real type (eps of it)
    low, top, shifted = typemax(R), zero(R), false
    local θ, V
    while true
        AQ = sgn .* (H * Q)
        Tm = Q' * AQ
        E = LinearAlgebra.eigen(Hermitian((Tm + Tm') / 2))
        θ, Z = reverse(E.values), E.vectors[:, end:-1:1]  # descending: the wanted end first
        V, AV = Q * Z, AQ * Z
        top = max(top, maximum(abs, θ))
        res = _relative_norms(AV .- V .* transpose(θ), top)
        step!(mon, θ, res, top) && break
        low = min(low, θ[end])
        if k < p && !shifted
            # eigenvalues past k larger in magnitude than the k-th take the block's
            # extra columns; shift once they fill all but one
            invaders = count(x -> abs(x) > abs(θ[k]), view(θ, k+1:p))
            shifted = invaders >= max(1, p - k - 1)
        end
        shifted && (AV = AV .- V .* min((low + θ[k+1]) / 2, zero(low)))
        Q = _orth(AV)
    end
    _accept!(mon) || return nothing
    # kept eigenvalues ascending, as eigh returns them
    order = [(largest ? (k:-1:1) : (1:k)); k+1:p]
    return (; values=sgn .* θ[order], vectors=V[:, order], d=mon.d)
end

"""
    svd_topk(A, k; method=:auto, oversample=nothing, n_iter=nothing, rtol=nothing,
             maxiter=500, degeneracy_atol=nothing) -> SVD

The top `k` singular triplets of `A` (plain `U`, `S`, `Vt`), as `svd(A; k)` returns
them, without a full SVD where that pays. `method`: `:auto` iterates only where that
is predicted to be much cheaper than the full SVD and keeps only a certified result
(else the full path: exact on every spectrum); `:randomized` always iterates and
returns what it has, with a warning giving the measured residual when it is not
certified; `:full` is `svd(A; k)`. `oversample` (default `max(10, k)`) sets the block
`k + oversample`, `n_iter` caps the iterations (default: the work budget);
`rtol`/`maxiter` are the pullback's CG settings (the budget includes its cost),
`degeneracy_atol` defines the cluster of `s_k` that the block must close. Its rrule
pulls back through the certified block ([`svd_trunc_pullback!`](@ref)), exact without
the discarded vectors.
"""
function svd_topk(A::AbstractMatrix, k::Integer; kw...)
    B = svd_topk_block(A, k; kw...)
    return SVD(B.U[:, 1:k], B.S[1:k], B.Vt[1:k, :])
end

"""
    eigh_topk(A, k; uplo=:L, largest=true, method=:auto, oversample=nothing,
              n_iter=nothing, rtol=nothing, maxiter=500, degeneracy_atol=nothing) -> Eigen

The `k` largest (`largest=false`: smallest) eigenpairs of `Hermitian(A, uplo)`,
eigenvalues ascending, without a full decomposition where that pays; only the `uplo`
triangle is read. Keywords as for [`svd_topk`](@ref); see [`eigh_topk_block`](@ref).
"""
function eigh_topk(A::AbstractMatrix, k::Integer; kw...)
    B = eigh_topk_block(A, k; kw...)
    return Eigen(B.values[1:k], B.vectors[:, 1:k])
end
