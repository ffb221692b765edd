# Precompile, for the four LAPACK element types on small matrices, so that the first call
# does not compile them:
#
# 1. the forward calls and their rrule pullbacks on plain matrices (Julia users);
# 2. the calls pyspectral's Python bridge makes (pyspectral/julia/glue.jl), on exactly the
#    argument types it passes: every matrix is a slice `view(X, :, :, b)` of a plain
#    `Array{T,3}` (a batch, its memory the tensor's, wrapped with `unsafe_wrap`), every
#    vector a column `view(x, :, b)` of a `Matrix`; tolerances `nothing`; the gauge policy
#    a `GaugeRecorder` (Python's "warn"/"raise") or `:ignore`; named functions as the
#    glue spells them (`Symbol`, `(Symbol, Int)`, `(Symbol, Float64)`).
#
# The cotangents below are arbitrary: the gauge policies are `:ignore` or a recorder,
# so nothing logs during precompilation.

# The keywords the glue gives a pullback (`pullback_options` there).
_glue_options(gauge) = (; degeneracy_atol=nothing, broadening=nothing, gauge, gauge_atol=nothing)

# A batch of one matrix as the glue sees it: slices of 3-arrays and columns of matrices.
_glue_slice(X::AbstractMatrix) = view(reshape(X, size(X)..., 1), :, :, 1)
_glue_slice(x::AbstractVector) = view(reshape(x, length(x), 1), :, 1)

function _glue_workload(A::Matrix{T}, H::Matrix{T}) where {T}
    At, Ht = _glue_slice(A), _glue_slice(H)
    ΔAt = _glue_slice(zero(A))
    ΔHt = _glue_slice(zero(H))
    for gauge in (GaugeRecorder(), :ignore)
        opts = _glue_options(gauge)
        # svd: forward, pullback with either cotangent absent, pushforward
        F = svd(At; full=false)
        U, S, Vt = _glue_slice(F.U), _glue_slice(F.S), _glue_slice(F.Vt)
        ΔU, ΔS, ΔVt = _glue_slice(copy(F.U)), _glue_slice(copy(F.S)), _glue_slice(copy(F.Vt))
        svd_pullback!(ΔAt, U, S, Vt, ΔU, ΔS, ΔVt; opts...)
        svd_pullback!(ΔAt, U, S, Vt, nothing, nothing, ΔVt; opts...)
        svd_pullback!(ΔAt, U, S, Vt, ΔU, nothing, nothing; opts...)
        svd_pullback!(ΔAt, U, S, Vt, nothing, ΔS, nothing; opts...)
        svd_pushforward(U, S, Vt, ΔAt; degeneracy_atol=nothing, broadening=nothing)
        svdvals(At)
        # eigh: the glue reads the upper triangle of the transpose (Python's lower one)
        # and passes conj(V), a copy for complex V
        for uplo in (:U, :L)
            E = eigh(Ht; uplo)
            λ, V = _glue_slice(E.values), _glue_slice(E.vectors)
            ΔV = _glue_slice(copy(E.vectors))
            eigh_pullback!(ΔHt, λ, conj(V), _glue_slice(copy(E.values)), conj(ΔV); uplo, opts...)
            eigh_pullback!(ΔHt, λ, conj(V), nothing, conj(ΔV); uplo, opts...)
            eigh_pullback!(ΔHt, λ, conj(V), _glue_slice(copy(E.values)), nothing; uplo, opts...)
            eigh_pushforward(λ, conj(V), ΔHt; uplo, degeneracy_atol=nothing, broadening=nothing)
        end
    end
    # the composites, with f as the glue spells it
    F = svd(At)
    U, S, Vt = _glue_slice(F.U), _glue_slice(F.S), _glue_slice(F.Vt)
    for f in (:polar, (:truncate, 1), (:pow, 2), (:pow, 0.5))
        Y = svd_function_apply(F, f; degeneracy_atol=nothing, gauge=:ignore)
        svd_function_pullback!(ΔAt, U, S, Vt, f, _glue_slice(Y); degeneracy_atol=nothing)
    end
    E = eigh(Ht; uplo=:U)
    λ, V = _glue_slice(E.values), _glue_slice(E.vectors)
    for f in (:sqrt, :log, :exp, (:pow, 2), (:pow, 0.5))
        Y = matrix_function_apply(E, f; degeneracy_atol=nothing)
        matrix_function_pullback!(ΔHt, λ, V, f, _glue_slice(Y); uplo=:U, degeneracy_atol=nothing)
    end
    return nothing
end

@setup_workload begin
    base = [4.0 1.0; 2.0 3.0; 1.0 5.0]
    @compile_workload begin
        for T in (Float32, Float64, ComplexF32, ComplexF64)
            A = T.(base)
            H = A' * A + I
            F = svd(A)
            svdvals(A)
            _, back = ChainRulesCore.rrule(svd, A; gauge=:ignore)
            back(Tangent{typeof(F)}(; U=F.U, S=F.S, Vt=F.Vt))
            _, back = ChainRulesCore.rrule(svdvals, A)
            back(F.S)
            for f in (:polar, (:truncate, 1), (:pow, 2))
                Y, back = ChainRulesCore.rrule(svd_function, A, f)
                back(Y)
            end
            E = eigh(H)
            eigvalsh(H)
            _, back = ChainRulesCore.rrule(eigh, H; gauge=:ignore)
            back(Tangent{typeof(E)}(; values=E.values, vectors=E.vectors))
            _, back = ChainRulesCore.rrule(eigvalsh, H)
            back(E.values)
            for f in (:sqrt, :log, :exp)
                Y, back = ChainRulesCore.rrule(matrix_function, H, f)
                back(Y)
            end
            # the bridge's calls: the transpose of a 2x3 tensor (3x2 here) and a
            # Hermitian 2x2
            _glue_workload(Matrix(A), Matrix(H))
        end
    end
end
