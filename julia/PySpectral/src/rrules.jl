# ChainRulesCore rrules: the forward call, then the plain pullbacks of src/pullbacks.
# Every pullback unthunks its cotangent, accepts every zero (`nothing`, `NoTangent`,
# `ZeroTangent`), `Adjoint` arrays, and structural tangents with any subset of fields.
#
# Zygote and `F.U`, `F.S`, `F.V`, `F.Vt`: ChainRules.jl (loaded by Zygote) defines
# `rrule(::typeof(getproperty), F::SVD, x::Symbol)`, giving `Tangent{SVD}` with field
# `U`, `S` or `Vt` (for `F.V`: `Vt = Ȳ'`). We do not define that rule ourselves:
# LinearAlgebra owns both `getproperty` and `SVD`, so it would be type piracy, and its
# signature equals ChainRules' (a method overwrite, an error during precompilation).
# Zygote turns those tangents into NamedTuples, adds them, and hands our pullback
# `Tangent{Any}(U=…, S=…, Vt=…)`; `Eigen` has plain fields and arrives the same way.

iszerotangent(::AbstractZero) = true

_nothing_if_zero(x) = iszerotangent(x) ? nothing : x

# One field of a structural cotangent; absent fields are zero.
_field(t::Tangent, name::Symbol) = _nothing_if_zero(unthunk(getproperty(t, name)))
_field(t::NamedTuple, name::Symbol) =
    haskey(t, name) ? _nothing_if_zero(unthunk(getfield(t, name))) : nothing
_field(t, ::Symbol) = throw(ArgumentError(
    "PySpectral: a cotangent of type $(typeof(t)) is not supported; pass a Tangent, a " *
    "NamedTuple or a zero"))

_svd_cotangents(::Union{Nothing,AbstractZero}) = (nothing, nothing, nothing)
function _svd_cotangents(ΔF)
    ΔU, ΔS, ΔVᴴ, ΔV = _field(ΔF, :U), _field(ΔF, :S), _field(ΔF, :Vt), _field(ΔF, :V)
    ΔV === nothing || (ΔVᴴ = ΔVᴴ === nothing ? ΔV' : ΔVᴴ + ΔV')
    return ΔU, ΔS, ΔVᴴ
end

_eigen_cotangents(::Union{Nothing,AbstractZero}) = (nothing, nothing)
_eigen_cotangents(ΔE) = (_field(ΔE, :values), _field(ΔE, :vectors))

_allzero(xs...) = all(iszerotangent, xs)

# Element type of a gradient buffer: the factors' type, widened by the cotangents'
# (ProjectTo then maps it back onto the input's type).
_grad_eltype(U, xs...) =
    mapreduce(x -> iszerotangent(x) ? Bool : eltype(x), promote_type, xs; init=eltype(U))

_pad_cols(x, K) = iszerotangent(x) ? nothing : hcat(x, zeros(eltype(x), size(x, 1), K - size(x, 2)))
_pad_rows(x, K) = iszerotangent(x) ? nothing : vcat(x, zeros(eltype(x), K - size(x, 1), size(x, 2)))
_pad_vec(x, K) = iszerotangent(x) ? nothing : vcat(x, zeros(eltype(x), K - length(x)))

