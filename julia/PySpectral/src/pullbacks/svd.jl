# SVD pullbacks: plain functions of arrays, no AD engine. Each adds its gradient to
# `ΔA` (so a zeroed buffer gets the gradient) and leaves its other arguments alone.
# A zero cotangent is `nothing` (or, with ChainRulesCore, an `AbstractZero`).

_addmul!(ΔA, X, Y) = (ΔA .+= X * Y; ΔA)

_skew(::Nothing) = nothing
_skew(J) = J - J'

# (Jₐ + Kₐ, Jₐ - Kₐ) with Jₐ = J - Jᴴ, Kₐ = K - Kᴴ (`nothing`: 0; at least one is
# present): as (J + K) - (J + K)ᴴ and (J - K) - (J - K)ᴴ, two new matrices made
# anti-Hermitian in place, instead of six (at 256×256 each is a pass and 0.5 MB
# for the garbage collector).
_skew_sum_difference(J, ::Nothing) = (Jₐ = _skew(J); (Jₐ, copy(Jₐ)))
_skew_sum_difference(::Nothing, K) = (Kₐ = _skew(K); (Kₐ, -Kₐ))
_skew_sum_difference(J, K) = (_skew!(J + K), _skew!(J - K))

_plus(::Nothing, ::Nothing) = nothing
_plus(a, ::Nothing) = a
_plus(::Nothing, b) = b
_plus(a, b) = a + b

# max |P[i, j]| over the pairs of one degenerate cluster, |λⱼ - λᵢ| <= tol (i = j included).
function _cluster_max(P, λ, tol)
    viol = zero(real(eltype(P)))
    for j in 1:length(λ), i in 1:length(λ)
        abs(λ[j] - λ[i]) <= tol && (viol = max(viol, abs(P[i, j])))
    end
    return viol
end

function _add_diagonal!(M, Δλ)
    iszerotangent(Δλ) && return M
    length(Δλ) == size(M, 1) ||
        throw(DimensionMismatch("cotangent of the spectrum has length $(length(Δλ)), " *
                                "expected $(size(M, 1))"))
    for (i, x) in enumerate(Δλ)
        M[i, i] += real(x)  # the spectrum is real: only the real part of its cotangent acts
    end
    return M
end

