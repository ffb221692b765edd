# Certified top-k forward without a full decomposition: block subspace iteration or block
# Krylov with Rayleigh-Ritz steps, for `svd` and `eigh`, touching `A` only through
# products with a block. Same algorithms, constants, certificate, budget and choice
# between the two as pyspectral/forward/topk.py (whose docstring gives the details);
# change them in both places or in neither.
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
#
# Block Krylov (`:krylov`; Musco & Musco 2015 as a block Golub-Kahan-Lanczos
# bidiagonalization, block Lanczos for `eigh`): each step applies `Aᴴ` and `A` to a new
# block of `b` columns ([`krylov_block`](@ref)), orthogonalizes it against the whole
# basis with recorded coefficients, so that `Aᴴ U_K = V_K C` holds to rounding; the
# Rayleigh-Ritz step is the SVD of `C` (`eigh`: the eigen of `T = V_Kᴴ A V_K`), its
# residuals `A V - U S` lie in the next block (no product), and where they certify one
# product of the `p` Ritz vectors computes them explicitly: the certificate above,
# unchanged. Thick restarts keep the basis within `p + KRYLOV_RESTART b` columns.
# `:auto` starts with subspace iteration and, once two measurements give its rate,
# hands over to Krylov where [`krylov_pays`](@ref) predicts that cheaper.

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
# Block Krylov: basis width, Gram-Schmidt and Rayleigh-Ritz costs, and auto's margin
const KRYLOV_RESTART = 10
const KRYLOV_MAX_DUE = 8       # Krylov steps between measurements, at most
const ORTH_COST = 4.0
const RITZ_COST = 10.0
const KRYLOV_GAIN = 0.7

"""
    TopKConfig

Settings of one iterative top-k call, from [`topk_config`](@ref): `method` (`:auto`,
`:randomized` (subspace iteration) or `:krylov`), block size `p = k + oversample` (at
most `min(m, n)`), `max_iter` (`nothing`: the work budget decides), certificate
tolerance `tol`, the backward's CG settings `rtol`, `maxiter`, the Krylov block `block`
(0: none) and whether `:auto` may hand over to Krylov (`switch`).
"""
struct TopKConfig
    method::Symbol
    p::Int
    max_iter::Union{Nothing,Int}
    tol::Float64
    rtol::Float64
    maxiter::Int
    block::Int
    switch::Bool
end

_full_cost(op::Symbol, m, n) = (op === :svd ? SVD_FULL_COST : EIGH_FULL_COST) * m * n * min(m, n)

# One product with the block plus its share of the block's QR and SVD / eigh.
_unit(m, n, p) = float(m) * n * max(p, MIN_COLUMNS) + BLOCK_COST * (m + n) * p^2 +
                 ITERATION_OVERHEAD

function _check_method(op, method)
    method in (:auto, :full, :randomized, :krylov) && return method
    throw(ArgumentError(
        "$op: method must be :auto, :full, :randomized or :krylov, got $(repr(method))"))
end

"""
    krylov_block(k, p, kmax) -> Int

Block size of the Krylov iteration: `k`, at least `MIN_COLUMNS`, at most `p`, and at
most `(kmax - p) ÷ 2` so that a restart fits in `min(m, n)` dimensions (0: none).
"""
krylov_block(k, p, kmax) = max(0, min(p, max(k, MIN_COLUMNS), (kmax - p) ÷ 2))

"""
    chebyshev_rate(ratio) -> Float64

Per-step rate of block Krylov on a wanted value when the unwanted spectrum lies in
`[0, ratio]` of it: `ratio / (1 + √(1 - ratio))²`.
"""
function chebyshev_rate(ratio)
    r = clamp(Float64(ratio), 0.0, 1.0)
    return r / (1 + sqrt(1 - r))^2
end

_steps_left(residual, rate) = rate >= 1 ? Inf : log(residual) / -log(max(rate, 1e-300)) + 1