function ChainRulesCore.rrule(::typeof(svd), A::AbstractMatrix; full::Bool=false,
                              k::Union{Nothing,Integer}=nothing, atol=nothing,
                              rtol=nothing, error_atol=nothing, error_rtol=nothing,
                              multiplets::Symbol=:cut, min_rank=nothing,
                              degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                              gauge_atol=nothing)
    # A truncation pulls back through all triplets, with zero cotangents on the
    # discarded ones: that is the exact coupling to the discarded spectrum (the rank is
    # piecewise constant in A: the fixed-rank problem's gradient).
    trunc = (; k, atol, rtol, error_atol, error_rtol, multiplets, min_rank)
    _check_truncation("svd", min(size(A)...), full; trunc...)
    Fall = svd(A; full, degeneracy_atol, broadening, gauge, gauge_atol)
    truncates = _truncates(k, atol, rtol, error_atol, error_rtol)
    r = truncates ? truncation_rank(Fall.S; trunc..., degeneracy_atol) : nothing
    F = r === nothing ? Fall : _topk(Fall, r)  # exactly what svd(A; ...) returns
    project_A, sz = ProjectTo(A), size(A)  # not A itself: the closure need not keep it
    function svd_back(ΔF)
        ΔU, ΔS, ΔVᴴ = _svd_cotangents(unthunk(ΔF))
        _allzero(ΔU, ΔS, ΔVᴴ) && return NoTangent(), ZeroTangent()
        if r !== nothing
            K = length(Fall.S)
            ΔU, ΔS, ΔVᴴ = _pad_cols(ΔU, K), _pad_vec(ΔS, K), _pad_rows(ΔVᴴ, K)
        end
        ΔA = zeros(_grad_eltype(Fall.U, ΔU, ΔS, ΔVᴴ), sz)
        svd_pullback!(ΔA, Fall.U, Fall.S, Fall.Vt, ΔU, ΔS, ΔVᴴ;
                      degeneracy_atol, broadening, gauge, gauge_atol)
        return NoTangent(), project_A(ΔA)
    end
    return F, svd_back
end

# The split composes svd's rule with the kept-cluster term (src/pullbacks/split.jl).
function ChainRulesCore.rrule(::typeof(svd_split), A::AbstractMatrix; absorb::Symbol=:both,
                              degeneracy_atol=nothing, kw...)
    absorb in ABSORB || throw(ArgumentError("svd_split: absorb must be :left, :right or " *
                                            ":both, got $(repr(absorb))"))
    F, svd_back = ChainRulesCore.rrule(svd, A; degeneracy_atol, kw...)
    g, _, h, _ = split_weights(F.S, absorb)
    r = length(F.S)
    project_A, sz = ProjectTo(A), size(A)
    function svd_split_back(Δ)
        ΔL, ΔR = _pair_cotangents(unthunk(Δ))
        ΔL = _nothing_if_zero(ΔL)
        (ΔL === nothing && ΔR === nothing) && return NoTangent(), ZeroTangent()
        ΔA = zeros(_grad_eltype(F.U, ΔL, ΔR), sz)
        ΔU, ΔS, ΔVᴴ = svd_split_pullback!(ΔA, F.U, F.S, F.Vt, r, absorb, ΔL, ΔR;
                                          degeneracy_atol)
        ΔF = Tangent{typeof(F)}(; U=_zero_if_nothing(ΔU), S=ΔS, Vt=_zero_if_nothing(ΔVᴴ))
        _, ΔA_svd = svd_back(ΔF)
        ΔA_svd = unthunk(ΔA_svd)
        ΔA_svd isa AbstractZero || (ΔA .+= ΔA_svd)
        return NoTangent(), project_A(ΔA)
    end
    return (F.U .* transpose(g), h .* F.Vt), svd_split_back
end

_zero_if_nothing(x) = x === nothing ? ZeroTangent() : x

# A tuple output's cotangent, (ΔF, Δϵ): a Tangent{Tuple} or, from Zygote, a Tuple.
_pair_cotangents(::Union{Nothing,AbstractZero}) = (nothing, nothing)
_pair_cotangents(Δ::Union{Tuple,Tangent}) = (unthunk(Δ[1]), _nothing_if_zero(unthunk(Δ[2])))

