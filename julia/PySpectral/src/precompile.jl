# Precompile the forward calls and their rrule pullbacks for the four LAPACK element
# types on small matrices, so that the first call from Python does not compile them.
# `gauge=:ignore`: the arbitrary cotangents below must not log during precompilation.

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
        end
    end
end