"""
    krylov_pays(residual, rate, ratio, subspace_step, krylov_step, check) -> Bool

The cost model's choice under `:auto`: whether block Krylov (at the Chebyshev rate of
`max(rate, ratio)`) is predicted to finish in under `KRYLOV_GAIN` of what the subspace
iteration (at `rate`) still costs; `residual` in units of the tolerance.
"""
function krylov_pays(residual, rate, ratio, subspace_step, krylov_step, check)
    sub = _steps_left(residual, rate) * subspace_step
    kry = _steps_left(residual, chebyshev_rate(max(rate, ratio))) * krylov_step
    return kry + check < KRYLOV_GAIN * sub
end

# Model cost of one Krylov step with a basis `width` wide (products 2: svd, 1: eigh).
function _krylov_step_cost(m, n, b, width, products)
    sides = products == 2 ? m + n : n
    ritz = RITZ_COST * float(width)^3 / (products * MIN_RATE_ITERATIONS)
    return products * _unit(m, n, b) + ORTH_COST * sides * width * b + ritz
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
    cfg = TopKConfig(method, p, n_iter, tol, rtol === nothing ? tol : Float64(rtol), maxiter,
                     krylov_block(k, p, kmax), method === :auto)
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
    m::Int
    n::Int
    kmax::Int
    unit::Float64
    budget::Float64
    products::Int
    degeneracy_atol::Any
    cost::Float64            # of one step of the running iteration
    spent::Float64
    history::Vector{Float64}
    at::Vector{Int}          # the step of each measurement
    iterations::Int
    d::Int
    κ::Float64
    certified::Bool
    reason::String   # "", "cluster" or "residual"
    worst::Float64   # the largest needed relative residual (reason "residual")
    stop::String     # "", "stalled" or "budget" (reason "residual")
    prefix::Int
    needed::Int
    may_switch::Bool
    switch::Bool     # auto hands over to block Krylov
    krylov::Bool     # the running iteration is block Krylov
end

function TopKMonitor(op::Symbol, cfg::TopKConfig, k, m, n, degeneracy_atol)
    unit = _unit(m, n, cfg.p)
    full = _full_cost(op, m, n)
    # auto: well below the full path; randomized / krylov: the full path's cost, but at
    # least RANDOMIZED_MIN_ITERATIONS iterations (small matrices, where the full path is
    # cheap), or n_iter iterations when given (no budget: step!)
    products = op === :svd ? 2 : 1
    least = RANDOMIZED_MIN_ITERATIONS * products * unit
    budget = cfg.method === :auto ? AUTO_BUDGET * full : max(full, least)
    (cfg.method !== :auto && cfg.max_iter !== nothing) && (budget = Inf)
    may_switch = cfg.switch && 0 < cfg.block <= cfg.p
    return TopKMonitor(op, cfg, k, m, n, min(m, n), unit, budget, products,
                       degeneracy_atol, products * unit, 0.0, Float64[], Int[], 0, k, Inf,
                       false, "", 0.0, "", 0, 0, may_switch, false, false)
end

_krylov_cost(mon::TopKMonitor, width) =
    _krylov_step_cost(mon.m, mon.n, mon.cfg.block, width, mon.products)

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
    step!(mon, values, res, scale; steps=1, cost=steps * mon.cost) -> Bool

