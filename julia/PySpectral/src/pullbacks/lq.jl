# LQ pullback and pushforward: the QR's (qr.jl) of Aᴴ = Qᴴ Lᴴ, transposed; one copy of
# the math (pyspectral/qr.py's _LQ does the same).

_adjoint_or_nothing(x) = iszerotangent(x) ? nothing : Matrix(x')

"""
    lq_pullback!(ΔA, L, Q, ΔL, ΔQ; rank_atol=nothing, gauge=:warn, gauge_atol=nothing,
                 op=:lq) -> ΔA

Add to `ΔA` the gradient w.r.t. `A = L Q` ([`lq`](@ref)) given the cotangents `ΔL`,
`ΔQ` (either may be `nothing`): [`qr_pullback!`](@ref) of `Aᴴ = Qᴴ Lᴴ` with the
cotangents `ΔQᴴ`, `ΔLᴴ`, transposed. The rank rule reads `|Lⱼⱼ|`: losses of `L[:, 1:j]`,
`Q[1:j, :]` and `L Q` are exact (where the cotangents carry what they need), what the
cotangents put on the rest measured and dropped (messages name `op`: pyspectral's QR
is Julia's LQ of the transpose).
"""
function lq_pullback!(ΔA::AbstractMatrix, L::AbstractMatrix, Q::AbstractMatrix, ΔL, ΔQ;
                      rank_atol=nothing, gauge=:warn, gauge_atol=nothing, op::Symbol=:lq)
    (iszerotangent(ΔL) && iszerotangent(ΔQ)) && return ΔA
    ΔAᴴ = zeros(eltype(ΔA), size(ΔA, 2), size(ΔA, 1))
    qr_pullback!(ΔAᴴ, Matrix(Q'), Matrix(L'), _adjoint_or_nothing(ΔQ),
                 _adjoint_or_nothing(ΔL); rank_atol, gauge, gauge_atol, op)
    ΔA .+= ΔAᴴ'
    return ΔA
end

"""
    lq_pushforward(L, Q, ΔA; rank_atol=nothing, gauge=:warn, gauge_atol=nothing, op=:lq)
        -> (ΔL, ΔQ)

Tangents of [`lq`](@ref)'s factors along `ΔA`: [`qr_pushforward`](@ref) of `Aᴴ`,
transposed (the gauge policy at rank deficiency, messages naming `op`).
"""
function lq_pushforward(L::AbstractMatrix, Q::AbstractMatrix, ΔA::AbstractMatrix;
                        rank_atol=nothing, gauge=:warn, gauge_atol=nothing,
                        op::Symbol=:lq)
    ΔQᴴ, ΔLᴴ = qr_pushforward(Matrix(Q'), Matrix(L'), Matrix(ΔA'); rank_atol, gauge,
                              gauge_atol, op)
    return Matrix(ΔLᴴ'), Matrix(ΔQᴴ')
end