_adjoint_matrix(x) = iszerotangent(x) ? nothing : Matrix(x')

"""
    svd_pullback!(ΔA, U, S, Vᴴ, ΔU, ΔS, ΔVᴴ; degeneracy_atol=nothing,
                  broadening=nothing, gauge=:warn, gauge_atol=nothing) -> ΔA

Add to `ΔA` (m×n) the gradient w.r.t. `A = U Diagonal(S) Vᴴ` given the cotangents
`ΔU`, `ΔS`, `ΔVᴴ` of its thin (`U` m×k, `Vᴴ` k×n) or full (`U` m×m, `Vᴴ` n×n, `S`
length k) SVD; any cotangent may be `nothing`. With `J = UᴴΔU`, `K = VᴴΔV`,
`Jₐ = J - Jᴴ`, `Kₐ = K - Kᴴ`:

    ΔA = U M Vᴴ + (ΔU - U J) Sinv Vᴴ + U Sinv (ΔVᴴ - Kᴴ Vᴴ)
    Mᵢⱼ = (Jₐ + Kₐ)ᵢⱼ inv(sⱼ - sᵢ)/2 + (Jₐ - Kₐ)ᵢⱼ inv(sⱼ + sᵢ)/2 + δᵢⱼ ΔSᵢ

where every `inv` is [`gap_inverse`](@ref)`(x, degeneracy_atol, broadening)` (0 inside
a cluster, pseudo-inverse at zero singular values) and an entry of `Jₐ ± Kₐ` within its
rounding error of 0 ([`cut_rounding`](@ref)) counts as 0. The part of `Jₐ + Kₐ` inside
clusters (diagonal included: complex phases) is gauge dependent and dropped; when it
exceeds `gauge_atol` (default [`default_gauge_atol`](@ref)) the `gauge` policy applies
(see [`check_gauge`](@ref)), as it does where `ΔS` weights a cluster's members
unequally ([`check_weights`](@ref): the loss is then not a symmetric function of the
cluster, e.g. `U Diagonal(S) Vᴴ`, and its gradient needs [`svd_function`](@ref)). For full factors the extra columns are folded in first,
`ΔU_k -= Up (ΔUpᴴ U_k)` (likewise `V`). For the top `k` triplets, pass the full thin
SVD with zero cotangent columns for the discarded ones.
"""
function svd_pullback!(ΔA::AbstractMatrix, U::AbstractMatrix, S::AbstractVector,
                       Vᴴ::AbstractMatrix, ΔU, ΔS, ΔVᴴ; degeneracy_atol=nothing,
                       broadening=nothing, gauge=:warn, gauge_atol=nothing)
    # Derivation (Townsend 2016; Wan & Zhang 2019; PyTorch's svd_backward;
    # MatrixAlgebraKit.jl's svd_pullback!). With dP = Uᴴ dA V, the anti-Hermitian
    # Ω = Uᴴ dU solves dPᵢⱼ sⱼ + conj(dPⱼᵢ) sᵢ = (sⱼ² - sᵢ²) Ωᵢⱼ, and likewise for V.
    # Pairing with the cotangents and splitting sⱼ/(sⱼ² - sᵢ²) into partial fractions
    # gives M above: the first term has the small gaps sⱼ - sᵢ, and inside a cluster it
    # is 0/0; a gauge-invariant loss has (Jₐ + Kₐ)ᵢⱼ = 0 there, so it is set to 0 and
    # what is left is measured. The second term on the diagonal is the complex phase
    # term i Im(Jᵢᵢ - Kᵢᵢ)/(2sᵢ). Projector terms as ΔU - U J, never I - U Uᴴ.
    k = length(S)
    m, n = size(U, 1), size(Vᴴ, 2)
    size(ΔA) == (m, n) ||
        throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected ($m, $n)"))
    checks = _checks_gauge(gauge)
    if size(U, 2) > k || size(Vᴴ, 1) > k
        U, ΔU = _fold_complement(U, ΔU, k, gauge, gauge_atol, checks)
        V, ΔV = _fold_complement(Matrix(Vᴴ'), _adjoint_matrix(ΔVᴴ), k, gauge, gauge_atol,
                                 checks)
        Vᴴ, ΔVᴴ = V', _adjoint_matrix(ΔV)
    end
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(S) : degeneracy_atol
    if iszerotangent(ΔU) && iszerotangent(ΔVᴴ)
        iszerotangent(ΔS) && return ΔA
        check_weights(:svd, real.(ΔS), S, tol, gauge; gauge_atol)
        return _addmul!(ΔA, U .* transpose(real.(ΔS)), Vᴴ)
    end

    M, J, K = svd_middle(U, S, Vᴴ, ΔU, ΔS, ΔVᴴ, tol; broadening, gauge, gauge_atol)
    _addmul!(ΔA, U, M * Vᴴ)
    ginv(x) = gap_inverse(x, tol, broadening)
    Sinv = transpose(ginv.(S))
    m > k && J !== nothing && _addmul!(ΔA, (ΔU - U * J) .* Sinv, Vᴴ)
    n > k && K !== nothing && _addmul!(ΔA, U .* Sinv, ΔVᴴ - K' * Vᴴ)
    return ΔA
end

"""
    svd_middle(U, S, Vᴴ, ΔU, ΔS, ΔVᴴ, tol; broadening=nothing, gauge=:warn,
               gauge_atol=nothing, gauge_extra=0) -> (M, J, K)

The middle matrix `M` of [`svd_pullback!`](@ref) (`ΔA = U M Vᴴ + complement terms`) for
thin factors and degeneracy tolerance `tol`, with `J = UᴴΔU` and `K = VᴴΔV` (`nothing`
for an absent cotangent); applies the gauge policy to the cluster part of `Jₐ + Kₐ` and
`gauge_extra` (a violation the truncated pullback measured outside the block).
At least one of `ΔU`, `ΔVᴴ` is present. The truncated pullback uses it on the certified
block, which it completes with its own complement terms.
"""
function svd_middle(U, S, Vᴴ, ΔU, ΔS, ΔVᴴ, tol; broadening=nothing, gauge=:warn,
                    gauge_atol=nothing, gauge_extra=0)
    J = iszerotangent(ΔU) ? nothing : U' * ΔU
    K = iszerotangent(ΔVᴴ) ? nothing : Vᴴ * ΔVᴴ'
    # A numerator within its rounding error of 0 counts as 0: divided by a gap just
    # above the degeneracy tolerance, that noise would be the gradient of a loss that
    # does not depend on the pair's rotation (common/safemethods.jl).
    # (Only where a gap is small enough for it to matter; see rounding_cut_window.)
    m, n = size(U, 1), size(Vᴴ, 2)
    P, Q = _skew_sum_difference(J, K)  # (new: cut and combined in place below)
    differences, tail = rounding_cut_window(S, m + n; descending=true)
    k = length(S)
    if differences || tail <= k
        c = _numerator_rounding(ΔU, ΔVᴴ, m, n)
        differences && _cut_pairs!(P, c)
        # (outside the trailing block the bound is 0: only an exact 0 would be cut)
        tail <= k && _cut_pairs!(view(Q, tail:k, tail:k), view(c, tail:k))
    end
    if _checks_gauge(gauge)
        gtol = gauge_atol === nothing ? default_gauge_atol(ΔU, ΔVᴴ) : gauge_atol
        check_cluster_gauge(:svd, P, S, tol, gtol, gauge; extra=gauge_extra,
                            default_tol=gauge_atol === nothing)
        iszerotangent(ΔS) || check_weights(:svd, real.(ΔS), S, tol, gauge; gauge_atol)
    end
    ginv(x) = gap_inverse(x, tol, broadening)
    Sⱼ = transpose(S)
    M = P .= P .* (ginv.(Sⱼ .- S) ./ 2) .+ Q .* (ginv.(Sⱼ .+ S) ./ 2)
    _add_diagonal!(M, ΔS)
    return M, J, K
end

# c with cᵢ + cⱼ a bound on the rounding error of (Jₐ ± Kₐ)ᵢⱼ (J = UᴴΔU: m rows;
# K = VᴴΔV: n rows, ΔV's columns are ΔVᴴ's rows); at least one cotangent is present.
function _numerator_rounding(ΔU, ΔVᴴ, m, n)
    iszerotangent(ΔU) && return column_rounding(ΔVᴴ, n; dims=2)
    c = column_rounding(ΔU, m)
    iszerotangent(ΔVᴴ) && return c
    return c .+ column_rounding(ΔVᴴ, n; dims=2)
end

# Full factors: the complement Up = U[:, k+1:end] is arbitrary up to Up → Up Q, so a
# loss that is exact here sees it through its span; its cotangent then acts on U_k
# only through orthogonality, ΔU_k -= Up (ΔUpᴴ U_k). The basis-dependent part,
# skew(Upᴴ ΔUp), is measured like any gauge dependence. Returns plain matrices.
function _fold_complement(U, ΔU, k, gauge, gauge_atol, checks; op::Symbol=:svd)
    Uk = Matrix(view(U, :, 1:k))
    iszerotangent(ΔU) && return Uk, nothing
    size(ΔU, 2) == k && return Uk, ΔU
    Up, ΔUp = view(U, :, k+1:size(U, 2)), view(ΔU, :, k+1:size(ΔU, 2))
    if checks
        B = Up' * ΔUp
        gtol = gauge_atol === nothing ? default_gauge_atol(ΔU) : gauge_atol
        check_gauge(op, _maxabs(B - B'), gtol, gauge)
    end
    return Uk, ΔU[:, 1:k] - Up * (ΔUp' * Uk)
end

"""
    svdvals_pullback!(ΔA, U, S, Vᴴ, ΔS) -> ΔA

Add `U Diagonal(ΔS) Vᴴ` (first `length(S)` columns/rows of `U`, `Vᴴ`) to `ΔA`: the
gradient of the singular values, exact for symmetric functions of them at every
spectrum.
"""
function svdvals_pullback!(ΔA::AbstractMatrix, U::AbstractMatrix, S::AbstractVector,
                           Vᴴ::AbstractMatrix, ΔS)
    iszerotangent(ΔS) && return ΔA
    k = length(S)
    length(ΔS) == k || throw(DimensionMismatch("ΔS has length $(length(ΔS)), expected $k"))
    return _addmul!(ΔA, view(U, :, 1:k) .* transpose(real.(ΔS)), view(Vᴴ, 1:k, :))
end

# The divided differences of the derivative of U f(S) Vᴴ, shared by its pullback and
# pushforward: Lmᵢⱼ = f[sᵢ, sⱼ], Lpᵢⱼ = f[sᵢ, -sⱼ] (f extended as an odd function) and
# the complement weights wᵢ = f[sᵢ, 0] (zero when `complement` is false: a square input
# has no complement).
function _svd_function_weights(S, fS, dS, complement::Bool)
    Sⱼ, fⱼ, dⱼ = transpose(S), transpose(fS), transpose(dS)
    Lm = divdiff.(S, Sⱼ, fS, fⱼ, dS, dⱼ)
    Lp = divdiff.(S, .-Sⱼ, fS, .-fⱼ, dS, dⱼ)
    w = complement ? divdiff.(S, zero(eltype(S)), fS, zero(eltype(fS)), dS, dS) :
        zeros(eltype(Lm), length(S))
    return Lm, Lp, w
end

"""
    svd_function_pullback!(ΔA, U, S, Vᴴ, f, ΔY; degeneracy_atol=nothing) -> ΔA

Add to `ΔA` the gradient of `Y = U f(S) Vᴴ` (see [`svd_function`](@ref) for `f`) with
cotangent `ΔY`. With `X = Uᴴ ΔY V`, `Lmᵢⱼ = divdiff(sᵢ, sⱼ, fᵢ, fⱼ, f′ᵢ, f′ⱼ)`,
`Lpᵢⱼ = divdiff(sᵢ, -sⱼ, fᵢ, -fⱼ, f′ᵢ, f′ⱼ)` and `wᵢ = divdiff(sᵢ, 0, fᵢ, 0, f′ᵢ, f′ᵢ)`:

    ΔA = U (Lm ∘ (X + Xᴴ)/2 + Lp ∘ (X - Xᴴ)/2) Vᴴ
       + (ΔY V - U X) Diagonal(w) Vᴴ      (m > k)
       + U Diagonal(w) (Uᴴ ΔY - X Vᴴ)      (n > k)

Exact at every spectrum (only divided differences of `f` appear); no gauge check. Where
`f′` is infinite (`(:pow, p)`, `0 < p < 1`, at an exact zero singular value) the
gradient is `±Inf` in the entries the infinite divided differences reach, finite
elsewhere, never NaN ([`with_infinite_weights`](@ref)).
"""
function svd_function_pullback!(ΔA::AbstractMatrix, U::AbstractMatrix, S::AbstractVector,
                                 Vᴴ::AbstractMatrix, f, ΔY; degeneracy_atol=nothing)
    # dY = U (Lm ∘ sym(dP) + Lp ∘ skew(dP)) Vᴴ + the one-sided complement terms, with
    # dP = Uᴴ dA V and L± the divided differences of the odd extension of f. The map
    # is self-adjoint entrywise, so the pullback has the same form in X = Uᴴ ΔY V.
    iszerotangent(ΔY) && return ΔA
    f = _fspec(f)
    k = length(S)
    U, Vᴴ = view(U, :, 1:k), view(Vᴴ, 1:k, :)
    m, n = size(U, 1), size(Vᴴ, 2)
    X = U' * ΔY * Vᴴ'
    f === :normalize && return _normalize_pullback!(ΔA, U, S, Vᴴ, X, ΔY)
    fS, dS = svd_function_values(f, S; degeneracy_atol)
    tall, wide = m > k, n > k
    Lm, Lp, w = _svd_function_weights(S, fS, dS, tall || wide)
    # An infinite f′ (sqrt at s = 0) makes some weights infinite: ±Inf where they
    # reach, finite elsewhere (with_infinite_weights).
    G = with_infinite_weights(infinite_weights_tol(ΔY), Lm, Lp, w) do Lmw, Lpw, ww
        B = U * ((Lmw .* (X .+ X') .+ Lpw .* (X .- X')) ./ 2) * Vᴴ
        wᵀ = transpose(ww)
        tall && (B += ((ΔY * Vᴴ' - U * X) .* wᵀ) * Vᴴ)
        wide && (B += (U .* wᵀ) * (U' * ΔY - X * Vᴴ))
        return B
    end
    ΔA .+= G
    return ΔA
end

# Y = A / s₁ with s₁ = maximum(S): ΔA = ΔY / s₁ - Re⟨A, ΔY⟩ / s₁² u₁v₁ᴴ, and
# Re⟨A, ΔY⟩ = Σᵢ sᵢ Re Xᵢᵢ.
function _normalize_pullback!(ΔA, U, S, Vᴴ, X, ΔY)
    isempty(S) && return ΔA
    s₁ = _smax(S)
    c = sum(i -> S[i] * real(X[i, i]), 1:length(S)) / s₁^2
    ΔA .+= ΔY ./ s₁ .- c .* view(U, :, 1) .* transpose(view(Vᴴ, 1, :))
    return ΔA
end

# ------------------------------------------------------------------ pushforwards
# Forward mode: the transposes of the pullbacks above, with the same gap inverses,
# tolerances and cluster rule (pyspectral/pullbacks/svd.py has the same functions).
# They return new tangents and leave their arguments alone.

"""
    svd_pushforward(U, S, Vᴴ, ΔA; degeneracy_atol=nothing, broadening=nothing)
        -> (ΔU, ΔS, ΔVᴴ)

Tangents of the thin (`U` m×k, `Vᴴ` k×n) or full (`U` m×m, `Vᴴ` n×n, `S` length k) SVD
`A = U Diagonal(S) Vᴴ` along `ΔA`: the transpose of [`svd_pullback!`](@ref), same
cluster rule. With `ΔP = Uᴴ ΔA V`, `H = (ΔP + ΔPᴴ)/2`, `K = (ΔP - ΔPᴴ)/2`:

    Uᴴ ΔU = H ∘ inv(sⱼ - sᵢ) + K ∘ inv(sⱼ + sᵢ),   ΔS = real(diag(ΔP)),
    Vᴴ ΔV = H ∘ inv(sⱼ - sᵢ) - K ∘ inv(sⱼ + sᵢ),

each `inv` the pullback's [`gap_inverse`](@ref) (0 inside a degenerate cluster: no
rotation there; pseudo-inverses at zero singular values), plus the one-sided terms
`(ΔA V - U ΔP) Sinv` (m > k) and `(ΔAᴴ U - V ΔPᴴ) Sinv` (n > k). The complex phase
`i Im(ΔPᵢᵢ)/sᵢ` is split equally between `uᵢ` and `vᵢ`, as in the pullback. The extra
columns of full factors move only as much as orthogonality to the first `k` requires
(their basis inside the complement is arbitrary, as in the pullback's fold).
"""
function svd_pushforward(U::AbstractMatrix, S::AbstractVector, Vᴴ::AbstractMatrix,
                         ΔA::AbstractMatrix; degeneracy_atol=nothing, broadening=nothing,
                         adapted::Bool=false, gauge=:warn)
    # With Ω_U = Uᴴ dU and Ω_V = Vᴴ dV anti-Hermitian, dP = Ω_U S + dS - S Ω_V; its
    # Hermitian and anti-Hermitian parts give Ω_U ± Ω_V entrywise as above (the diagonal
    # of the second term is the phase i Im(dPᵢᵢ)/(2sᵢ) for each of U and V). No rounding
    # cut here (the pullback's cut_rounding): dP is data, the tangent's own components,
    # not a difference that is 0 for a class of inputs, so there is no exact 0 to snap a
    # small Hᵢⱼ to.
    k = length(S)
    m, n = size(U, 1), size(Vᴴ, 2)
    size(ΔA) == (m, n) ||
        throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected ($m, $n)"))
    Uk, Vk = U[:, 1:k], Matrix(view(Vᴴ, 1:k, :)')
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(S) : degeneracy_atol
    ginv(x) = gap_inverse(x, tol, broadening)
    ΔAV = ΔA * Vk
    ΔP = Uk' * ΔAV
    H, K = (ΔP + ΔP') / 2, (ΔP - ΔP') / 2
    Sⱼ = transpose(S)
    Hg = H .* ginv.(Sⱼ .- S)
    Ks = K .* ginv.(Sⱼ .+ S)
    ΔS = [real(ΔP[i, i]) for i in 1:k]
    ΔU, ΔV = Uk * (Hg + Ks), Vk * (Hg - Ks)
    Sinv = transpose(ginv.(S))
    m > k && (ΔU += (ΔAV - Uk * ΔP) .* Sinv)
    n > k && (ΔV += (ΔA' * Uk - Vk * ΔP') .* Sinv)
    if adapted && broadening === nothing
        # the basis adapted to ΔA (svd_adapted): the branch's rotation inside each split
        # cluster of nonzero values, common to U and V (the Hermitian dilation's
        # eigenvectors [u; v]/√2): N = (Uᴴ ΔA ΔV + Vᴴ ΔAᴴ ΔU)/2, Ωᵢⱼ = Nᵢⱼ / (μⱼ - μᵢ)
        pairs = [i != j && abs(S[i] - S[j]) <= tol && S[i] > tol && S[j] > tol
                 for i in 1:k, j in 1:k]
        if any(pairs)
            t = split_tol(ΔA)
            check_cluster_split(:svd, H, pairs, t, gauge)
            Ω = branch_rotation((Uk' * (ΔA * ΔV) + Vk' * (ΔA' * ΔU)) / 2, ΔS,
                                pairs .& rounding_clusters(S), t)
            ΔU, ΔV = ΔU + Uk * Ω, ΔV + Vk * Ω
        end
    end
    ΔU = _complement_tangent(U, Uk, ΔU)
    ΔV = _complement_tangent(Matrix(Vᴴ'), Vk, ΔV)
    return ΔU, ΔS, Matrix(ΔV')
end

"""
    svd_adapted(F::SVD, ΔA; degeneracy_atol=nothing, broadening=nothing) -> SVD

`F` with its thin factors rotated (`U_k R`, `Rᴴ Vᴴ_k`) to the basis adapted to the
tangent `ΔA` inside each cluster of nonzero singular values degenerate to rounding that
`ΔA` splits: the eigenvectors of its block of `herm(Uᴴ ΔA V)`, largest first
([`adapted_rotation`](@ref)); `F` itself where nothing is rotated.
"""
function svd_adapted(F::SVD, ΔA::AbstractMatrix; degeneracy_atol=nothing, broadening=nothing)
    broadening === nothing || return F
    k = length(F.S)
    Uk, Vᴴk = F.U[:, 1:k], F.Vt[1:k, :]
    P = Uk' * ΔA * Vᴴk'
    tol = degeneracy_atol === nothing ? default_degeneracy_atol(F.S) : degeneracy_atol
    R = adapted_rotation(F.S, (P + P') / 2, split_tol(ΔA), true; eligible=F.S .> tol)
    R === nothing && return F
    U, Vᴴ = copy(F.U), copy(F.Vt)
    U[:, 1:k], Vᴴ[1:k, :] = Uk * R, R' * Vᴴk
    return SVD(U, F.S, Vᴴ)
end

# The tangent of the columns k+1:end of full factors: ΔUp = -U_k (ΔU_kᴴ Up), the least
# motion that keeps [U_k Up] unitary (no rotation inside the complement); the transpose
# of `_fold_complement`.
function _complement_tangent(U, Uk, ΔUk)
    k = size(Uk, 2)
    size(U, 2) == k && return ΔUk
    Up = view(U, :, k+1:size(U, 2))
    return hcat(ΔUk, -Uk * (ΔUk' * Up))
end

"""
    svd_function_pushforward(U, S, Vᴴ, f, ΔA; degeneracy_atol=nothing) -> ΔY

Tangent of `Y = U f(S) Vᴴ` (see [`svd_function`](@ref) for `f`) along `ΔA`, exact at
every spectrum: the map of [`svd_function_pullback!`](@ref) (self-adjoint entrywise)
applied to `ΔA`. With `ΔP = Uᴴ ΔA V` and the same divided differences `Lm`, `Lp`, `w`:

    ΔY = U (Lm ∘ (ΔP + ΔPᴴ)/2 + Lp ∘ (ΔP - ΔPᴴ)/2) Vᴴ
       + (ΔA V - U ΔP) Diagonal(w) Vᴴ      (m > k)
       + U Diagonal(w) (Uᴴ ΔA - ΔP Vᴴ)      (n > k)

`:normalize` (`Y = A / s₁`): `ΔY = ΔA / s₁ - real(ΔP₁₁) / s₁² U Diagonal(S) Vᴴ`. Where
`f′` is infinite the tangent is `±Inf` where the infinite divided differences reach,
finite elsewhere, never NaN ([`with_infinite_weights`](@ref), at the scale of `ΔA`).
"""
function svd_function_pushforward(U::AbstractMatrix, S::AbstractVector, Vᴴ::AbstractMatrix,
                                  f, ΔA::AbstractMatrix; degeneracy_atol=nothing)
    f = _fspec(f)
    k = length(S)
    U, Vᴴ = view(U, :, 1:k), view(Vᴴ, 1:k, :)
    m, n = size(U, 1), size(Vᴴ, 2)
    size(ΔA) == (m, n) ||
        throw(DimensionMismatch("ΔA has size $(size(ΔA)), expected ($m, $n)"))
    ΔAV = ΔA * Vᴴ'
    ΔP = U' * ΔAV
    f === :normalize && return _normalize_pushforward(U, S, Vᴴ, ΔA, ΔP)
    fS, dS = svd_function_values(f, S; degeneracy_atol)
    tall, wide = m > k, n > k
    Lm, Lp, w = _svd_function_weights(S, fS, dS, tall || wide)
    return with_infinite_weights(infinite_weights_tol(ΔA), Lm, Lp, w) do Lmw, Lpw, ww
        ΔY = U * ((Lmw .* (ΔP .+ ΔP') .+ Lpw .* (ΔP .- ΔP')) ./ 2) * Vᴴ
        wᵀ = transpose(ww)
        tall && (ΔY += ((ΔAV - U * ΔP) .* wᵀ) * Vᴴ)
        wide && (ΔY += (U .* wᵀ) * (U' * ΔA - ΔP * Vᴴ))
        return ΔY
    end
end

# Y = A / s₁: ΔY = ΔA / s₁ - Δs₁ / s₁² A with Δs₁ = real(u₁ᴴ ΔA v₁) = real(ΔP₁₁) and
# A = U Diagonal(S) Vᴴ; the transpose of _normalize_pullback!.
function _normalize_pushforward(U, S, Vᴴ, ΔA, ΔP)
    isempty(S) && return float.(ΔA)  # Y = A: no singular value to divide by
    s₁ = _smax(S)
    return ΔA ./ s₁ .- (real(ΔP[1, 1]) / s₁^2) .* ((U .* transpose(S)) * Vᴴ)
end

# --------------------------------------------------------------- truncation

"""
    tsvd_pullback!(ΔA, U, S, Vᴴ, r, ΔU, ΔS, ΔVᴴ, Δϵ; degeneracy_atol=nothing,
                   broadening=nothing, gauge=:warn, gauge_atol=nothing) -> ΔA

Add to `ΔA` the gradient of [`tsvd`](@ref)'s outputs, the top `r` triplets and the
truncation error `ϵ = norm(S[r+1:end])`, from their cotangents (`ΔU` m×r, `ΔS`, `ΔVᴴ`
r×n, a real `Δϵ`; any may be `nothing`), given the whole thin SVD `U, S, Vᴴ`: the rank
is piecewise constant in `A`, so this is [`svd_pullback!`](@ref) on all triplets with
the kept cotangents, zero past `r` (the exact coupling to the discarded triplets), and
`∂ϵ/∂Sᵢ = Sᵢ / ϵ` on the discarded singular values (none when `ϵ = 0`, the subgradient 0
of a norm at 0). pyspectral's `svd(...; return_error=True)` is this formula.
"""
function tsvd_pullback!(ΔA::AbstractMatrix, U::AbstractMatrix, S::AbstractVector,
                        Vᴴ::AbstractMatrix, r::Integer, ΔU, ΔS, ΔVᴴ, Δϵ; kw...)
    K = length(S)
    ΔU, ΔS, ΔVᴴ, Δϵ = map(x -> iszerotangent(x) ? nothing : x, (ΔU, ΔS, ΔVᴴ, Δϵ))
    ΔSall = _truncated_values_cotangent(S, 1:r, r+1:K, S, r, ΔS, Δϵ)
    return svd_pullback!(ΔA, U, S, Vᴴ, _zero_pad_columns(ΔU, K), ΔSall,
                         _zero_pad_rows(ΔVᴴ, K); kw...)
end

# The cotangent of all values `x` from those of the kept ones (at `kept`, `Δx`) and of
# the truncation error `ϵ = truncation_error(wanted, r)` of the discarded ones (at
# `discarded`; `wanted`: the values read from the wanted end): `Δϵ xᵢ / ϵ` there.
function _truncated_values_cotangent(x, kept, discarded, wanted, r, Δx, Δϵ)
    (Δx === nothing && Δϵ === nothing) && return nothing
    Δ = zeros(real(float(eltype(x))), length(x))
    Δx === nothing || (Δ[kept] .= real.(Δx))
    if Δϵ !== nothing
        ϵ = truncation_error(wanted, r)
        ϵ > 0 && (Δ[discarded] .= real(Δϵ) .* view(x, discarded) ./ ϵ)
    end
    return Δ
end