function ChainRulesCore.rrule(::typeof(tsvd), A::AbstractMatrix;
                              k::Union{Nothing,Integer}=nothing, atol=nothing,
                              rtol=nothing, error_atol=nothing, error_rtol=nothing,
                              multiplets::Symbol=:cut, min_rank=nothing,
                              degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                              gauge_atol=nothing)
    opts = (; degeneracy_atol, broadening, gauge, gauge_atol)
    Fall, r = _tsvd(A; k, atol, rtol, error_atol, error_rtol, multiplets, min_rank,
                    opts...)
    F, ϵ = _topk(Fall, r), truncation_error(Fall.S, r)  # exactly what tsvd returns
    project_A, sz = ProjectTo(A), size(A)  # not A itself: the closure need not keep it
    function tsvd_back(Δ)
        ΔF, Δϵ = _pair_cotangents(unthunk(Δ))
        ΔU, ΔS, ΔVᴴ = _svd_cotangents(ΔF)
        _allzero(ΔU, ΔS, ΔVᴴ, Δϵ) && return NoTangent(), ZeroTangent()
        ΔA = zeros(_grad_eltype(Fall.U, ΔU, ΔS, ΔVᴴ), sz)
        tsvd_pullback!(ΔA, Fall.U, Fall.S, Fall.Vt, r, ΔU, ΔS, ΔVᴴ, Δϵ; opts...)
        return NoTangent(), project_A(ΔA)
    end
    return (F, ϵ), tsvd_back
end

function ChainRulesCore.rrule(::typeof(svdvals), A::AbstractMatrix)
    F = svd(A)
    project_A, sz = ProjectTo(A), size(A)  # not A itself: the closure need not keep it
    function svdvals_back(ΔS)
        ΔS = unthunk(ΔS)
        iszerotangent(ΔS) && return NoTangent(), ZeroTangent()
        ΔA = zeros(_grad_eltype(F.U, ΔS), sz)
        # a loss that weights a degenerate cluster unequally has no exact gradient
        check_weights(:svd, real.(ΔS), F.S, default_degeneracy_atol(F.S), :warn)
        svdvals_pullback!(ΔA, F.U, F.S, F.Vt, ΔS)
        return NoTangent(), project_A(ΔA)
    end
    return F.S, svdvals_back
end

function ChainRulesCore.rrule(::typeof(svd_function), A::AbstractMatrix, f;
                              degeneracy_atol=nothing, gauge=:warn)
    F = svd(A)
    Y = _svd_function(A, F, f; degeneracy_atol, gauge)
    project_A, sz = ProjectTo(A), size(A)  # not A itself: the closure need not keep it
    function svd_function_back(ΔY)
        ΔY = unthunk(ΔY)
        iszerotangent(ΔY) && return NoTangent(), ZeroTangent(), NoTangent()
        ΔA = zeros(_grad_eltype(F.U, ΔY), sz)
        svd_function_pullback!(ΔA, F.U, F.S, F.Vt, f, ΔY; degeneracy_atol)
        return NoTangent(), project_A(ΔA), NoTangent()
    end
    return Y, svd_function_back
end

function ChainRulesCore.rrule(::typeof(eigh), A::AbstractMatrix; uplo::Symbol=:L,
                              check_hermitian::Bool=false, hermitian_tol=nothing,
                              degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                              gauge_atol=nothing)
    E = eigh(A; uplo, check_hermitian, hermitian_tol, degeneracy_atol, broadening, gauge,
             gauge_atol)
    project_A, sz = ProjectTo(A), size(A)  # not A itself: the closure need not keep it
    function eigh_back(ΔE)
        Δλ, ΔV = _eigen_cotangents(unthunk(ΔE))
        _allzero(Δλ, ΔV) && return NoTangent(), ZeroTangent()
        ΔA = zeros(_grad_eltype(E.vectors, Δλ, ΔV), sz)
        eigh_pullback!(ΔA, E.values, E.vectors, Δλ, ΔV;
                       uplo, degeneracy_atol, broadening, gauge, gauge_atol)
        return NoTangent(), project_A(ΔA)
    end
    return E, eigh_back
end

