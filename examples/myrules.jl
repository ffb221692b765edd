# A rule prototyped in Julia (examples/julia_rule.py includes this file with
# ps.julia.include and calls logdet_reg from PyTorch through ps.julia.function).
using LinearAlgebra
using ChainRulesCore

# f(X) = logdet(Xᵀ X + I); its gradient is 2 X (Xᵀ X + I)⁻¹.
logdet_reg(X) = logdet(X' * X + I)

function ChainRulesCore.rrule(::typeof(logdet_reg), X::AbstractMatrix)
    F = cholesky(Symmetric(X' * X + I))
    function logdet_reg_pullback(ȳ)
        return NoTangent(), 2 * unthunk(ȳ) * (X * inv(F))
    end
    return logdet(F), logdet_reg_pullback
end