Record one Rayleigh-Ritz step (after `steps` steps costing `cost` since the last); true
when the iteration should stop (certified, handing over to Krylov, or not certifiable
within the settings and budget).
"""
function step!(mon::TopKMonitor, values, res, scale; steps::Integer=1,
               cost::Real=steps * mon.cost)
    mon.iterations += steps
    mon.spent += cost
    _certify!(mon, values, res, scale) && return true
    return _measure!(mon, values, res)
end

# After a Krylov step certified by the residuals its recurrence gives: the explicitly
# computed ones decide (one product, `cost`); otherwise they are the step's measurement.
function confirm!(mon::TopKMonitor, values, res, scale, cost)
    mon.spent += cost
    _certify!(mon, values, res, scale) && return true
    mon.certified = false
    return _measure!(mon, values, res)
end

# The Krylov iteration takes over (`cost`: one of its steps): its rate is measured anew.
function start_krylov!(mon::TopKMonitor, cost)
    empty!(mon.history)
    empty!(mon.at)
    mon.cost, mon.may_switch, mon.krylov = cost, false, true
    return mon
end

# Krylov steps before the next measurement: one until a rate is known, then as many as it
# predicts to convergence, at most KRYLOV_MAX_DUE, within n_iter.
function due(mon::TopKMonitor)
    d = 1
    h, at = mon.history, mon.at
    if length(h) >= 2 && at[end] > at[end-1]
        rate = (h[end] / h[end-1])^(1 / (at[end] - at[end-1]))
        d = floor(Int, min(max(_steps_left(h[end], rate) - 1, 1.0), KRYLOV_MAX_DUE))
    end
    mon.cfg.max_iter === nothing || (d = max(1, min(d, mon.cfg.max_iter - mon.iterations)))
    return d
end

function _certify!(mon::TopKMonitor, values, res, scale)
    cfg, k, p = mon.cfg, mon.k, length(values)
    prefix = _certified_prefix(res, cfg.tol)
    needed = _needed(mon, values, scale)
    mon.d = max(k, prefix)
    mon.prefix, mon.needed = prefix, needed
    if prefix >= needed
        mon.certified, mon.reason = true, ""
        # the CG is preconditioned by the uncertified extras: predict it from the
        # block's end (exact when they are converged)
        past = p < mon.kmax ? p : p + 1
        mon.κ = _kappa(mon, values, scale, max(past, needed + 1))
        return true
    end
    return false
end

function _measure!(mon::TopKMonitor, values, res)
    cfg, k, p = mon.cfg, mon.k, length(values)
    if mon.prefix >= k && mon.needed > p
        mon.reason = "cluster"
        return true
    end
    mon.reason, mon.stop = "residual", ""
    mon.worst = Float64(maximum(view(res, 1:min(mon.needed, p))))
    push!(mon.history, max(mon.worst / cfg.tol, 1.0))
    push!(mon.at, mon.iterations)
    forced = cfg.method !== :auto  # :randomized or :krylov
    if cfg.max_iter !== nothing
        # n_iter given: the iteration runs until certified or n_iter (under :auto the
        # budget still applies: :auto falls back cheaply)
        mon.iterations >= cfg.max_iter && return true
        forced && return false
    end
    if mon.may_switch && length(mon.history) >= 2
        mon.may_switch = false  # decided once, at the first rate
        if _krylov_pays(mon, values)
            mon.switch = true
            return true
        end
    end
    forced && mon.iterations < RANDOMIZED_MIN_ITERATIONS && return false
    return _over_budget!(mon)
end

# The rate per step between measurements i - 1 and i.
_rate(mon::TopKMonitor, i) =
    (mon.history[i] / mon.history[i-1])^(1 / max(mon.at[i] - mon.at[i-1], 1))

# krylov_pays on the measured rate and the Ritz values (pyspectral's _krylov_pays).
function _krylov_pays(mon::TopKMonitor, values)
    b, k = mon.cfg.block, mon.k
    vk, vb = values[k], values[min(b + 1, length(values))]
    if mon.op === :svd
        ratio = (vb / vk)^2
        guess = (values[end] / vk)^2
    else  # distances to the lowest value seen (or 0), as in _kappa
        low = min(values[end], zero(vk))
        ratio = (vb - low) / (vk - low)
        guess = abs(values[end] / vk)
    end
    clean(x) = isnan(x) ? 1.0 : clamp(Float64(x), 0.0, 1.0)
    ratio, guess = clean(ratio), clean(guess)
    # the first measured rate flatters (a random start's tail dies first): at least
    # what the block's last value says
    rate = max(_rate(mon, length(mon.history)), guess)
    left = _steps_left(mon.history[end], chebyshev_rate(max(rate, ratio)))
    cap = min(mon.kmax, mon.cfg.p + KRYLOV_RESTART * b)
    width = floor(Int, min(cap, b * (1 + left / 2)))
    return krylov_pays(mon.history[end], rate, ratio, mon.cost, _krylov_cost(mon, width),
                       mon.unit)
end

# Predict the cost of finishing (steps left and the backward's CG, both from the measured
# rate); stop when it breaks the budget.
function _over_budget!(mon::TopKMonitor)
    h = mon.history
    length(h) < MIN_RATE_ITERATIONS && return false  # early rates are erratic
    rate = max(_rate(mon, length(h) - 1), _rate(mon, length(h)))  # the slower of two
    if rate >= 1
        mon.stop = "stalled"
        return true
    end
    left = _steps_left(h[end], rate)
    # the rate is about r = (s_{p+1} / s_k)² (Krylov: the Chebyshev rate of r, which
    # inverts to r = 4 rate / (1 + rate)²), and r sets the condition number of the
    # backward's CG: 1 / (1 - r)
    r = mon.krylov ? 4rate / (1 + rate)^2 : rate
    cg = cg_iterations(1 / (1 - r), mon.cfg.rtol, mon.cfg.maxiter)
    if mon.spent + left * mon.cost + 2 * cg * mon.unit > mon.budget
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
        # :krylov names itself (pyspectral's bridge reads the method from the text)
        cfg.method === :krylov &&
            (message = replace(message, "method=:randomized" => "method=:krylov"))
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
    if cfg.method === :krylov && cfg.block > 0
        U, S, V = _svd_krylov(A, k, cfg, mon, nothing)
    else
        Q = _orth(A * _start(eltype(A), n, cfg.p))
        local U, S, V, AV
        while true
            # Rayleigh-Ritz: B = Qᴴ A = (Aᴴ Q)ᴴ = W S Vᴴ, U = Q W; then Aᴴ U = V S
            # exactly and the residual is R = A V - U S, whose product A V is the next
            # iterate's.
            F = LinearAlgebra.svd(A' * Q)
            V, S, U = F.U, F.S, Q * F.V
            AV = A * V
            res = _relative_norms(AV .- U .* transpose(S), S[1])
            step!(mon, S, res, S[1]) && break
            Q = _orth(AV)
        end
        # auto: block Krylov predicted cheaper, from A V_b (no product)
        mon.switch && ((U, S, V) = _svd_krylov(A, k, cfg, mon, AV[:, 1:cfg.block]))
    end
    _accept!(mon) || return nothing
    return (; U, S, Vt=Matrix(V'), d=mon.d)
end

# `X = Q c + Q_new R` with `Q_new` orthonormal and orthogonal to the orthonormal `Q`:
# block classical Gram-Schmidt, first against the `recent` last columns of `Q` (the
# three-term part), then against all of `Q`, again where that removed more than half of a
# column's norm, and on `Q_new` where a column was, to rounding, inside span(Q). The
# coefficients record every pass (pyspectral's _extend).
function _extend(Q, X, recent)
    nrm(Y) = [LinearAlgebra.norm(c) for c in eachcol(Y)]
    before = nrm(X)
    r = min(recent, size(Q, 2))
    Qr = view(Q, :, size(Q, 2)-r+1:size(Q, 2))
    cr = Qr' * X
    X = X - Qr * cr
    the_local = nrm(X)
    c = Q' * X
    Y = X - Q * c
    c[end-r+1:end, :] .+= cr
    if any(nrm(Y) .< 0.5 .* the_local)
        c2 = Q' * Y
        Y, c = Y - Q * c2, c + c2
    end
    F = LinearAlgebra.qr(Y)
    Qn, R = Matrix(F.Q), Matrix(F.R)
    if any(abs.(LinearAlgebra.diag(R)) .<= sqrt(eps(real(eltype(X)))) .* before)
        c3 = Q' * Qn
        F2 = LinearAlgebra.qr(Qn - Q * c3)
        Qn, R2 = Matrix(F2.Q), Matrix(F2.R)
        c, R = c + c3 * R, R2 * R
    end
    return c, Qn, R
end

# Block Golub-Kahan-Lanczos with full reorthogonalization and thick restarts
# (pyspectral's _svd_krylov): Aᴴ U_K = V_K C with the recorded coefficients C; returns
# the p leading Ritz triplets.
function _svd_krylov(A, k, cfg, mon, start)
    m, n = size(A)
    T = eltype(A)
    b, p = cfg.block, cfg.p
    cap = min(mon.kmax, p + KRYLOV_RESTART * b)
    if start === nothing
        start = A * _start(T, n, b)
        mon.spent += _unit(m, n, b)
    end
    start_krylov!(mon, _krylov_cost(mon, min(cap, 4b)))
    Unew = _orth(start)
    Ub, Vb, C = zeros(T, m, cap), zeros(T, n, cap), zeros(T, cap, cap)
    w, dueat, steps, cost = 0, 1, 0, 0.0
    while true
        # Aᴴ U_new = V_K h + V_new R: C gains a block column (and row)
        h, Vnew, R = _extend(view(Vb, :, 1:w), A' * Unew, b)
        C[1:w, w+1:w+b] .= h
        C[w+1:w+b, w+1:w+b] .= R
        Ub[:, w+1:w+b] .= Unew
        Vb[:, w+1:w+b] .= Vnew
        w += b
        # A V_new = U_K g + U_next L: the residual A V - U S lies in U_next
        _, Unew, L = _extend(view(Ub, :, 1:w), A * Vnew, b)
        steps, dueat, cost = steps + 1, dueat - 1, cost + _krylov_cost(mon, w)
        full = w + 2b > cap  # the next step adds two blocks
        (w < p || (dueat > 0 && !full)) && continue
        # Rayleigh-Ritz: C = Y S Xᴴ, U = U_K X, V = V_K Y: Aᴴ U = V S, and
        # A V - U S = U_next L Y_last
        F = LinearAlgebra.svd(C[1:w, 1:w])
        Sp, scale = F.S[1:p], F.S[1]
        res = _relative_norms(L * F.U[w-b+1:w, 1:p], scale)
        stop = step!(mon, Sp, res, scale; steps, cost)
        steps, cost = 0, 0.0
        if !(stop || full)
            dueat = due(mon)
            continue
        end
        U, V = view(Ub, :, 1:w) * F.V[:, 1:p], view(Vb, :, 1:w) * F.U[:, 1:p]
        if stop && mon.certified
            # the certificate: residuals computed from a product with A
            res = _relative_norms(A * V .- U .* transpose(Sp), scale)
            stop = confirm!(mon, Sp, res, scale, _unit(m, n, p))
        end
        stop && return U, Sp, V
        dueat = due(mon)
        if full
            # thick restart: the p Ritz triplets and the next block
            Ub[:, 1:p] .= U
            Vb[:, 1:p] .= V
            w = p
            fill!(C, zero(T))
            C[1:p, 1:p] .= LinearAlgebra.Diagonal(Sp)
        end
    end
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
    R = real(eltype(H))  # the scales stay in the matrix's real type (eps of it)
    local θ, V
    if cfg.method === :krylov && cfg.block > 0
        V, θ = _eigh_krylov(H, k, sgn, cfg, mon, nothing)
    else
        Q = _orth(_start(eltype(H), n, p))
        low, top, shifted = typemax(R), zero(R), false
        while true
            AQ = sgn .* (H * Q)
            Tm = Q' * AQ
            E = LinearAlgebra.eigen(Hermitian((Tm + Tm') / 2))
            θ, Z = reverse(E.values), E.vectors[:, end:-1:1]  # descending: wanted first
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
        # auto: block Lanczos predicted cheaper, from the leading b Ritz vectors
        mon.switch && ((V, θ) = _eigh_krylov(H, k, sgn, cfg, mon, V[:, 1:cfg.block]))
    end
    _accept!(mon) || return nothing
    # kept eigenvalues ascending, as eigh returns them
    order = [(largest ? (k:-1:1) : (1:k)); k+1:p]
    return (; values=sgn .* θ[order], vectors=V[:, order], d=mon.d)
end

# Block Lanczos on sgn * H with full reorthogonalization and thick restarts
# (pyspectral's _eigh_krylov): A V_K = V_K T + V_new H with the recorded coefficients;
# returns the p leading Ritz pairs of sgn * H, descending.
function _eigh_krylov(A, k, sgn, cfg, mon, start)
    n = size(A, 1)
    T = eltype(A)
    b, p = cfg.block, cfg.p
    cap = min(n, p + KRYLOV_RESTART * b)
    Vnew = _orth(start === nothing ? _start(T, n, b) : start)
    start_krylov!(mon, _krylov_cost(mon, min(cap, 4b)))
    Vb, Tm, Hc = zeros(T, n, cap), zeros(T, cap, cap), zeros(T, b, cap)
    top = zero(real(T))
    w, dueat, steps, cost = 0, 1, 0, 0.0
    while true
        # A V_new = [V_K, V_new] c + V_next R
        Vb[:, w+1:w+b] .= Vnew
        c, Vnew, R = _extend(view(Vb, :, 1:w+b), sgn .* (A * Vnew), 2b)
        Tm[1:w+b, w+1:w+b] .= c
        Tm[w+1:w+b, 1:w] .= view(Hc, :, 1:w)
        fill!(Hc, zero(T))
        Hc[:, w+1:w+b] .= R
        w += b
        steps, dueat, cost = steps + 1, dueat - 1, cost + _krylov_cost(mon, w)
        full = w + 2b > cap  # the next step adds two blocks
        (w < p || (dueat > 0 && !full)) && continue
        # Rayleigh-Ritz: T = Z θ Zᴴ, V = V_K Z: A V - V θ = V_new H Z
        Tw = Tm[1:w, 1:w]
        E = LinearAlgebra.eigen(Hermitian((Tw + Tw') / 2))
        θ, Z = reverse(E.values), E.vectors[:, end:-1:1]  # descending: wanted first
        top = max(top, maximum(abs, θ))
        θp = θ[1:p]
        res = _relative_norms(view(Hc, :, 1:w) * Z[:, 1:p], top)
        stop = step!(mon, θp, res, top; steps, cost)
        steps, cost = 0, 0.0
        if !(stop || full)
            dueat = due(mon)
            continue
        end
        V = view(Vb, :, 1:w) * Z[:, 1:p]
        if stop && mon.certified
            # the certificate: residuals computed from a product with A
            res = _relative_norms(sgn .* (A * V) .- V .* transpose(θp), top)
            stop = confirm!(mon, θp, res, top, _unit(n, n, p))
        end
        stop && return V, θp
        dueat = due(mon)
        if full
            # thick restart: the p Ritz pairs and the next block
            HZ = view(Hc, :, 1:w) * Z[:, 1:p]
            Vb[:, 1:p] .= V
            w = p
            fill!(Tm, zero(T))
            Tm[1:p, 1:p] .= LinearAlgebra.Diagonal(θp)
            fill!(Hc, zero(T))
            Hc[:, 1:p] .= HZ
        end
    end
end

"""
    svd_topk(A, k; method=:auto, oversample=nothing, n_iter=nothing, rtol=nothing,
             maxiter=500, degeneracy_atol=nothing) -> SVD

The top `k` singular triplets of `A` (plain `U`, `S`, `Vt`), as `svd(A; k)` returns
them, without a full SVD where that pays. `method`: `:auto` iterates only where that
is predicted to be much cheaper than the full SVD and keeps only a certified result
(else the full path: exact on every spectrum), by subspace iteration handing over to
block Krylov where its cost model predicts that cheaper; `:randomized` (subspace
iteration) and `:krylov` (block Krylov) always iterate and return what they have, with
a warning giving the measured residual when it is not certified; `:full` is
`svd(A; k)`. `oversample` (default `max(10, k)`) sets the block
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