function ChainRulesCore.rrule(::typeof(teigh), A::AbstractMatrix; uplo::Symbol=:L,
                              largest::Bool=true, k::Union{Nothing,Integer}=nothing,
                              atol=nothing, rtol=nothing, error_atol=nothing,
                              error_rtol=nothing, multiplets::Symbol=:cut, min_rank=nothing,
                              check_hermitian::Bool=false, hermitian_tol=nothing,
                              degeneracy_atol=nothing, broadening=nothing, gauge=:warn,
                              gauge_atol=nothing)
    opts = (; degeneracy_atol, broadening, gauge, gauge_atol)
    Eall, r = _teigh(A; uplo, largest, k, atol, rtol, error_atol, error_rtol, multiplets,
                     min_rank, check_hermitian, hermitian_tol, opts...)
    # exactly what teigh returns
    E, ϵ = _kept_eigen(Eall, r, largest), _eigh_truncation_error(Eall.values, r, largest)
    project_A, sz = ProjectTo(A), size(A)  # not A itself: the closure need not keep it
    function teigh_back(Δ)
        ΔE, Δϵ = _pair_cotangents(unthunk(Δ))
        Δλ, ΔV = _eigen_cotangents(ΔE)
        _allzero(Δλ, ΔV, Δϵ) && return NoTangent(), ZeroTangent()
        ΔA = zeros(_grad_eltype(Eall.vectors, Δλ, ΔV), sz)
        teigh_pullback!(ΔA, Eall.values, Eall.vectors, r, Δλ, ΔV, Δϵ; uplo, largest,
                        opts...)
        return NoTangent(), project_A(ΔA)
    end
    return (E, ϵ), teigh_back
end

function ChainRulesCore.rrule(::typeof(eigvalsh), A::AbstractMatrix; uplo::Symbol=:L,
                              check_hermitian::Bool=false, hermitian_tol=nothing)
    E = eigh(A; uplo, check_hermitian, hermitian_tol)
    project_A, sz = ProjectTo(A), size(A)  # not A itself: the closure need not keep it
    function eigvalsh_back(Δλ)
        Δλ = unthunk(Δλ)
        iszerotangent(Δλ) && return NoTangent(), ZeroTangent()
        ΔA = zeros(_grad_eltype(E.vectors, Δλ), sz)
        eigh_pullback!(ΔA, E.values, E.vectors, Δλ, nothing; uplo)
        return NoTangent(), project_A(ΔA)
    end
    return E.values, eigvalsh_back
end

function ChainRulesCore.rrule(::typeof(matrix_function), A::AbstractMatrix, f;
                              uplo::Symbol=:L, check_hermitian::Bool=false,
                              hermitian_tol=nothing, degeneracy_atol=nothing)
    E = eigh(A; uplo, check_hermitian, hermitian_tol)
    Y = matrix_function_apply(E, f; degeneracy_atol)
    project_A, sz = ProjectTo(A), size(A)  # not A itself: the closure need not keep it
    function matrix_function_back(ΔY)
        ΔY = unthunk(ΔY)
        iszerotangent(ΔY) && return NoTangent(), ZeroTangent(), NoTangent()
        ΔA = zeros(_grad_eltype(E.vectors, ΔY), sz)
        matrix_function_pullback!(ΔA, E.values, E.vectors, f, ΔY; uplo, degeneracy_atol)
        return NoTangent(), project_A(ΔA), NoTangent()
    end
    return Y, matrix_function_back
end

# eig_function (src/pullbacks/eigfun.jl): the eigenbasis and V⁻¹ kept for the pullback.
function ChainRulesCore.rrule(::typeof(eig_function), A::AbstractMatrix, f)
    E = eig(A)
    Vinv = check_diagonalizable(E.values, E.vectors; op=:eig_function, pairs=false)
    real = !(eltype(A) <: Complex)
    Y = eig_function_apply(E.values, E.vectors, Vinv, f; real)
    project_A, sz = ProjectTo(A), size(A)  # not A itself: the closure need not keep it
    function eig_function_back(ΔY)
        ΔY = unthunk(ΔY)
        iszerotangent(ΔY) && return NoTangent(), ZeroTangent(), NoTangent()
        ΔA = zeros(real ? Base.real(eltype(E.vectors)) : eltype(E.vectors), sz)
        eig_function_pullback!(ΔA, E.values, E.vectors, Vinv, f, ΔY)
        return NoTangent(), project_A(ΔA), NoTangent()
    end
    return Y, eig_function_back
end

