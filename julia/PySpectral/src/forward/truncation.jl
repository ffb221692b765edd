# Truncation rules: how many leading values of a spectrum a truncated `svd` / `eigh`
# keeps. The same rules, in the same words, as pyspectral/forward/truncation.py; change
# them in both places or in neither.
#
# The spectrum `x` is given from the wanted end, descending: the singular values as `svd`
# returns them; for `eigh` the eigenvalues from the largest (`largest = true`) or, negated,
# from the smallest (`largest = false`). Each rule gives a number of leading values to
# keep, and the rank is the smallest:
#
#   k                        at most k;
#   atol, rtol               the values xᵢ > max(atol, rtol |x₁|) (`nothing` counts as
#                            0), as torch.linalg.matrix_rank counts;
#   error_atol, error_rtol   the fewest leading values whose discarded tail has
#                            ‖x_discarded‖₂ <= max(error_atol, error_rtol ‖x‖₂).
#
# Then `multiplets` moves the cut to a multiplet boundary: `:cut` (default) leaves it,
# `:down` moves it down to the nearest boundary (the multiplet it would split is
# dropped), `:up` up (it is kept whole). Last, `min_rank` is a floor: at least
# `min(min_rank, length(x))` values (ITensor's `mindim`), zeros included, then moved up to
# a boundary again under `:up`; it never exceeds `k` (refused above it), and under `:down`
# the floor wins. A boundary after r values is r = 0,
# r = length(x), or a gap x[r] - x[r+1] > degeneracy_atol (default
# `maximum(abs, x) eps^(3/4)`, the package's degeneracy tolerance), so that no degenerate
# pair straddles the cut; a block of numerically zero values is a multiplet too.
#
# The rank is piecewise constant in A: the derivatives of a truncated decomposition are
# those of the fixed-rank problem at that rank (`tsvd_pullback!`, `teigh_pullback!`).

const MULTIPLETS = (:cut, :down, :up)

# Whether the truncation keywords ask for anything beyond the whole spectrum.
_truncates(k, atol, rtol, error_atol, error_rtol) =
    k !== nothing || any(x -> x !== nothing, (atol, rtol, error_atol, error_rtol))

_or_zero(x) = x === nothing ? 0 : x

"""
    truncation_rank(x; k=nothing, atol=nothing, rtol=nothing, error_atol=nothing,
                    error_rtol=nothing, multiplets=:cut, min_rank=nothing,
                    degeneracy_atol=nothing) -> Int

How many leading values of the spectrum `x` (descending from the wanted end) the rules
keep: the smallest of `k`; the count of `xᵢ > max(atol, rtol |x₁|)`; the fewest leading
values whose tail has `norm(x[r+1:end]) <= max(error_atol, error_rtol norm(x))` (each
rule only when given); then moved by `multiplets` (`:cut`, `:down`, `:up`) to a multiplet
boundary, a gap larger than `degeneracy_atol` (default
[`default_degeneracy_atol`](@ref)`(x)`); then raised to at least
`min(min_rank, length(x))` (and to a boundary again under `:up`). The tail norms are
[`tail_norms`](@ref).
"""
function truncation_rank(x::AbstractVector{<:Real}; k=nothing, atol=nothing, rtol=nothing,
                         error_atol=nothing, error_rtol=nothing, multiplets::Symbol=:cut,
                         min_rank=nothing, degeneracy_atol=nothing)
    K = length(x)
    r = k === nothing ? K : min(Int(k), K)
    least = min_rank === nothing ? 0 : min(Int(min_rank), r)
    (K == 0 || r == 0) && return r
    if atol !== nothing || rtol !== nothing
        threshold = max(_or_zero(atol), _or_zero(rtol) * abs(x[1]))
        r = min(r, count(>(threshold), x))
    end
    if error_atol !== nothing || error_rtol !== nothing
        r = min(r, _error_rank(x, _or_zero(error_atol), _or_zero(error_rtol)))
    end
    multiplets === :cut || (r = _multiplet_cut(x, r, multiplets, degeneracy_atol))
    if r < least
        r = least
        multiplets === :up && (r = _multiplet_cut(x, r, :up, degeneracy_atol))
    end
    return r
end

# The fewest leading values whose tail norm(x[r+1:end]) is at most
# max(error_atol, error_rtol norm(x)), both from `tail_norms`.
function _error_rank(x, error_atol, error_rtol)
    tail = tail_norms(x)
    target = max(tail[1] * error_rtol, error_atol)
    # keeping r values discards tail[r+1] (tail[K+1] = 0): r is the number of tails
    # above the target, as they do not increase with r
    return count(>(target), view(tail, 1:length(x)))
end

"""
    tail_norms(x) -> Vector

`norm(x[r+1:end])` for `r = 0, …, length(x)` (the last one 0): the one computation of a
truncation error. The discarded-weight rule compares these numbers and
[`truncation_error`](@ref) returns them, so an error fed back as `error_atol` gives the
same rank, ties included. Summed from the smallest value, in units of a power of two
near `maximum(abs, x)` (exact scaling: no overflow or underflow of the squares, and a
single discarded value is its own error exactly); pyspectral's `tail_norms` sums the
same numbers in the same order.
"""
function tail_norms(x::AbstractVector)
    K = length(x)
    T = float(real(eltype(x)))
    m = K == 0 ? zero(T) : maximum(abs, x)
    # 2^e with m = f 2^e, f in [0.5, 1), as frexp (Julia's exponent(m) is e - 1)
    c = m > 0 ? ldexp(one(T), exponent(T(m)) + 1) : one(T)
    sq = zeros(T, K + 1)
    for j in K:-1:1
        sq[j] = sq[j+1] + abs2(x[j] / c)
    end
    return [t > 0 ? c * sqrt(t) : zero(T) for t in sq]
end

# r moved to the nearest multiplet boundary below (:down) or above (:up) it.
function _multiplet_cut(x, r, direction, degeneracy_atol)
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(x) : degeneracy_atol
    K = length(x)
    boundary(j) = j == 0 || j == K || x[j] - x[j+1] > tol
    step = direction === :down ? -1 : 1
    while !boundary(r)
        r += step
    end
    return r
end

"""
    truncation_error(x, r) -> Real

The truncation error of keeping the first `r` values of `x`: `norm(x[r+1:end])`, the
2-norm of the discarded values (0 when none is), summed from them, never as a difference
of squares (which loses an error far below `norm(x)`): [`tail_norms`](@ref)`(x)[r+1]`,
the number the discarded-weight rule compares.
"""
truncation_error(x::AbstractVector, r::Integer) = tail_norms(x)[r+1]

# The spectrum of eigh (ascending λ) read from the wanted end, descending.
_wanted_first(λ, largest::Bool) = largest ? reverse(λ) : -λ

# The indices, in ascending λ, of the r eigenpairs kept at the wanted end.
_kept_range(n, r, largest::Bool) = largest ? (n-r+1:n) : (1:r)