# Top-k: the forward's block (kept triplets, the certified extras, the preconditioning
# ones) goes to the truncated pullback, which multiplies by A again: the closures keep A.
function ChainRulesCore.rrule(::typeof(svd_topk), A::AbstractMatrix, k::Integer;
                              method::Symbol=:auto,
                              oversample::Union{Nothing,Integer}=nothing,
                              n_iter::Union{Nothing,Integer}=nothing, rtol=nothing,
                              maxiter::Integer=500, degeneracy_atol=nothing,
                              broadening=nothing, gauge=:warn, gauge_atol=nothing)
    _check_options("svd_topk"; rtol, maxiter, degeneracy_atol, broadening, gauge, gauge_atol)
    B = svd_topk_block(A, k; method, oversample, n_iter, rtol, maxiter, degeneracy_atol)
    F = SVD(B.U[:, 1:k], B.S[1:k], B.Vt[1:k, :])  # exactly what svd_topk returns
    project_A = ProjectTo(A)
    function svd_topk_back(ΔF)
        ΔU, ΔS, ΔVᴴ = _svd_cotangents(unthunk(ΔF))
        _allzero(ΔU, ΔS, ΔVᴴ) && return NoTangent(), ZeroTangent(), NoTangent()
        ΔA = zeros(_grad_eltype(F.U, ΔU, ΔS, ΔVᴴ), size(A))
        svd_trunc_pullback!(ΔA, A, B.U, B.S, B.Vt, ΔU, ΔS, ΔVᴴ; d=B.d, rtol, maxiter,
                            degeneracy_atol, broadening, gauge, gauge_atol)
        return NoTangent(), project_A(ΔA), NoTangent()
    end
    return F, svd_topk_back
end

function ChainRulesCore.rrule(::typeof(eigh_topk), A::AbstractMatrix, k::Integer;
                              uplo::Symbol=:L, largest::Bool=true, method::Symbol=:auto,
                              oversample::Union{Nothing,Integer}=nothing,
                              n_iter::Union{Nothing,Integer}=nothing, rtol=nothing,
                              maxiter::Integer=500, degeneracy_atol=nothing,
                              broadening=nothing, gauge=:warn, gauge_atol=nothing)
    _check_options("eigh_topk"; rtol, maxiter, degeneracy_atol, broadening, gauge,
                   gauge_atol)
    B = eigh_topk_block(A, k; uplo, largest, method, oversample, n_iter, rtol, maxiter,
                        degeneracy_atol)
    E = Eigen(B.values[1:k], B.vectors[:, 1:k])  # exactly what eigh_topk returns
    project_A = ProjectTo(A)
    function eigh_topk_back(ΔE)
        Δλ, ΔV = _eigen_cotangents(unthunk(ΔE))
        _allzero(Δλ, ΔV) && return NoTangent(), ZeroTangent(), NoTangent()
        ΔA = zeros(_grad_eltype(E.vectors, Δλ, ΔV), size(A))
        eigh_trunc_pullback!(ΔA, A, B.values, B.vectors, Δλ, ΔV; uplo, largest, d=B.d,
                             rtol, maxiter, degeneracy_atol, broadening, gauge, gauge_atol)
        return NoTangent(), project_A(ΔA), NoTangent()
    end
    return E, eigh_topk_back
end

# ------------------------------------------------------ qr, lq, polar, eig

# The cotangents of a pair output (a Tangent{Tuple} or, from Zygote, a Tuple), `nothing`
# for a zero one.
_two_cotangents(::Union{Nothing,AbstractZero}) = (nothing, nothing)
_two_cotangents(Δ::Union{Tuple,Tangent}) =
    (_nothing_if_zero(unthunk(Δ[1])), _nothing_if_zero(unthunk(Δ[2])))

# qr and lq: one rule each, over their pullbacks (the pair of factors in the order each
# returns them).
for (f, pullback!) in ((:qr, :qr_pullback!), (:lq, :lq_pullback!))
    @eval function ChainRulesCore.rrule(::typeof($f), A::AbstractMatrix; full::Bool=false,
                                        positive::Bool=false, rank_atol=nothing,
                                        gauge=:warn, gauge_atol=nothing)
        X, Y = $f(A; full, positive, rank_atol, gauge, gauge_atol)
        project_A, sz = ProjectTo(A), size(A)
        function factor_back(ΔXY)
            ΔX, ΔY = _two_cotangents(unthunk(ΔXY))
            _allzero(ΔX, ΔY) && return NoTangent(), ZeroTangent()
            ΔA = zeros(_grad_eltype(X, ΔX, ΔY), sz)
            $pullback!(ΔA, X, Y, ΔX, ΔY; rank_atol, gauge, gauge_atol)
            return NoTangent(), project_A(ΔA)
        end
        return (X, Y), factor_back
    end
end

function ChainRulesCore.rrule(::typeof(polar), A::AbstractMatrix; side::Symbol=:right,
                              degeneracy_atol=nothing)
    W, P, F = _polar(A, side, degeneracy_atol)
    project_A, sz = ProjectTo(A), size(A)
    function polar_back(ΔWP)
        ΔW, ΔP = _two_cotangents(unthunk(ΔWP))
        _allzero(ΔW, ΔP) && return NoTangent(), ZeroTangent()
        ΔA = zeros(_grad_eltype(W, ΔW, ΔP), sz)
        polar_pullback!(ΔA, W, P, F.U, F.S, F.Vt, ΔW, ΔP; side, degeneracy_atol)
        return NoTangent(), project_A(ΔA)
    end
    return (W, P), polar_back
end

function ChainRulesCore.rrule(::typeof(eig), A::AbstractMatrix; degeneracy_atol=nothing,
                              broadening=nothing, gauge=:warn, gauge_atol=nothing)
    E = eig(A; degeneracy_atol, broadening, gauge, gauge_atol)
    project_A, sz = ProjectTo(A), size(A)
    function eig_back(ΔE)
        Δλ, ΔV = _eigen_cotangents(unthunk(ΔE))
        _allzero(Δλ, ΔV) && return NoTangent(), ZeroTangent()
        ΔA = zeros(_grad_eltype(E.vectors, Δλ, ΔV), sz)
        eig_pullback!(ΔA, E.values, E.vectors, Δλ, ΔV;
                      degeneracy_atol, broadening, gauge, gauge_atol)
        return NoTangent(), project_A(ΔA)
    end
    return E, eig_back
end

function ChainRulesCore.rrule(::typeof(eigvals), A::AbstractMatrix)
    E = eig(A)
    project_A, sz = ProjectTo(A), size(A)
    function eigvals_back(Δλ)
        Δλ = unthunk(Δλ)
        iszerotangent(Δλ) && return NoTangent(), ZeroTangent()
        ΔA = zeros(_grad_eltype(E.vectors, Δλ), sz)
        eig_pullback!(ΔA, E.values, E.vectors, Δλ, nothing)
        return NoTangent(), project_A(ΔA)
    end
    return E.values, eigvals_back
end

# eig_topk: the subspace adjoint of src/pullbacks/eig_topk.jl, products by A' only; the
# gauge policy where the cotangent sees a basis or a phase inside a cluster, and the
# weights check, as eig's.
function ChainRulesCore.rrule(::typeof(eig_topk), A::AbstractMatrix, k::Integer,
                              which::Symbol=:LM; gauge=:warn, kw...)
    λ, V = eig_topk(A, k, which; kw...)
    T = eltype(V)
    rtol = get(kw, :tol, nothing)
    rtol = rtol === nothing ? eps(real(T))^(3 / 4) : rtol
    atol = get(kw, :degeneracy_atol, nothing)
    ctol = atol === nothing ? maximum(abs, λ) * max(eps(real(T))^(3 / 4), 100 * rtol) : atol
    project_A = ProjectTo(A)
    function eig_topk_back(Δ)
        Δλ, ΔV = unthunk.((Δ[1], Δ[2]))
        (Δλ isa AbstractZero && ΔV isa AbstractZero) &&
            return (NoTangent(), ZeroTangent(), NoTangent(), NoTangent())
        U, Nin = eig_topk_pullback!(similar(V), λ, V, Δλ, ΔV, x -> A' * x;
                                    cluster_tol=ctol, tol=rtol)
        if _checks_gauge(gauge)
            ΔV isa AbstractZero ||
                check_gauge(:eig_topk, maximum(abs, Nin; init=zero(real(T))),
                            default_gauge_atol(ΔV), gauge)
            Δλ isa AbstractZero || check_weights(:eig_topk, Δλ, λ, ctol, gauge)
        end
        return (NoTangent(), project_A(U * V'), NoTangent(), NoTangent())
    end
    return (λ, V), eig_topk_back
end

# linsolve: the adjoint solve of src/pullbacks/linsolve.jl; a0 and a1 are positional,
# so that they receive cotangents.
function ChainRulesCore.rrule(::typeof(linsolve), A::AbstractMatrix, b::AbstractVector,
                              a::Number...; kw...)
    x = linsolve(A, b, a...; kw...)
    a0, a1 = length(a) >= 1 ? a[1] : false, length(a) >= 2 ? a[2] : true
    project_A, project_b = ProjectTo(A), ProjectTo(b)
    project_a = map(ProjectTo, a)
    solver = (; (k => v for (k, v) in kw if k !== :x0)...)
    function linsolve_back(Δx)
        Δx = unthunk(Δx)
        Δx isa AbstractZero &&
            return (NoTangent(), ZeroTangent(), ZeroTangent(), map(_ -> ZeroTangent(), a)...)
        ΔA = zeros(eltype(x), size(A))
        Δb, Δa0, Δa1 = linsolve_pullback!(ΔA, A, x, Δx, a0, a1; solver...)
        Δa = map((p, d) -> p(d), project_a, (Δa0, Δa1)[1:length(a)])
        return (NoTangent(), project_A(ΔA), project_b(Δb), Δa...)
    end
    return x, linsolve_back
end

# fixed_point: implicit differentiation (src/pullbacks/fixed_point.jl) of the step with
# its gauge transformation frozen at x*; `f`'s own parameters (its closure) receive the
# gradient through one vjp of the frozen step, by the AD that called the rule.
function ChainRulesCore.rrule(config::RuleConfig{>:HasReverseMode}, ::typeof(fixed_point),
                              f, x0::AbstractArray; tol=nothing, maxiter::Integer=1000,
                              gauge_fix=nothing, backward_tol=nothing,
                              backward_krylovdim::Integer=30, backward_maxiter::Integer=20)
    tol = _fixed_point_tol(x0, tol)
    x, converged = _fixed_point(f, x0, tol, maxiter, gauge_fix)
    fix = gauge_fix === nothing ? identity : gauge_fix(f(x), x)
    out, back = rrule_via_ad(config, _frozen_step, f, fix, x)
    # (not converged: warned already, and the gradient is that of the state reached)
    err = norm(out - x) / max(norm(x), floatmin(Float64))
    !converged || err <= 10 * tol || throw(GaugeError(
        "fixed_point: the step does not reproduce its fixed point: ‖F(x*) - x*‖ / ‖x*‖ " *
        "= $(round(err; sigdigits=3)) > 10 tol; " *
        (gauge_fix === nothing ? "the step is a fixed point only up to a gauge; pass " *
                                 "gauge_fix" :
                                 "the transformation gauge_fix returns does not align " *
                                 "f(x*) with x*")))
    btol = backward_tol === nothing ? tol : backward_tol
    function fixed_point_back(Δx)
        Δx = unthunk(Δx)
        Δx isa AbstractZero && return (NoTangent(), ZeroTangent(), ZeroTangent())
        y = similar(x, promote_type(eltype(x), eltype(Δx)))
        fixed_point_pullback!(y, v -> back(v)[4], Δx; tol=btol,
                              krylovdim=backward_krylovdim, maxiter=backward_maxiter)
        _, Δf, _, _ = back(y)
        return NoTangent(), Δf, ZeroTangent()
    end
    return x, fixed_point_back
end
