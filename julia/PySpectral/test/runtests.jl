# PySpectral tests. Each top-level @testset is self-contained (it seeds its own RNG):
# pyspectral runs each one as its own pytest item. Gradients are checked against
# finite differences (ChainRulesTestUtils.test_rrule, or Zygote vs FiniteDifferences on
# losses), always on gauge-invariant cotangents or losses: a basis-dependent one has
# no well-defined gradient to compare with.
#
# Structure. The named testsets must stay top-level expressions of this file:
# pyspectral's runner (`split_testfile` in pyspectral/_glue.jl) evaluates the other
# top-level code once, in a fresh module, then each `@testset "name"` on its own with a
# recording testset type. Run as a script instead (`julia test/runtests.jl`,
# `Pkg.test()`, both evaluate into `Main`), a failing top-level DefaultTestSet would
# throw at its end and abort the file. So in `Main` an outer testset is pushed first
# (`Test.push_testset`, task-local in Julia 1.9-1.12): every top-level `@testset` then
# takes its type and records into it instead of throwing, and the last lines finish it,
# which prints one summary and throws if anything failed (exit code 1). Elsewhere, or on
# a Julia without `Test.push_testset`, nothing is pushed and each testset behaves as
# usual.

using PySpectral
using PySpectral: GaugeError, check_gauge, default_degeneracy_atol, default_gauge_atol,
    default_hermitian_tol, divdiff, gap_inverse, inv_lorentz, inv_safe
using LinearAlgebra
using ChainRulesCore
using ChainRulesTestUtils
using FiniteDifferences
using Random
using Test
using Zygote
using KrylovKit: KrylovKit

const STANDALONE = (@__MODULE__) === Main && isdefined(Test, :push_testset)
ALL_TESTS = STANDALONE ? Test.DefaultTestSet("PySpectral"; verbose=true) : nothing
STANDALONE && Test.push_testset(ALL_TESTS)

# `PySpectral.svd`/`PySpectral.svdvals` are not exported (LinearAlgebra exports those
# names): always qualified.

const RTOL = 1e-6
const ATOL = 1e-8
const WARN = Base.CoreLogging.Warn

randunitary(T, n) = Matrix(qr(randn(T, n, n)).Q)

# m×n matrix with the singular values `s` (length min(m, n)).
function with_singular_values(T, m, n, s)
    k = min(m, n)
    return randunitary(T, m)[:, 1:k] * Diagonal(T.(s)) * randunitary(T, n)[:, 1:k]'
end

# Hermitian matrix with the eigenvalues `λ`.
function with_eigenvalues(T, λ)
    Q = randunitary(T, length(λ))
    return Q * Diagonal(T.(λ)) * Q'
end

# Make U⊥ᴴ ΔU⊥ Hermitian: the cotangent of a loss that sees the complement columns
# of a full SVD only through their span.
function strip_complement!(ΔU, U, k)
    size(U, 2) == k && return ΔU
    Up, ΔUp = U[:, k+1:end], ΔU[:, k+1:end]
    B = Up' * ΔUp
    ΔU[:, k+1:end] .-= Up * ((B - B') / 2)
    return ΔU
end

# Random SVD cotangent without its gauge-dependent parts: the phase part
# Im diag(UᴴΔU + VᴴΔV) (complex) and the complement part (full factors). `S_eltype` is
# the element type of ΔS (real by default, as S is).
function invariant_svd_tangent(F; S_eltype=real(eltype(F.U)))
    k = length(F.S)
    V = Matrix(F.Vt')
    ΔU = strip_complement!(randn(eltype(F.U), size(F.U)), F.U, k)
    ΔV = strip_complement!(randn(eltype(V), size(V)), V, k)
    if eltype(F.U) <: Complex
        Uk, Vk = F.U[:, 1:k], V[:, 1:k]
        d = imag.(diag(Uk' * ΔU[:, 1:k]) .+ diag(Vk' * ΔV[:, 1:k])) ./ 2
        ΔU[:, 1:k] .-= Uk .* transpose(im .* d)
        ΔV[:, 1:k] .-= Vk .* transpose(im .* d)
    end
    ΔS = S_eltype.(randn(real(eltype(F.U)), k))
    return Tangent{typeof(F)}(; U=ΔU, S=ΔS, Vt=Matrix(ΔV'))
end

# The same, shaped for test_rrule. Its finite differences vectorise the primal SVD with
# FiniteDifferences' `to_vec(::SVD)`, which builds `[F.U, reshape(F.S, :, 1), F.Vt]`:
# for complex input that array literal promotes S to complex (two reals per singular
# value), while the output tangent is vectorised field by field (one real per real ΔSᵢ),
# so the two vectors differ in length by k and `j′vp` throws a DimensionMismatch. A ΔS of
# U's element type (imaginary part 0: S is real, only Re ΔS acts) lines them up.
fd_svd_tangent(F) = invariant_svd_tangent(F; S_eltype=eltype(F.U))

# Random eigh cotangent without the phase part Im diag(VᴴΔV) (complex).
function invariant_eigen_tangent(E)
    V = E.vectors
    ΔV = randn(eltype(V), size(V))
    if eltype(V) <: Complex
        ΔV .-= V .* transpose(im .* imag.(diag(V' * ΔV)))
    end
    return Tangent{typeof(E)}(; values=randn(real(eltype(V)), length(E.values)), vectors=ΔV)
end

# Finite differences as ChainRulesTestUtils takes them.
const FDM = central_fdm(5, 1; max_range=1e-2)

# LAPACK's eigensolvers (syevd, which PySpectral.eigh calls, as syevr) fix each eigenvector's
# sign, and for complex input its phase (the first entry real for uplo=:L, the last for
# :U), through choices that jump under perturbations at rounding level: finite
# differences of the raw eigenvectors are meaningless, whatever the cotangent (ChainRules
# tests its eigen rules the same way, test/rulesets/LinearAlgebra/symmetric.jl). So the
# eigenvector checks difference `aligned_eigen`, in which column i is rotated to make its
# entry ks[i] real positive: a gauge that is smooth wherever that entry is nonzero, with
# `ks` chosen once, at the unperturbed matrix, where the entries are largest.
alignment(V, ks) = [conj(V[k, i]) / abs(V[k, i]) for (i, k) in enumerate(ks)]

function aligned_eigen(X, uplo, ks)
    E = PySpectral.eigh(X; uplo)
    return (values=E.values, vectors=E.vectors .* transpose(alignment(E.vectors, ks)))
end

# The eigh pullback of a random gauge-stripped cotangent (Δλ, ΔV) against finite
# differences of `aligned_eigen` at A with cotangent (Δλ, ΔV c₀), c₀ the alignment at A.
# Along the differences, Re⟨ΔV c₀, V c⟩ = Re⟨ΔV, V c c̄₀⟩, and V c c̄₀ is a smooth
# eigenvector gauge through the V the pullback saw; a gauge-stripped ΔV makes this
# independent of the gauge to first order, so both compute the same gradient.
function test_eigh_pullback_fd(A, uplo; rtol=RTOL, atol=ATOL)
    E, back = rrule(PySpectral.eigh, A; uplo)
    Δ = invariant_eigen_tangent(E)
    ks = [argmax(abs.(v)) for v in eachcol(E.vectors)]
    ȳ = (values=Δ.values, vectors=Δ.vectors .* transpose(alignment(E.vectors, ks)))
    fd = only(FiniteDifferences.j′vp(FDM, X -> aligned_eigen(X, uplo, ks), ȳ, A))
    @test back(Δ)[2] ≈ fd rtol = rtol atol = atol
end

# Zygote (through the rrules) against central finite differences of the same loss.
function test_grad(f, A; rtol=RTOL, atol=ATOL)
    g_ad = only(Zygote.gradient(f, A))
    g_fd = only(FiniteDifferences.grad(central_fdm(5, 1), f, A))
    @test g_ad ≈ g_fd rtol = rtol atol = atol
end

@testset "defaults" begin
    Random.seed!(0)
    for R in (Float32, Float64)
        e = eps(R)^(R(3) / 4)
        @test default_degeneracy_atol(R[3, 2, 1]) == 3 * e
        @test default_degeneracy_atol(R[-5, 1, 2]) == 5 * e
        @test default_degeneracy_atol(R[3, 2]) isa R
        @test default_degeneracy_atol(R[]) == 0
        ΔU, ΔVᴴ = R[1 -4; 2 0], R[0.5 3]
        @test default_gauge_atol(ΔU, ΔVᴴ) == 4 * e
        @test default_gauge_atol(nothing, ΔVᴴ) == 3 * e
        @test default_gauge_atol(ΔU) == 4 * e
        @test default_gauge_atol(Complex{R}[3+4im 0]) == 5 * e
        @test default_hermitian_tol(R[1 -7; 2 3]) == 7 * e
    end
    @test default_gauge_atol(nothing, ZeroTangent()) == 0

    @test inv_safe(2.0, 1.0) == 0.5
    @test inv_safe(-0.5, 1.0) == 0
    @test inv_safe(0.0, 0.0) == 0
    @test inv_lorentz(-2.0, 1.0) == -0.4
    @test inv_lorentz(0.0, 1.0) == 0
    # η² underflows below sqrt(floatmin): evaluated in units of max(|x|, η), no 0/0
    for T in (Float32, Float64)
        η = 100 * floatmin(T)
        @test inv_lorentz(zero(T), η) == 0
        @test inv_lorentz(η, η) ≈ 1 / (2η) rtol = 4 * eps(T)
        @test inv_lorentz(-4η, η) ≈ -4 / (17η) rtol = 4 * eps(T)
        @test isfinite(inv_lorentz(η / 3, η))
    end
    @test gap_inverse(0.5, 1.0, nothing) == 0
    @test gap_inverse(2.0, 1.0, nothing) == 0.5
    @test gap_inverse(2.0, 1.0, 1.0) == 0.4
    @test gap_inverse(2.0f0, 1.0, 1.0) isa Float32

    @test divdiff(3.0, 1.0, 9.0, 1.0, 6.0, 2.0) == 4.0
    @test divdiff(2.0, 2.0, 4.0, 4.0, 4.0, 4.0) == 4.0
    @test divdiff(0.0, 0.0, 0.0, 0.0, 1.0, 1.0) == 1.0
    @test divdiff(2.0, -3.0, 2.0, -3.0, 1.0, 1.0) == 1.0
    # (y² - x²)/(y - x) at a gap of 1e-12: the quotient carries ~1e-4 rounding error,
    # the derivative average (2y + 2x)/2 is exact.
    x, y = 1.0, 1.0 + 1e-12
    @test divdiff(y, x, y^2, x^2, 2y, 2x) ≈ x + y rtol = 4 * eps()

    # The pullbacks use these defaults when given `nothing`.
    A = randn(5, 3)
    F = PySpectral.svd(A)
    Δ = invariant_svd_tangent(F)
    g1 = svd_pullback!(zeros(5, 3), F.U, F.S, F.Vt, Δ.U, Δ.S, Δ.Vt)
    g2 = svd_pullback!(zeros(5, 3), F.U, F.S, F.Vt, Δ.U, Δ.S, Δ.Vt;
                       degeneracy_atol=default_degeneracy_atol(F.S),
                       gauge_atol=default_gauge_atol(Δ.U, Δ.Vt))
    @test g1 == g2

    @test_throws ArgumentError PySpectral.svd(A; degeneracy_atol=-1.0)
    @test_throws ArgumentError PySpectral.svd(A; broadening="wide")
    @test_throws ArgumentError PySpectral.svd(A; gauge=:loud)
    @test_throws ArgumentError PySpectral.eigh(A' * A; gauge_atol=-1)
end

# f, f′, the exact divided difference (from expm1/log1p: no cancellation) and the
# argument ranges (pairs of ends) where each is checked: exp near 0 (it varies on scale
# 1, not |a|), log and sqrt down to tiny arguments (where squares would underflow).
const DD_CASES = (
    exp=(exp, exp, (a, b) -> exp(b) * expm1(a - b) / (a - b),
         [-30.0, -1e-20, 1e-20, 30.0]),
    log=(log, inv, (a, b) -> log1p((a - b) / b) / (a - b), [1e-150, 1e3]),
    sqrt=(sqrt, x -> inv(2 * sqrt(x)), (a, b) -> 1 / (sqrt(a) + sqrt(b)), [1e-150, 1e3]),
    cube=(x -> x^3, x -> 3 * x^2, (a, b) -> a * a + a * b + b * b,
          [-1e3, -1e-10, 1e-10, 1e3]),
    x_plus_1=(x -> x + 1, one, (a, b) -> 1.0, [-1e3, -1e-20, 1e-20, 1e3]),
    sinh=(sinh, cosh, (a, b) -> 2 * cosh((a + b) / 2) * sinh((a - b) / 2) / (a - b),
          [-30.0, -1e-20, 1e-20, 30.0]),
)

# Log-spaced arguments, about one per decade, between each pair of ends.
function dd_grid(ends)
    out = Float64[]
    for (lo, hi) in zip(ends[1:2:end], ends[2:2:end])
        s = sign(lo)
        lo, hi = minmax(abs(lo), abs(hi))
        n = max(2, floor(Int, log10(hi / lo)) + 1)
        append!(out, [s * lo * (hi / lo)^(i / (n - 1)) for i in 0:n-1])
    end
    return out
end

# The same checks as tests/test_safemethods.py (test_divided_difference_*,
# test_exp_near_zero_through_matrix_function) for pyspectral's divided_difference.
@testset "divided differences" begin
    Random.seed!(10)
    # Limits.
    @test divdiff(2.0, 2.0, 4.0, 4.0, 4.0, 4.0) == 4
    @test divdiff(0.0, 0.0, 0.0, 0.0, 1.0, 3.0) == 2
    @test divdiff(3.0, 1.0, 9.0, 1.0, 6.0, 2.0) == 4
    # f constant (the polar factor): 0, also across a tie.
    @test divdiff(1.0, 1e-300, 1.0, 1.0, 0.0, 0.0) == 0
    # An infinite derivative at 0 (sqrt) does not leak into a finite quotient.
    @test divdiff(1e-20, 0.0, sqrt(1e-20), 0.0, inv(2 * sqrt(1e-20)), Inf) ≈ 1e10
    # Broadcasting, with no NaN from the branch not taken.
    xs = [1.0, 2.0]
    L = divdiff.(xs, transpose(xs), exp.(xs), transpose(exp.(xs)), exp.(xs),
                 transpose(exp.(xs)))
    @test size(L) == (2, 2) && all(isfinite, L)
    @test diag(L) ≈ exp.(xs)
    # Nodes a few ulps apart are one node (a repeated eigenvalue, rounded): the
    # derivative average, also where f's values cancel (a cubic summing terms of size 1
    # to 0.03), whose quotient is rounding noise (it was 0 here).
    cancelling(x) = 1.033 - 1.88 * (x / 4) - 0.207 * (x / 4)^2 + 1.044 * (x / 4)^3
    dcancelling(x) = (-1.88 - 2 * 0.207 * (x / 4) + 3 * 1.044 * (x / 4)^2) / 4
    a = 2 + sqrt(2) * sqrt(1 + 1 / sqrt(2))
    for ulps in 1:8
        b = a + ulps * eps(a)
        @test divdiff(a, b, cancelling(a), cancelling(b), dcancelling(a),
                      dcancelling(b)) ≈ dcancelling(a) rtol = 1e-12
    end

    # Relative accuracy over every argument scale and every relative gap from 0 to 1, in
    # double and single precision (where f(a) - f(b) itself cancels to eps |f| /
    # |f(a) - f(b)|, single precision gets that much less).
    gaps = [0.0; [10.0^(-e / 2) for e in 0:32]]
    precisions = ((Float64, 1e-8), (Float32, 1e-3))
    for (name, (f, df, exact, ends)) in pairs(DD_CASES), (T, tol) in precisions
        @testset "divdiff accuracy: $name, $T" begin
            worst = 0.0
            for a0 in dd_grid(ends)
                abs(a0) < sqrt(floatmin(T)) && continue
                a = T(a0)
                for gap in gaps
                    b = T(Float64(a) * (1 + gap))
                    ref = a == b ? Float64(df(Float64(a))) : exact(Float64(a), Float64(b))
                    got = divdiff(a, b, f(a), f(b), df(a), df(b))
                    worst = max(worst, abs(got - ref) / abs(ref))
                end
            end
            @test worst < tol
        end
    end

    # exp of a semidefinite matrix with a threefold zero eigenvalue (computed as ±1e-16):
    # every divided difference inside the zero cluster is a tie.
    for T in (Float64, ComplexF64), _ in 1:3
        A = with_eigenvalues(T, [0.0, 0.0, 0.0, 1.0, 2.0])
        W = randn(T, 5, 5)
        test_grad(X -> real(dot(W, PySpectral.matrix_function(X, :exp))), A; rtol=1e-8)
    end
end

@testset "svd rrule" begin
    Random.seed!(1)
    for T in (Float64, ComplexF64), (m, n) in ((5, 3), (3, 5), (4, 4))
        A = randn(T, m, n)
        F = PySpectral.svd(A)
        @test F.U isa Matrix{T} && F.S isa Vector{real(T)} && F.Vt isa Matrix{T}
        @test F.U * Diagonal(F.S) * F.Vt ≈ A
        @test issorted(F.S; rev=true)
        Δ = fd_svd_tangent(F)
        test_rrule(PySpectral.svd, A; output_tangent=Δ, check_inferred=false,
                   rtol=RTOL, atol=ATOL)
        # ... and a ΔS typed like U pulls back exactly like the real ΔS it stands for.
        _, back = rrule(PySpectral.svd, A)
        @test back(Δ)[2] ≈ back(Tangent{typeof(F)}(; U=Δ.U, S=real.(Δ.S), Vt=Δ.Vt))[2]
        Fk = PySpectral.svd(A; k=2)
        @test size(Fk.U) == (m, 2) && Fk.S == F.S[1:2] && size(Fk.Vt) == (2, n)
        test_rrule(PySpectral.svd, A; fkwargs=(; k=2), output_tangent=fd_svd_tangent(Fk),
                   check_inferred=false, rtol=RTOL, atol=ATOL)
        test_rrule(PySpectral.svdvals, A; check_inferred=false, rtol=RTOL, atol=ATOL)
        @test PySpectral.svdvals(A) ≈ F.S
    end
    for (m, n) in ((5, 3), (3, 5))
        A = randn(m, n)
        F = PySpectral.svd(A; full=true)
        @test size(F.U) == (m, m) && size(F.Vt) == (n, n)
        test_rrule(PySpectral.svd, A; fkwargs=(; full=true),
                   output_tangent=fd_svd_tangent(F), check_inferred=false,
                   rtol=RTOL, atol=ATOL)
    end

    # Any AbstractMatrix, e.g. a strided view (as of foreign memory); integers promote.
    B = randn(9, 4)
    Av = view(B, 1:2:9, :)
    @test PySpectral.svd(Av).S ≈ LinearAlgebra.svdvals(Matrix(Av))
    @test PySpectral.svdvals(Av) ≈ LinearAlgebra.svdvals(Matrix(Av))
    @test PySpectral.svd([3 0; 0 4]).S ≈ [4.0, 3.0]

    # Single precision: the gradient of a gauge-invariant loss matches double precision.
    for T in (Float32, ComplexF32)
        A, W = randn(T, 4, 3), randn(T, 4, 3)
        loss(W) = X -> (F = PySpectral.svd(X); real(dot(W, F.U * F.Vt)) + sum(abs2, F.S))
        g32 = only(Zygote.gradient(loss(W), A))
        g64 = only(Zygote.gradient(loss(widen.(W)), widen.(A)))
        @test eltype(g32) == T
        @test g32 ≈ g64 rtol = 1e-3
    end

    A = randn(4, 3)
    @test_throws ArgumentError PySpectral.svd(A; k=-1)
    # k past min(m, n) is a maximum (tensor-network codes clamp their bond
    # dimension): every triplet
    @test PySpectral.svd(A; k=4).S ≈ PySpectral.svd(A; k=3).S
    @test length(PySpectral.svd(A; k=4).S) == 3
    @test_throws ArgumentError PySpectral.svd(A; k=1, full=true)
    @test_throws ArgumentError PySpectral.svd([1.0 NaN; 0.0 1.0])
end

@testset "svd degenerate" begin
    Random.seed!(2)
    for T in (Float64, ComplexF64)
        # Polar factor and nuclear norm: gauge invariant and smooth at full rank, for
        # exactly repeated, 1e-9 and 1e-13 apart, and all equal singular values.
        # gauge=:raise asserts that no gauge dependence is detected.
        for (m, n) in ((4, 3), (3, 4))
            W = randn(T, m, n)
            polar_loss(X) = (F = PySpectral.svd(X; gauge=:raise); real(dot(W, F.U * F.Vt)) + sum(F.S))
            for s in ([3.0, 2.0, 2.0], [3.0, 2.0 + 1e-9, 2.0], [3.0, 2.0 + 1e-13, 2.0],
                      [2.0, 2.0, 2.0])
                test_grad(polar_loss, with_singular_values(T, m, n, s); rtol=1e-5)
            end
        end

        # Rank deficient: the projector onto the top-2 left singular subspace (a
        # complete cluster) and ‖A‖² through the singular values.
        P = randn(T, 4, 4)
        proj(X) = (F = PySpectral.svd(X; gauge=:raise); U2 = F.U[:, 1:2];
                   real(dot(P, U2 * U2')) + sum(abs2, F.S))
        A = with_singular_values(T, 4, 3, [3.0, 2.0, 0.0])
        test_grad(proj, A; rtol=1e-5)
        @test only(Zygote.gradient(X -> sum(abs2, PySpectral.svd(X).S), A)) ≈ 2A
        @test all(isfinite, only(Zygote.gradient(proj, with_singular_values(T, 4, 3, [1.0, 1.0, 0.0]))))
    end
end

@testset "svd_function" begin
    Random.seed!(3)
    fs = (:polar, (:truncate, 2), (:threshold, 1.5), (:pow, 3), (:pow, 0.5), (:pow, -1),
          :normalize, (x -> x^3 + x, x -> 3x^2 + 1))
    for T in (Float64, ComplexF64), (m, n) in ((5, 3), (3, 5), (3, 3))
        A = with_singular_values(T, m, n, [3.0, 2.0, 1.0])
        for f in fs
            test_rrule(PySpectral.svd_function, A, f ⊢ NoTangent(); check_inferred=false,
                       rtol=RTOL, atol=ATOL)
        end
        @test PySpectral.svd_function(A, :normalize) ≈ A / opnorm(A)
        @test PySpectral.svd_function(A, (:pow, 1)) ≈ A
    end

    # Exact at degenerate and zero singular values (all smooth functions there).
    cases = ([2.0, 2.0, 1.0] => (:polar, (:pow, 3), (:truncate, 2), (:threshold, 1.5)),
             [2.0, 2.0, 2.0] => (:polar, (:pow, 3), (:threshold, 1.0)),
             [3.0, 1.0, 0.0] => ((:pow, 3), (:truncate, 2), (:threshold, 0.5)),
             [2.0, 2.0, 0.0] => ((:pow, 3), (:truncate, 2), (:threshold, 1.0)),
             [2.0, 0.0, 0.0] => ((:pow, 3), (:truncate, 1), (:threshold, 1.0)))
    for T in (Float64, ComplexF64), (m, n) in ((4, 3), (3, 4)), (s, fs) in cases
        A = with_singular_values(T, m, n, s)
        for f in fs
            test_rrule(PySpectral.svd_function, A, f ⊢ NoTangent(); check_inferred=false,
                       rtol=1e-5, atol=1e-7)
        end
        # U S Vᴴ = A: the pullback is the identity at every spectrum.
        ΔY = randn(T, m, n)
        _, back = rrule(PySpectral.svd_function, A, (:pow, 1))
        @test back(ΔY)[2] ≈ ΔY
    end

    # Single precision agrees with double precision.
    A32, ΔY32 = randn(ComplexF32, 4, 3), randn(ComplexF32, 4, 3)
    _, b32 = rrule(PySpectral.svd_function, A32, (:truncate, 2))
    _, b64 = rrule(PySpectral.svd_function, widen.(A32), (:truncate, 2))
    @test b32(ΔY32)[2] ≈ b64(widen.(ΔY32))[2] rtol = 1e-3

    A = with_singular_values(Float64, 3, 3, [1.0, 1.0, 0.0])
    @test_throws DomainError PySpectral.svd_function(A, (:pow, -1))
    @test_throws DomainError PySpectral.svd_function(zeros(3, 2), :normalize)
    @test_throws ArgumentError PySpectral.svd_function(A, (:truncate, 7))
    @test_throws ArgumentError PySpectral.svd_function(A, (:threshold, -1.0))
    @test_throws ArgumentError PySpectral.svd_function(A, :nonsense)
    # a NaN or infinite number of a named function (issue 15, item 3)
    for f in ((:threshold, NaN), (:threshold, Inf), (:pow, NaN), (:pow, -Inf),
              (:truncate, NaN), (:truncate, Inf))
        @test_throws ArgumentError PySpectral.svd_function(A, f)
    end
    @test_throws ArgumentError PySpectral.matrix_function(A + A', (:pow, NaN))
    @test_throws ArgumentError PySpectral.matrix_function(A + A', (:pow, Inf))
end

@testset "eigh rrule" begin
    Random.seed!(4)
    for T in (Float64, ComplexF64), uplo in (:L, :U)
        A = randn(T, 4, 4)
        E = PySpectral.eigh(A; uplo)
        @test E.values isa Vector{real(T)} && E.vectors isa Matrix{T}
        @test issorted(E.values)
        @test E.vectors * Diagonal(E.values) * E.vectors' ≈ Hermitian(A, uplo)
        @test PySpectral.eigvalsh(A; uplo) ≈ E.values
        # Eigenvectors: against phase-aligned finite differences (see aligned_eigen);
        # test_rrule would difference LAPACK's discontinuous signs and phases.
        test_eigh_pullback_fd(A, uplo)
        # Eigenvalues are continuous, so test_rrule applies to a cotangent on them only.
        # The vectors' cotangent is an explicit zero matrix, not ZeroTangent(): the
        # Tangent is vectorised field by field and must give as many numbers as the
        # primal Eigen (ZeroTangent() gives none); zero, it ignores their jumps.
        Δvalues = Tangent{typeof(E)}(; values=randn(4), vectors=zero(E.vectors))
        test_rrule(PySpectral.eigh, A; fkwargs=(; uplo), output_tangent=Δvalues,
                   check_inferred=false, rtol=RTOL, atol=ATOL)
        test_rrule(PySpectral.eigvalsh, A; fkwargs=(; uplo), check_inferred=false,
                   rtol=RTOL, atol=ATOL)
    end

    # Only the uplo triangle is read, so only it gets a gradient; through a Hermitian
    # parametrisation the gradient is the usual one.
    A = randn(4, 4)
    cubes(uplo) = X -> sum(PySpectral.eigvalsh(X; uplo) .^ 3)
    @test iszero(triu(only(Zygote.gradient(cubes(:L), A)), 1))
    @test iszero(tril(only(Zygote.gradient(cubes(:U), A)), -1))
    test_grad(X -> cubes(:L)(X + X'), A)

    @test_throws ArgumentError PySpectral.eigh(A; check_hermitian=true)
    @test PySpectral.eigh(A + A'; check_hermitian=true).values ≈ eigvals(Hermitian(A + A'))
    @test_throws ArgumentError PySpectral.eigh(randn(3, 4))
    @test_throws ArgumentError PySpectral.eigh(A; uplo=:X)

    # gradient=:hermitian (torch.linalg.eigh's convention): the gradient of
    # eigh((A + Aᴴ)/2), the Hermitian part of the one on the triangle read, both sides
    # of the diagonal; its inner product with a Hermitian direction is the derivative.
    for T in (Float64, ComplexF64), uplo in (:L, :U)
        A = randn(T, 5, 5)
        E = PySpectral.eigh(A; uplo)
        Δλ, ΔV = randn(5), randn(T, 5, 5)
        ΔV .-= E.vectors * Diagonal(diag(E.vectors' * ΔV))  # no phase dependence
        F = PySpectral.eigh_pullback!(zeros(T, 5, 5), E.values, E.vectors, Δλ, ΔV; uplo)
        H = PySpectral.eigh_pullback!(zeros(T, 5, 5), E.values, E.vectors, Δλ, ΔV; uplo,
                                      gradient=:hermitian)
        @test H ≈ H'
        @test PySpectral.fold_triangle!(zeros(T, 5, 5), H, uplo) ≈ F
        D = randn(T, 5, 5)
        D = D + D'
        loss(t) = (Et = PySpectral.eigh(A + t * D; uplo);
                   dot(Δλ, Et.values) + real(dot(ΔV, Et.vectors)))
        @test real(dot(H, D)) ≈ FDM(loss, 0.0) rtol = 1e-6
    end
    @test_throws ArgumentError PySpectral.eigh_pullback!(zeros(4, 4), eigvals(A + A'),
        eigvecs(A + A'), randn(4), nothing; gradient=:torch)
end

@testset "eigh degenerate" begin
    Random.seed!(5)
    for T in (Float64, ComplexF64)
        # The projector onto the lowest (complete) cluster and symmetric functions of
        # the eigenvalues: gauge invariant; gauge=:raise asserts none is detected.
        W = randn(T, 4, 4)
        proj(X) = (E = PySpectral.eigh(X; gauge=:raise); V2 = E.vectors[:, 1:2];
                   real(dot(W, V2 * V2')) + sum(E.values .^ 2))
        for λ in ([1.0, 1.0, 2.0, 3.0], [1.0, 1.0 + 1e-9, 2.0, 3.0],
                  [1.0, 1.0 + 1e-13, 2.0, 3.0], [0.0, 0.0, 1.0, 2.0])
            test_grad(proj, with_eigenvalues(T, λ); rtol=1e-5)
        end
        symmetric(X) = (E = PySpectral.eigh(X; gauge=:raise); sum(E.values .^ 2) + sum(exp, E.values))
        test_grad(symmetric, with_eigenvalues(T, [2.0, 2.0, 2.0, 2.0]); rtol=1e-5)
    end
end

@testset "near-degenerate gaps" begin
    # Gaps just above the degeneracy tolerance. For a loss that does not depend on the
    # rotation of the near-degenerate pair, the numerator (Jₐ + Kₐ)ᵢⱼ of the svd pullback
    # (Kₐᵢⱼ of eigh's) is 0 in exact arithmetic; before, its rounding noise divided by a
    # gap of 1e-11 came out as the gradient (4e-5 relative). A numerator within its
    # rounding error of 0 counts as 0 (cut_rounding). Against svd_function /
    # matrix_function, exact at every spectrum, over the gaps 1e-14 … 1e-6.
    Random.seed!(31)
    gaps = 10.0 .^ (-14:0.5:-6)
    relerr(a, b) = maximum(abs, a - b) / maximum(abs, b)
    # the indicator of (lo, hi) as a user pair (f, f′): the spectral projector onto the
    # values in that interval, with its exact pullback
    indicator(lo, hi) = (x -> lo < x < hi ? one(x) : zero(x), x -> zero(x))
    worst(loss, exact, matrices) = maximum(
        relerr(only(Zygote.gradient(loss, X)), only(Zygote.gradient(exact, X)))
        for X in matrices)
    for T in (Float64, ComplexF64)
        Q1, Q2, Q = randunitary(T, 6), randunitary(T, 4), randunitary(T, 4)
        W, Wh = randn(T, 6, 4), randn(T, 4, 4)
        svds = [Q1[:, 1:4] * Diagonal(T.([3.0, 2.0 + g, 2.0, 1.0])) * Q2' for g in gaps]
        hermitian_pair(g) = (H = Q * Diagonal(T.([1.0, 2.0, 2.0 + g, 3.0])) * Q'; (H + H') / 2)
        hermitians = [hermitian_pair(g) for g in gaps]
        top, pair = indicator(1.5, 10.0), indicator(1.5, 2.5)

        # the issue's polar factor, and the same through the top-3 triplets
        polar_loss(X) = (F = PySpectral.svd(X); real(dot(W, F.U * F.Vt)))
        polar_exact(X) = real(dot(W, PySpectral.svd_function(X, :polar)))
        @test worst(polar_loss, polar_exact, svds) < 1e-8
        top3(X) = (F = PySpectral.svd(X; k=3); real(dot(W, F.U * F.Vt)))
        top3_exact(X) = real(dot(W, PySpectral.svd_function(X, top)))
        @test worst(top3, top3_exact, svds) < 1e-8

        # the projector onto the pair's eigenvectors, and a smooth function of it
        function pair_projector(X)
            V2 = PySpectral.eigh(X).vectors[:, 2:3]
            return V2 * V2'
        end
        P_exact(X) = PySpectral.matrix_function(X, pair)
        @test worst(X -> real(dot(Wh, pair_projector(X))),
                    X -> real(dot(Wh, P_exact(X))), hermitians) < 1e-8
        @test worst(X -> sum(exp, real(pair_projector(X))),
                    X -> sum(exp, real(P_exact(X))), hermitians) < 1e-8

        # A small but genuine numerator is kept: a basis-dependent term with weight
        # 1e-12 (u₂v₂ᴴ: invariant under signs, not under rotations of the pair), whose
        # gradient 1e-12 / gap would be lost if it were cut.
        W2, τ = randn(T, 6, 4), 1e-12
        basis(X) = (F = PySpectral.svd(X); τ * real(dot(W2, F.U[:, 2] * F.Vt[2:2, :])))
        total(X) = polar_loss(X) + basis(X)
        for A in svds[7:9]  # gaps 1e-11 … 1e-10
            g_basis = only(Zygote.gradient(basis, A))
            g_rest = only(Zygote.gradient(total, A)) - only(Zygote.gradient(polar_exact, A))
            @test maximum(abs, g_rest - g_basis) < 1e-2 * maximum(abs, g_basis)
        end
    end

    # The bound: rᵢⱼ = cᵢ + cⱼ (column_rounding, pair_rounding) bounds the rounding
    # error of the skew part of Qᴴ G (Float32 against Float64); cut_rounding zeroes at
    # or below it and never a NaN.
    for trial in 1:20
        Q = Matrix(qr(randn(50, 8)).Q)
        G = randn(50, 8) .* 10.0^(trial % 5)
        Q32, G32 = Float32.(Q), Float32.(G)
        J = Float64.(Q32' * G32)
        J64 = Float64.(Q32)' * Float64.(G32)
        err = abs.((J - J') - (J64 - J64'))
        r = Float64.(PySpectral.pair_rounding(PySpectral.column_rounding(G32, 50)))
        @test all(err .<= r)
    end
    X = [0.0 1e-15 3.0; -1e-15 NaN 2e-15; 1.0 0.0 4.0]
    Y = PySpectral.cut_rounding(X, PySpectral.pair_rounding([1e-15, 0.0, 0.5e-15]))
    @test Y[1, 2] == 0 && Y[2, 1] == 0 && Y[2, 3] == 2e-15 && Y[1, 3] == 3.0
    @test isnan(Y[2, 2])

    # Where the cut can matter (rounding_cut_window, window 10 eps^(1/4) max|x| here):
    # some adjacent gap in it, and the trailing singular values whose double is in it.
    window = PySpectral.rounding_cut_window
    @test window([3.0, 2.0, 1.0], 6; descending=true) == (false, 4)
    @test window([3.0, 2.0, 2.0 - 1e-9, 1e-6, 1e-7], 6; descending=true) == (true, 4)
    @test window([1e-7, 1.0, 2.0], 6; descending=false) == (false, 4)
    @test window([3.0, NaN, 1.0], 6; descending=true) == (true, 1)
    @test window([1.0, 3.0, 2.0], 6; descending=true) == (true, 1)  # unsorted: all
    @test window(Float64[], 6; descending=true) == (false, 1)
    X = [0.0 1e-15 3.0; -1e-15 0.0 2e-16; 1.0 -2e-16 4.0]
    Z = PySpectral.cut_trailing(X, fill(1e-15, 3, 3), 2)
    @test Z[2, 3] == 0 && Z[3, 2] == 0 && Z[3, 3] == 4.0  # in the block
    @test Z[1, 2] == 1e-15 && Z[2, 1] == -1e-15 && Z[3, 1] == 1.0  # outside it
end

@testset "matrix_function" begin
    Random.seed!(6)
    fs = (:sqrt, :invsqrt, :log, :exp, (:pow, 2), (:pow, 0.5), (:pow, -1), (sin, cos))
    for T in (Float64, ComplexF64), uplo in (:L, :U)
        B = randn(T, 4, 4)
        A = B * B' + 4I
        for f in fs
            test_rrule(PySpectral.matrix_function, A, f ⊢ NoTangent(); fkwargs=(; uplo),
                       check_inferred=false, rtol=RTOL, atol=ATOL)
        end
        R = PySpectral.matrix_function(A, :sqrt; uplo)
        @test R * R ≈ A
        @test PySpectral.matrix_function(A, :invsqrt; uplo) ≈ inv(R)
        @test PySpectral.matrix_function(PySpectral.matrix_function(A, :log), :exp) ≈ A
    end

    # Exact (Daleckii–Krein) at degenerate spectra.
    for T in (Float64, ComplexF64)
        for λ in ([1.0, 1.0, 2.0, 3.0], [2.0, 2.0, 2.0, 2.0], [1.0, 1.0 + 1e-13, 2.0, 3.0])
            A = with_eigenvalues(T, λ)
            for f in (:exp, :log, :sqrt, (:pow, 3))
                test_rrule(PySpectral.matrix_function, A, f ⊢ NoTangent();
                           check_inferred=false, rtol=1e-5, atol=1e-7)
            end
        end
        # f(x) = x: the gradient is the Hermitian part of ΔY folded onto the triangle.
        A = with_eigenvalues(T, [1.0, 1.0, 0.0, -2.0])
        ΔY = randn(T, 4, 4)
        Y, back = rrule(PySpectral.matrix_function, A, (:pow, 1))
        @test Y ≈ Hermitian(A, :L)
        G = (ΔY + ΔY') / 2
        @test back(ΔY)[2] ≈ 2tril(G, -1) + Diagonal(real(diag(G)))
    end

    Aneg = with_eigenvalues(Float64, [-1.0, 1.0, 2.0])
    err = try
        PySpectral.matrix_function(Aneg, :log)
    catch e
        e
    end
    @test err isa DomainError
    @test occursin("λ[1]", sprint(showerror, err))
    @test_throws DomainError PySpectral.matrix_function(Aneg, :sqrt)
    @test_throws DomainError PySpectral.matrix_function(Aneg, :invsqrt)
    @test_throws DomainError PySpectral.matrix_function(Aneg, (:pow, 0.5))
    @test PySpectral.matrix_function(Aneg, (:pow, 2)) ≈ Aneg * Aneg
    @test PySpectral.matrix_function([-1e-17 0; 0 4.0], :sqrt) ≈ [0 0; 0 2.0]
    @test_throws ArgumentError PySpectral.matrix_function(Aneg, :cosh)
end

@testset "Zygote composition" begin
    Random.seed!(7)
    for T in (Float64, ComplexF64), (m, n) in ((5, 3), (3, 5))
        A, W = randn(T, m, n), randn(T, m, n)
        w = randn(min(m, n))
        # Every field of the returned SVD: F.U, F.S, F.V, F.Vt.
        fields(X) = (F = PySpectral.svd(X);
                     real(dot(W, F.U * Diagonal(F.S) * F.Vt)) + dot(w, F.S) +
                     real(dot(W, F.U * F.V')))
        test_grad(fields, A)
        y, back = Zygote.pullback(fields, A)
        @test y ≈ fields(A)
        @test only(back(1.0)) ≈ only(Zygote.gradient(fields, A))
        # Top-k polar factor (exact coupling to the discarded pair), and composites
        # inside other operations.
        topk(X) = (F = PySpectral.svd(X; k=2); real(dot(W, F.U * F.Vt)))
        test_grad(topk, A)
        B = randn(T, n, n)
        mixed(X) = sum(abs2, PySpectral.svd_function(X * B, :polar) .- W) +
                   sum(PySpectral.svdvals(2X))
        test_grad(mixed, A)
    end
    for T in (Float64, ComplexF64)
        H, W = randn(T, 4, 4), randn(T, 4, 4)
        eigloss(X) = (E = PySpectral.eigh(X);
                  sum(E.values .^ 3) + real(dot(W, E.vectors * Diagonal(E.values) * E.vectors')))
        test_grad(eigloss, H)
        logdet_like(X) = real(tr(PySpectral.matrix_function(X' * X + I, :log))) +
                         sum(PySpectral.eigvalsh(X + X'))
        test_grad(logdet_like, H)
    end
end

@testset "cotangent forms" begin
    Random.seed!(8)
    A = randn(ComplexF64, 5, 3)
    F, back = rrule(PySpectral.svd, A)
    Δ = invariant_svd_tangent(F)
    ref = back(Δ)[2]
    @test back(Δ)[1] isa NoTangent
    for z in (NoTangent(), ZeroTangent(), nothing)
        @test back(z)[2] isa ChainRulesCore.AbstractZero
    end
    @test back(@thunk(Δ))[2] ≈ ref
    @test back(ChainRulesCore.InplaceableThunk(x -> x .+= 0, @thunk(Δ)))[2] ≈ ref
    @test back(Tangent{typeof(F)}(; U=copy(Δ.U')', S=Δ.S, Vt=copy(Δ.Vt')'))[2] ≈ ref
    @test back(Tangent{typeof(F)}(; U=Δ.U, S=@thunk(Δ.S), Vt=Δ.Vt))[2] ≈ ref
    @test back(Tangent{typeof(F)}(; U=Δ.U, S=Δ.S, V=Δ.Vt'))[2] ≈ ref
    @test back(Tangent{typeof(F)}(; U=Δ.U, S=Δ.S, Vt=Δ.Vt / 2, V=Δ.Vt' / 2))[2] ≈ ref
    @test back(Tangent{typeof(F)}(; S=Δ.S))[2] ≈ F.U * Diagonal(Δ.S) * F.Vt
    @test back(Tangent{Any}(; U=Δ.U, S=ZeroTangent(), Vt=Δ.Vt))[2] ≈
          back(Tangent{typeof(F)}(; U=Δ.U, Vt=Δ.Vt))[2]
    @test back((U=Δ.U, S=Δ.S, Vt=Δ.Vt))[2] ≈ ref

    H = randn(ComplexF64, 4, 4)
    E, backE = rrule(PySpectral.eigh, H)
    ΔE = invariant_eigen_tangent(E)
    refE = backE(ΔE)[2]
    @test backE(@thunk(ΔE))[2] ≈ refE
    @test backE(ZeroTangent())[2] isa ChainRulesCore.AbstractZero
    values_only = backE(Tangent{typeof(E)}(; values=ΔE.values))[2]
    @test values_only + backE(Tangent{typeof(E)}(; vectors=ΔE.vectors))[2] ≈ refE
    @test values_only ≈ rrule(PySpectral.eigvalsh, H)[2](ΔE.values)[2]
    @test rrule(PySpectral.svd_function, A, :polar)[2](NoTangent())[2] isa ChainRulesCore.AbstractZero

    # The plain pullbacks: they add into ΔA (here a view of a batch buffer), take
    # `nothing` for absent cotangents and leave their inputs alone.
    buf = zeros(ComplexF64, 5, 3, 2)
    ΔU0 = copy(Δ.U)
    svd_pullback!(view(buf, :, :, 2), F.U, F.S, F.Vt, Δ.U, Δ.S, Δ.Vt)
    @test buf[:, :, 2] ≈ ref && iszero(buf[:, :, 1])
    @test Δ.U == ΔU0
    svd_pullback!(view(buf, :, :, 2), F.U, F.S, F.Vt, Δ.U, Δ.S, Δ.Vt)
    @test buf[:, :, 2] ≈ 2ref
    @test svd_pullback!(zeros(ComplexF64, 5, 3), F.U, F.S, F.Vt, nothing, Δ.S, nothing) ≈
          F.U * Diagonal(Δ.S) * F.Vt
    @test iszero(svd_pullback!(zeros(ComplexF64, 5, 3), F.U, F.S, F.Vt, nothing, nothing, nothing))

    # Full factors with a zero cotangent on the complement = the thin pullback.
    Ff = PySpectral.svd(A; full=true)
    Fk = LinearAlgebra.SVD(Ff.U[:, 1:3], Ff.S, Ff.Vt[1:3, :])
    Δk = invariant_svd_tangent(Fk)
    thin = svd_pullback!(zeros(ComplexF64, 5, 3), Fk.U, Fk.S, Fk.Vt, Δk.U, Δk.S, Δk.Vt)
    full = svd_pullback!(zeros(ComplexF64, 5, 3), Ff.U, Ff.S, Ff.Vt,
                         hcat(Δk.U, zeros(ComplexF64, 5, 2)), Δk.S, Δk.Vt)
    @test full ≈ thin
end

@testset "gauge warning" begin
    Random.seed!(9)
    A = with_singular_values(Float64, 4, 3, [2.0, 2.0, 1.0])
    basis_dependent(X; kw...) = real(PySpectral.svd(X; kw...).U[1, 1])
    @test_logs (:warn, r"^svd: ") Zygote.gradient(basis_dependent, A)
    @test_throws GaugeError Zygote.gradient(X -> basis_dependent(X; gauge=:raise), A)
    @test_logs min_level = WARN Zygote.gradient(X -> basis_dependent(X; gauge=:ignore), A)
    records = Any[]
    Zygote.gradient(X -> basis_dependent(X; gauge=(op, v, t) -> push!(records, (op, v, t))), A)
    @test length(records) == 1
    op, viol, tol = only(records)
    @test op === :svd && viol > tol
    # GaugeRecorder, the policy pyspectral's bridge passes (one per call): it records
    # what the callable above records, and nothing for a gauge-invariant loss
    recorder = GaugeRecorder()
    Zygote.gradient(X -> basis_dependent(X; gauge=recorder), A)
    op, viol, tol = only(recorder.records)
    @test op === :svd && viol > tol
    invariant = GaugeRecorder()
    Zygote.gradient(X -> sum(abs2, PySpectral.svd(X; gauge=invariant).S), A)
    @test isempty(invariant.records)
    # and called as the bridge calls the pullbacks: on slices of 3-arrays
    F = PySpectral.svd(A)
    slices(X) = view(reshape(X, size(X)..., 1), :, :, 1)
    # The cotangent of ⟨v₁, v₂⟩ in v₂ (v₁ held fixed): rotating the cluster {1, 2}
    # changes it at any basis LAPACK returns, so Kₐ[1, 2] = 1 there. (A fixed entry
    # such as ΔVt[2, 1] = 1 is not: LAPACK may return v₁[1] = 0 at this degenerate A,
    # where that loss is stationary under the rotation.)
    ΔVt = zero(F.Vt)
    ΔVt[2, :] = F.Vt[1, :]
    r = GaugeRecorder()
    svd_pullback!(slices(zero(A)), slices(F.U), view(reshape(F.S, :, 1), :, 1), slices(F.Vt),
                  nothing, nothing, slices(ΔVt); gauge=r)
    @test length(r.records) == 1 && first(only(r.records)) === :svd

    # Complex phases: U[1, 1] depends on the phase of u₁, |U[1, 1]|² does not.
    Ac = randn(ComplexF64, 4, 3)
    @test_logs (:warn, r"^svd: ") Zygote.gradient(X -> real(PySpectral.svd(X).U[1, 1]), Ac)
    @test_logs min_level = WARN Zygote.gradient(X -> abs2(PySpectral.svd(X).U[1, 1]), Ac)

    # The complement of a full SVD counts through its span only.
    @test_logs (:warn, r"^svd: ") Zygote.gradient(X -> PySpectral.svd(X; full=true).U[1, 5], randn(5, 3))

    H = with_eigenvalues(Float64, [1.0, 1.0, 2.0])
    @test_logs (:warn, r"^eigh: ") Zygote.gradient(X -> PySpectral.eigh(X).vectors[1, 1], H)
    @test_throws GaugeError Zygote.gradient(X -> PySpectral.eigh(X; gauge=:raise).vectors[1, 1], H)
    E = PySpectral.eigh(H)
    ΔV = zeros(3, 3)
    ΔV[1, 2] = 1  # a basis-dependent cotangent inside the cluster {1, 2}
    r = GaugeRecorder()
    eigh_pullback!(zeros(3, 3), E.values, E.vectors, nothing, ΔV; gauge=r)
    @test length(r.records) == 1 && first(only(r.records)) === :eigh

    # Truncating inside a degenerate cluster makes the result itself basis dependent.
    A3 = with_singular_values(Float64, 3, 3, [2.0, 2.0, 1.0])
    @test_logs (:warn, r"^svd_function: ") PySpectral.svd_function(A3, (:truncate, 1))
    @test_throws GaugeError PySpectral.svd_function(A3, (:truncate, 1); gauge=:raise)
    @test_logs min_level = WARN PySpectral.svd_function(A3, (:truncate, 2))

    @test check_gauge(:svd, 0.1, 0.5, :raise) === nothing
    @test_throws GaugeError check_gauge(:svd, 1.0, 0.5, :raise)
    @test_logs (:warn, r"^eigh: .*measured 1\.0 > gauge_atol 0\.5") check_gauge(:eigh, 1.0, 0.5, :warn)
    @test check_gauge(:svd, 1.0, 0.5, "ignore") === nothing
    @test_throws ArgumentError check_gauge(:svd, 1.0, 0.5, :loud)
end

# Top-k (svd_topk, eigh_topk): the cases of pyspectral's tests/test_topk.py. Gradients
# are compared with the full path (`PySpectral.svd(X; k)`, `PySpectral.eigh`) on
# gauge-invariant losses, or, where k cuts a cluster (the kept basis is then arbitrary),
# with the full path's formula in the basis the top-k path returned.

topk_decaying(T, m, n; ratio=0.7) = with_singular_values(T, m, n, [10 * ratio^i for i in 0:min(m, n)-1])

# A gauge-invariant loss of top-k triplets: U Vᴴ against W, and the singular values.
topk_loss(F, W) = real(sum(conj.(W) .* (F.U * F.Vt))) + sum(abs2, F.S)

topk_grad(A, W, k; kw...) = only(Zygote.gradient(X -> topk_loss(svd_topk(X, k; kw...), W), A))
full_grad(A, W, k) = only(Zygote.gradient(X -> topk_loss(PySpectral.svd(X; k), W), A))

relerr(a, b) = norm(a - b) / norm(b)

# The full path's pullback (svd_pullback! on the top-k triplets completed by an SVD of A
# on the complement, cotangents zero past k) in the basis of the given triplets.
function full_formula_svd(A, F, ΔU, ΔVᴴ)
    k = length(F.S)
    Wu, Wv = nullspace(Matrix(F.U')), nullspace(F.Vt)
    C = svd(Wu' * A * Wv)
    U2, S2, V2 = [F.U Wu*C.U], [F.S; C.S], [Matrix(F.Vt') Wv*C.V]
    r = length(S2)
    ΔA = zeros(eltype(A), size(A))
    return svd_pullback!(ΔA, U2, S2, Matrix(V2'), [ΔU zeros(size(ΔU, 1), r - k)], nothing,
                         [ΔVᴴ; zeros(r - k, size(ΔVᴴ, 2))]; gauge=:ignore)
end

function full_formula_eigh(H, E, ΔV)
    k = length(E.values)
    W = nullspace(Matrix(E.vectors'))
    C = eigen(Hermitian(W' * H * W))
    λ2, V2 = [E.values; C.values], [E.vectors W*C.vectors]
    ΔA = zeros(eltype(H), size(H))
    return eigh_pullback!(ΔA, λ2, V2, nothing, [ΔV zeros(size(ΔV, 1), length(λ2) - k)];
                          gauge=:ignore)
end

@testset "top-k randomized equals full" begin
    Random.seed!(11)
    for T in (Float64, ComplexF64), (m, n) in ((40, 30), (30, 40))
        A = topk_decaying(T, m, n)
        W = randn(T, m, n)
        F = svd_topk(A, 5; method=:randomized, oversample=4)
        F0 = PySpectral.svd(A; k=5)
        @test F.S ≈ F0.S rtol = 1e-12
        @test F.U * F.Vt ≈ F0.U * F0.Vt atol = 1e-10
        @test relerr(topk_grad(A, W, 5; method=:randomized, oversample=4), full_grad(A, W, 5)) < 1e-9
    end
    # No gap at k (s₉/s₈ = 0.97): the iteration converges on the block past k, whose
    # extra Ritz vectors precondition the CG; exact.
    A = with_singular_values(Float64, 80, 60, [1 / sqrt(i) for i in 1:60])
    W = randn(80, 60)
    @test relerr(topk_grad(A, W, 8; method=:randomized, oversample=24), full_grad(A, W, 8)) < 1e-8
    # Float32
    A = topk_decaying(Float32, 30, 20)
    W = randn(Float32, 30, 20)
    g = topk_grad(A, W, 3; method=:randomized)
    @test all(isfinite, g)
    @test relerr(Float64.(g), full_grad(Float64.(A), Float64.(W), 3)) < 1e-4
end

@testset "top-k default method" begin
    Random.seed!(12)
    # Issue 8: a 600×600 Gaussian has no gap: :auto iterates, cannot certify within its
    # budget and takes the full path (the whole thin SVD as its block), silently; exact.
    G = randn(600, 600)
    W = randn(600, 600)
    B = @test_logs min_level = WARN PySpectral.svd_topk_block(G, 8)
    @test B.d == 600 && length(B.S) == 600
    @test relerr(topk_grad(G, W, 8), full_grad(G, W, 8)) < 1e-10
    # At a gap :auto keeps the certified iteration: the block of k + max(10, k) Ritz
    # triplets, the certified ones first.
    D = topk_decaying(Float64, 600, 600)
    B = @test_logs min_level = WARN PySpectral.svd_topk_block(D, 8)
    @test length(B.S) == 18 && 8 <= B.d <= 18
    @test B.S[1:8] ≈ svdvals(D)[1:8] rtol = 1e-12
    @test relerr(topk_grad(D, W, 8), full_grad(D, W, 8)) < 1e-9
    # Small matrices take the full path outright.
    A = topk_decaying(Float64, 20, 16)
    @test PySpectral.topk_config(:svd, 20, 16, Float64, 3, :auto, nothing, nothing, nothing,
                                 500)[1] === :full
    @test svd_topk(A, 3).S ≈ svdvals(A)[1:3]
end

@testset "top-k scale invariance" begin
    Random.seed!(13)
    A = with_singular_values(Float64, 40, 30, [5.0; 4.0; 3.0; [0.8^i for i in 0:26]])
    W = randn(40, 30)
    # a loss of U, V (its gradient scales like 1/scale) and one of S (scale free)
    gU(X; kw...) = only(Zygote.gradient(Y -> (F = svd_topk(Y, 3; kw...);
                                              real(sum(W .* (F.U * F.Vt)))), X))
    gS(X; kw...) = only(Zygote.gradient(Y -> sum(svd_topk(Y, 3; kw...).S), X))
    rU, rS = gU(A; method=:full), gS(A; method=:full)
    for (T, scales, tol) in ((Float64, (1e-150, 1e150), 1e-10), (Float32, (1e-9, 1e9), 1e-4))
        for scale in scales
            X = T.(A .* scale)
            g1, g2 = gU(X; method=:randomized), gS(X; method=:randomized)
            @test all(isfinite, g1) && all(isfinite, g2)
            @test relerr(Float64.(g1) .* scale, rU) < tol
            @test relerr(Float64.(g2), rS) < tol
        end
    end
end

@testset "top-k cut cluster or zeros" begin
    Random.seed!(14)
    # k = 2 cuts a cluster or a block of zeros: a bounded gradient, the full path's
    # formula (in the returned basis) and the gauge warning (issue 8: 1e14, 1e16).
    cases = (([3.0, 2.0, 2.0, 1.0], 6, 4, (;)),
             ([3.0; 2.0; 2.0; 1.0; [0.5 * 0.7^i for i in 0:15]], 30, 20, (;)),
             ([3.0; zeros(19)], 30, 20, (; oversample=3)))
    for (s, m, n, kw) in cases
        A = with_singular_values(Float64, m, n, s)
        F, back = rrule(svd_topk, A, 2; method=:randomized, kw...)
        ΔU, ΔVᴴ = randn(m, 2), randn(2, n)
        ΔA = @test_logs (:warn, r"^svd: ") match_mode = :any back(
            Tangent{typeof(F)}(; U=ΔU, Vt=ΔVᴴ))[2]
        @test maximum(abs, ΔA) < 10
        @test relerr(ΔA, full_formula_svd(A, F, ΔU, ΔVᴴ)) < 1e-10
    end
    # eigh cutting a repeated eigenvalue (issue 8: 8e14)
    H = with_eigenvalues(Float64, [5.0; 3.0; 3.0; 1.0; [0.5 * 0.6^i for i in 0:15]])
    E, back = rrule(eigh_topk, H, 2; method=:randomized)
    @test E.values ≈ [3.0, 5.0]
    ΔV = randn(20, 2)
    ΔA = @test_logs (:warn, r"^eigh: ") match_mode = :any back(
        Tangent{typeof(E)}(; vectors=ΔV))[2]
    @test maximum(abs, ΔA) < 10
    @test relerr(ΔA, full_formula_eigh(H, E, ΔV)) < 1e-10
end

@testset "top-k zero matrix" begin
    Z = zeros(12, 9)
    for method in (:randomized, :auto)
        F = svd_topk(Z, 3; method)
        @test F.S == zeros(3)
        @test F.U' * F.U ≈ I
        @test only(Zygote.gradient(X -> sum(abs2, svd_topk(X, 3; method).S), Z)) == zeros(12, 9)
        g = @test_logs (:warn, r"^svd: ") match_mode = :any only(
            Zygote.gradient(X -> (G = svd_topk(X, 3; method); sum(G.U * G.Vt)), Z))
        @test all(isfinite, g)
    end
end

@testset "top-k eigh" begin
    Random.seed!(15)
    spectra = ([10 * 0.7^i for i in 0:29],              # positive
               [-10.0; -9.0; -8.0; [5 * 0.7^i for i in 0:26]])  # a larger negative end
    for T in (Float64, ComplexF64), λ in spectra, largest in (true, false), uplo in (:L, :U)
        H = with_eigenvalues(T, largest ? λ : -λ)
        A = uplo === :L ? tril(H) : triu(H)  # only the uplo triangle is read
        Wt = randn(T, 30, 30)
        loss(w, V) = real(sum(conj.(Wt) .* (V * V'))) + sum(abs2, w)
        sel = largest ? (27:30) : (1:4)
        E = eigh_topk(A, 4; uplo, largest, method=:randomized, oversample=6)
        @test E.values ≈ PySpectral.eigh(A; uplo).values[sel] atol = 1e-12
        # (the closures' own names: one shared with the loop body would be captured)
        g = only(Zygote.gradient(X -> (Ek = eigh_topk(X, 4; uplo, largest, method=:randomized,
                                                      oversample=6);
                                       loss(Ek.values, Ek.vectors)), A))
        g0 = only(Zygote.gradient(X -> (Ef = PySpectral.eigh(X; uplo);
                                        loss(Ef.values[sel], Ef.vectors[:, sel])), A))
        @test relerr(g, g0) < 1e-9
        @test iszero(uplo === :L ? triu(g, 1) : tril(g, -1))
    end
end

@testset "top-k certificate" begin
    Random.seed!(16)
    # Not certified under method=:randomized: a warning with the measured residual (as
    # keyword arguments too, which pyspectral's bridge reads), and the result anyway.
    G = randn(40, 30)
    logs, F = Test.collect_test_logs(; min_level=WARN) do
        svd_topk(G, 3; method=:randomized, n_iter=2)
    end
    rec = only(logs)
    @test occursin(r"^svd_topk\(k=3, method=:randomized\): not certified: after 2 iterations " *
                   r"the largest relative residual", rec.message)
    @test rec.kwargs[:reason] == "residual" && rec.kwargs[:iterations] == 2
    @test rec.kwargs[:residual] > rec.kwargs[:tol] && rec.kwargs[:p] == 13
    @test rec.kwargs[:stop] == ""
    @test all(isfinite, F.S)
    # a cluster at k that extends past the block k + oversample
    C = with_singular_values(Float64, 30, 20, [3.0; fill(2.0, 10); fill(1.0, 9)])
    @test_logs (:warn, r"^svd_topk\(k=2, .*form a cluster .* k \+ oversample = 6") svd_topk(
        C, 2; method=:randomized, oversample=4, n_iter=100)
    # the same for eigh (a larger negative end, no oversample, one iteration)
    H = with_eigenvalues(Float64, [-10.0, -9.0, -8.0, 1.0, 0.9, 0.5, 0.1, 0.05])
    @test_logs (:warn, r"^eigh_topk\(k=2, method=:randomized\): not certified") eigh_topk(
        H, 2; method=:randomized, oversample=0, n_iter=1)
    # a certified call is silent
    @test_logs min_level = WARN svd_topk(topk_decaying(Float64, 40, 30), 4; method=:randomized)
end

@testset "top-k n_iter and the randomized minimum" begin
    # Singular values 1, 0.999, 0.998, ...: the residuals fall too slowly to be
    # certified within a few hundred iterations (rate about 0.98 for k = 2).
    A = with_singular_values(Float64, 60, 60, [1.0 - 1e-3 * i for i in 0:59])
    # n_iter alone limits the iterations (issue 15, item 7: the measured rate stopped
    # them early)
    logs, _ = Test.collect_test_logs(; min_level=WARN) do
        svd_topk(A, 2; method=:randomized, n_iter=150)
    end
    @test only(logs).kwargs[:iterations] == 150 && only(logs).kwargs[:stop] == ""
    # without n_iter, :randomized gives up no earlier than RANDOMIZED_MIN_ITERATIONS
    logs, _ = Test.collect_test_logs(; min_level=WARN) do
        svd_topk(A, 2; method=:randomized)
    end
    @test only(logs).kwargs[:iterations] >= PySpectral.RANDOMIZED_MIN_ITERATIONS
    H = with_eigenvalues(Float64, [1.0 - 1e-3 * i for i in 0:59])
    logs, _ = Test.collect_test_logs(; min_level=WARN) do
        eigh_topk(H, 2; method=:randomized, n_iter=130)
    end
    @test only(logs).kwargs[:iterations] == 130
end

@testset "top-k backward without a gap" begin
    Random.seed!(17)
    # A CG that cannot converge (capped at one step) on a small matrix is redone exactly
    # by the dense fallback, silently.
    A = with_singular_values(Float64, 40, 30, [1 / sqrt(i) for i in 1:30])
    W = randn(40, 30)
    g = @test_logs min_level = WARN topk_grad(A, W, 4; method=:randomized, oversample=6,
                                               maxiter=1)
    @test relerr(g, full_grad(A, W, 4)) < 1e-9
    # Larger matrices warn, with the reached residual (also as a keyword argument).
    logs, _ = Test.collect_test_logs(; min_level=WARN) do
        PySpectral._warn_unconverged(:svd, 7, 0.25)
    end
    rec = only(logs)
    @test occursin(r"^svd_topk backward: the Sylvester solve did not converge in 7 " *
                   r"iterations \(relative residual 0\.25\)", rec.message)
    @test rec.kwargs[:maxiter] == 7 && rec.kwargs[:residual] == 0.25
    # A column whose pᴴTp is at rounding level stops there: no division by noise.
    b = randn(10, 3)
    op(P, cols) = (Q = copy(P); cols[1] == 1 && (Q[:, 1] .= 0); Q)
    x, residual = PySpectral.block_cg(op, b, 1e-12, 50, (z, cols) -> z)
    @test all(isfinite, x)
    @test residual ≈ 1.0
    @test x[:, 2:3] ≈ b[:, 2:3]
end

# Block Krylov top-k (method = :krylov, and :auto's hand-over): the cases of pyspectral's
# tests/test_topk_krylov.py. The slow tail of benchmarks/bench_topk.py's table 1b.
krylov_slow_tail(n, k) =
    [exp10.(range(0, -1; length=k)); 0.05 .* exp10.(-5 .* (0:n-k-1) ./ 4064)]

@testset "top-k: block Krylov" begin
    Random.seed!(11)  # with_singular_values draws from the global RNG
    rng = Random.Xoshiro(11)
    @testset "svd $T $(m)x$n" for T in (Float64, ComplexF64), (m, n) in ((80, 60), (60, 80))
        A = with_singular_values(T, m, n, [10 * 0.8^i for i in 0:min(m, n)-1])
        W = randn(rng, T, m, n)
        F = @test_logs min_level = WARN svd_topk(A, 5; method=:krylov)
        @test F.S ≈ LinearAlgebra.svdvals(A)[1:5] rtol = 1e-12
        @test relerr(topk_grad(A, W, 5; method=:krylov), full_grad(A, W, 5)) < 1e-9
    end
    @testset "svd slow tail" begin
        A = with_singular_values(Float64, 300, 300, krylov_slow_tail(300, 16))
        W = randn(rng, 300, 300)
        B = PySpectral.svd_topk_block(A, 16; method=:krylov)
        @test B.d >= 16
        V = B.Vt[1:B.d, :]'
        U, S = B.U[:, 1:B.d], B.S[1:B.d]
        @test maximum(c -> LinearAlgebra.norm(c), eachcol(A * V .- U .* S')) <=
              eps()^0.75 * S[1]
        @test relerr(topk_grad(A, W, 16; method=:krylov), full_grad(A, W, 16)) < 1e-8
    end
    @testset "eigh largest=$largest $T" for largest in (true, false), T in (Float64, ComplexF64)
        w0 = [-10.0; -9.0; -8.0; [5 * 0.8^i for i in 0:56]]
        w0 = largest ? w0 : -w0
        Q = Matrix(LinearAlgebra.qr(randn(rng, T, 60, 60)).Q)
        H = Matrix(Hermitian(Q * LinearAlgebra.Diagonal(w0) * Q'))
        E = @test_logs min_level = WARN eigh_topk(H, 4; largest, method=:krylov)
        ref = sort(w0)
        @test E.values ≈ (largest ? ref[end-3:end] : ref[1:4]) atol = 1e-12
        @test LinearAlgebra.norm(H * E.vectors - E.vectors * LinearAlgebra.Diagonal(E.values)) <
              1e-10
    end
    @testset "uncertified krylov warns" begin
        G = randn(rng, 60, 50)
        @test_logs (:warn, r"method=:krylov\): not certified") svd_topk(G, 3; method=:krylov,
                                                                          n_iter=2)
    end
    @testset "cost model" begin
        @test PySpectral.krylov_block(32, 64, 4096) == 32
        @test PySpectral.krylov_block(4, 14, 30) == 8
        @test PySpectral.krylov_block(2, 12, 12) == 0
        @test PySpectral.chebyshev_rate(0.25) ≈ 0.0718 atol = 1e-4
        unit = PySpectral._unit(4096, 4096, 64)
        kry = PySpectral._krylov_step_cost(4096, 4096, 32, 64 + 5 * 32, 2)
        @test PySpectral.krylov_pays(1e10, 0.21, 0.25, 2unit, kry, unit)
        @test !PySpectral.krylov_pays(1e5, 3e-4, 0.25, 2unit, kry, unit)
        # same numbers as pyspectral's cost model
        @test PySpectral._krylov_step_cost(400, 300, 32, 200, 2) ==
              2 * PySpectral._unit(400, 300, 32) + 4.0 * 700 * 200 * 32 + 10.0 * 200^3 / 6
    end
end

@testset "precomputed values" begin
    # SpectralValues: f given by its values and derivatives on the spectrum (how
    # pyspectral passes a user's PyTorch functions) gives what the pair (f, f′) gives,
    # values and gradients, at distinct, degenerate and zero singular values.
    Random.seed!(12)
    cube(x) = x^3 + x
    cube′(x) = 3x^2 + 1
    # Zygote gradient at A of the real loss X ↦ Re⟨W, F(X)⟩. (The closures below
    # capture loop variables only: one reassigned in the testset's own scope would be
    # captured boxed.)
    ∇(F, W, A) = only(Zygote.gradient(X -> real(sum(conj.(W) .* F(X))), A))
    for T in (Float64, ComplexF64), (m, n) in ((5, 3), (3, 5), (3, 3)),
        s in ([3.0, 2.0, 1.0], [2.0, 2.0, 1.0], [2.0, 1.0, 0.0])

        A = with_singular_values(T, m, n, s)
        S = PySpectral.svd(A).S
        sv = SpectralValues(cube.(S), cube′.(S))
        W = randn(T, m, n)
        @test PySpectral.svd_function(A, sv) ≈ PySpectral.svd_function(A, (cube, cube′))
        @test ∇(X -> PySpectral.svd_function(X, sv), W, A) ≈
              ∇(X -> PySpectral.svd_function(X, (cube, cube′)), W, A)
    end
    for T in (Float64, ComplexF64), uplo in (:L, :U),
        λ in ([-1.0, 0.5, 2.0, 3.0], [1.0, 1.0, 2.0, 2.0], [0.5, 0.5, 0.5, 0.5])

        A = with_eigenvalues(T, λ)
        w = PySpectral.eigh(A; uplo).values
        sv = SpectralValues(sin.(w), cos.(w))
        W = randn(T, 4, 4)
        @test PySpectral.matrix_function(A, sv; uplo) ≈
              PySpectral.matrix_function(A, (sin, cos); uplo)
        @test ∇(X -> PySpectral.matrix_function(X, sv; uplo), W, A) ≈
              ∇(X -> PySpectral.matrix_function(X, (sin, cos); uplo), W, A)
    end

    # As pyspectral's glue calls them: values as views into k×B arrays, factors in
    # LinearAlgebra.SVD / Eigen objects built from batched results.
    A = with_singular_values(ComplexF64, 4, 3, [2.0, 2.0, 0.0])
    F = PySpectral.svd(A)
    fS, dS = [cube.(F.S) zeros(3)], [cube′.(F.S) zeros(3)]
    vS = SpectralValues(view(fS, :, 1), view(dS, :, 1))
    ΔY = randn(ComplexF64, 4, 3)
    @test PySpectral.svd_function_apply(SVD(F.U, F.S, F.Vt), vS) ≈
          PySpectral.svd_function(A, (cube, cube′))
    @test svd_function_pullback!(zeros(ComplexF64, 4, 3), F.U, F.S, F.Vt, vS, ΔY) ≈
          svd_function_pullback!(zeros(ComplexF64, 4, 3), F.U, F.S, F.Vt, (cube, cube′), ΔY)
    H = with_eigenvalues(ComplexF64, [1.0, 1.0, 3.0])
    E = PySpectral.eigh(H)
    fλ, dλ = [zeros(3) sin.(E.values)], [zeros(3) cos.(E.values)]
    vλ = SpectralValues(view(fλ, :, 2), view(dλ, :, 2))
    ΔY = randn(ComplexF64, 3, 3)
    @test PySpectral.matrix_function_apply(Eigen(E.values, view(E.vectors, :, :)), vλ) ≈
          PySpectral.matrix_function(H, (sin, cos))
    @test matrix_function_pullback!(zeros(ComplexF64, 3, 3), E.values, E.vectors, vλ, ΔY) ≈
          matrix_function_pullback!(zeros(ComplexF64, 3, 3), E.values, E.vectors,
                                    (sin, cos), ΔY)

    # The values must belong to the spectrum: one per point, real.
    @test_throws DimensionMismatch SpectralValues([1.0, 2.0], [1.0])
    @test_throws DimensionMismatch PySpectral.svd_function(randn(3, 3),
                                                           SpectralValues(ones(2), ones(2)))
    @test_throws DimensionMismatch PySpectral.matrix_function(H, SpectralValues(ones(2), ones(2)))
    @test_throws MethodError SpectralValues(ones(ComplexF64, 3), ones(3))
end

# The message of the ArgumentError that `f()` throws ("no error" if it returns);
# anything else it throws propagates, so the test errors.
function argument_error_message(f)
    try
        f()
    catch err
        err isa ArgumentError && return err.msg
        rethrow()
    end
    return "no error"
end

# The same rules and wording as pyspectral's check_keywords (tests/test_keywords.py):
# `nothing` for None, and the Julia names `rtol`, `maxiter` of the top-k rrules.
@testset "keyword validation" begin
    Random.seed!(12)
    A = randn(4, 3)
    H = with_eigenvalues(Float64, [1.0, 2.0, 4.0])
    H = (H + H') / 2
    TOL = "a finite number >= 0, or nothing"
    tolerance_bad = (-1.0, -1, -1e-300, NaN, Inf, -Inf, true, "1e-8", 1im)
    rules = (
        degeneracy_atol=(TOL, tolerance_bad),
        gauge_atol=(TOL, tolerance_bad),
        hermitian_tol=(TOL, tolerance_bad),
        broadening=("a finite number > 0, or nothing", (0, 0.0, -1e-3, NaN, Inf, true, "wide")),
        rtol=("a number with 0 < rtol < 1, or nothing", (0, 0.0, -1e-6, 1, 1.0, 2.0, NaN, Inf, true)),
        oversample=("an integer >= 0, or nothing (automatic)", (-1, -2, true)),
        n_iter=("an integer >= 0, or nothing (automatic)", (-1, false)),
        maxiter=("an integer >= 1", (0, -5, true)),
    )
    # op name => (call with keywords, the numeric keywords it takes)
    calls = (
        ("svd", kw -> PySpectral.svd(A; kw...), (:degeneracy_atol, :broadening, :gauge_atol)),
        ("svd_function", kw -> svd_function(A, :polar; kw...), (:degeneracy_atol,)),
        ("eigh", kw -> PySpectral.eigh(H; kw...),
         (:degeneracy_atol, :broadening, :gauge_atol, :hermitian_tol)),
        ("eigvalsh", kw -> eigvalsh(H; kw...), (:hermitian_tol,)),
        ("matrix_function", kw -> matrix_function(H, :exp; kw...),
         (:degeneracy_atol, :hermitian_tol)),
        ("svd_topk", kw -> svd_topk(A, 2; kw...),
         (:oversample, :n_iter, :rtol, :maxiter, :degeneracy_atol)),
        ("eigh_topk", kw -> eigh_topk(H, 2; kw...),
         (:oversample, :n_iter, :rtol, :maxiter, :degeneracy_atol)),
        ("svd_topk", kw -> rrule(svd_topk, A, 2; kw...),
         (:rtol, :maxiter, :degeneracy_atol, :broadening, :gauge_atol)),
        ("eigh_topk", kw -> rrule(eigh_topk, H, 2; kw...),
         (:rtol, :maxiter, :degeneracy_atol, :broadening, :gauge_atol)),
    )
    for (op, call, names) in calls, name in names
        need, bad = rules[name]
        for value in bad
            kw = NamedTuple{(name,)}((value,))
            @test argument_error_message(() -> call(kw)) ==
                  "$op: $name must be $need, got $(repr(value))"
        end
    end

    # k: an integer (not a Bool) with 1 <= k <= min(m, n) for the iterative top-k, and
    # any k >= 0 for a truncation, the maximum rank (past min(m, n): every value)
    for k in (0, -1, 4, true)
        need = "k must be an integer with 1 <= k <= min(m, n) = 3, got $(repr(k))"
        @test argument_error_message(() -> svd_topk(A, k)) == "svd_topk: $need"
        @test argument_error_message(() -> eigh_topk(H, k)) == "eigh_topk: $need"
    end
    for k in (-1, true)
        need = "k must be an integer >= 0 (the maximum rank; a k past min(m, n) keeps " *
               "every value), got $(repr(k))"
        @test argument_error_message(() -> PySpectral.svd(A; k)) == "svd: $need"
        @test argument_error_message(() -> tsvd(A; k)) == "tsvd: $need"
        @test argument_error_message(() -> teigh(H; k)) == "teigh: $need"
    end
    @test length(PySpectral.svd(A; k=50).S) == 3 == length(first(tsvd(A; k=4)).S)
    @test length(first(teigh(H; k=9)).values) == size(H, 1)
    # method: a Symbol among :auto, :full, :randomized, :krylov
    for (op, call) in (("svd_topk", m -> svd_topk(A, 2; method=m)),
                       ("eigh_topk", m -> eigh_topk(H, 2; method=m)))
        @test argument_error_message(() -> call(:lanczos)) ==
              "$op: method must be :auto, :full, :randomized or :krylov, got :lanczos"
    end
    # Integer keywords are typed: a float is refused by dispatch.
    @test_throws TypeError svd_topk(A, 2; oversample=2.0)
    @test_throws TypeError PySpectral.svd(A; k=2.0)

    # Edge values that are valid: no extra probe, no power iteration, a zero tolerance,
    # other integer types. With k = min(m, n) the range is exact.
    F = svd_topk(A, Int32(3); oversample=0, n_iter=0)
    @test F.S ≈ PySpectral.svd(A).S rtol = 1e-12
    E = eigh_topk(H, Int16(3); oversample=0, n_iter=0)
    @test E.values ≈ [1.0, 2.0, 4.0] rtol = 1e-12
    @test PySpectral.svd(A; k=Int8(2), degeneracy_atol=0, gauge_atol=0.0,
                         broadening=1e-100).S ≈ F.S[1:2]
    @test PySpectral.eigh(H; check_hermitian=true, hermitian_tol=0).values ≈ E.values
    @test rrule(svd_topk, A, 3; rtol=0.5, maxiter=1)[1].S ≈ F.S
    @test rrule(eigh_topk, H, 3; rtol=1e-300, maxiter=1)[1].values ≈ E.values
end

# torch.linalg.eigh's conventions, as pyspectral's tests/test_conventions.py checks
# them: `uplo` in either case, and only what is read (the `uplo` triangle, the real part
# of the diagonal) must be finite.
@testset "torch.linalg conventions" begin
    Random.seed!(13)
    for T in (Float64, ComplexF64)
        A = with_eigenvalues(T, [0.5, 1.0, 2.0, 4.0])
        ΔY = randn(T, 4, 4)
        for (upper, lower) in ((:L, :l), (:U, :u))
            @test PySpectral.eigh(A; uplo=lower).values == PySpectral.eigh(A; uplo=upper).values
            @test eigvalsh(A; uplo=lower) == eigvalsh(A; uplo=upper)
            @test matrix_function(A, :sqrt; uplo=lower) == matrix_function(A, :sqrt; uplo=upper)
            _, back_lower = rrule(matrix_function, A, :exp; uplo=lower)
            _, back_upper = rrule(matrix_function, A, :exp; uplo=upper)
            @test back_lower(ΔY)[2] == back_upper(ΔY)[2]
            @test PySpectral.eigh_topk(A, 2; uplo=lower).values ≈
                  PySpectral.eigh_topk(A, 2; uplo=upper).values
        end
        @test argument_error_message(() -> PySpectral.eigh(A; uplo=:X)) ==
              "eigh: uplo must be :L or :U (either case), got :X"

        # (1, 3) is above the diagonal: not read with uplo = :L; (3, 1) is, and the
        # other way round for :U.
        for (uplo, unread, read) in ((:L, (1, 3), (3, 1)), (:U, (3, 1), (1, 3)))
            for bad in (NaN, Inf)
                B = copy(A)
                B[unread...] = bad
                @test eigvalsh(B; uplo) ≈ eigvalsh(A; uplo)
                @test matrix_function(B, :exp; uplo) ≈ matrix_function(A, :exp; uplo)
                # checking hermiticity reads both triangles
                msg = argument_error_message(() -> eigh(B; uplo, check_hermitian=true))
                @test occursin("NaN or Inf", msg)
                C = copy(A)
                C[read...] = bad
                msg = argument_error_message(() -> eigh(C; uplo))
                @test occursin("NaN or Inf entries in the uplo=$(repr(uplo)) triangle", msg)
            end
        end
        if T <: Complex  # the imaginary part of the diagonal is not read either
            D = copy(A)
            D[2, 2] = complex(real(A[2, 2]), NaN)
            @test eigvalsh(D) ≈ eigvalsh(A)
            @test PySpectral.eigh(D).values ≈ PySpectral.eigh(A).values
            @test matrix_function(D, :exp) ≈ matrix_function(A, :exp)
            @test PySpectral.eigh_topk(D, 2; method=:full).values ≈
                  PySpectral.eigh_topk(A, 2; method=:full).values
        end
    end
end

# f′ infinite at 0 (sqrt at an exact zero eigenvalue / singular value): the gradient is
# ±Inf exactly where the true derivative is infinite, finite (never NaN) elsewhere.
@testset "infinite derivative at zero" begin
    Random.seed!(14)
    λ = [0.0, 0.5, 2.0, 3.0]
    A = Matrix(Diagonal(λ))
    for ΔY in (ones(4, 4), randn(4, 4))
        _, back = rrule(matrix_function, A, :sqrt)
        G = back(ΔY)[2]
        @test !any(isnan, G)
        @test isinf(G[1, 1]) && sign(G[1, 1]) == sign(ΔY[1, 1])
        # Daleckii–Krein at V = I, folded onto the lower triangle: with H = (ΔY + ΔYᵀ)/2,
        # Gᵢⱼ = 2 H_ij (√λᵢ - √λⱼ)/(λᵢ - λⱼ) below the diagonal, Hⱼⱼ / (2√λⱼ) on it.
        H = (ΔY + ΔY') / 2
        for j in 1:4, i in 1:4
            (i, j) == (1, 1) && continue
            expected = i < j ? 0.0 :
                       i == j ? H[j, j] / (2sqrt(λ[j])) :
                       2H[i, j] * (sqrt(λ[i]) - sqrt(λ[j])) / (λ[i] - λ[j])
            @test G[i, j] ≈ expected atol = 1e-12
        end
    end

    # A 4×3 matrix with singular values (2, 0.5, 0), its null column e₁: perturbing
    # A[1, 1] or A[4, 1] (rows outside the range of the other columns) opens the zero
    # singular value, where √s has an infinite slope; every other entry keeps it at 0.
    B = zeros(4, 3)
    B[2, 2], B[3, 3] = 0.5, 2.0
    ΔY = randn(4, 3)
    _, back = rrule(svd_function, B, (:pow, 0.5))
    G = back(ΔY)[2]
    @test !any(isnan, G)
    @test findall(isinf, G) == [CartesianIndex(1, 1), CartesianIndex(4, 1)]
    @test sign(G[1, 1]) == sign(ΔY[1, 1]) && sign(G[4, 1]) == sign(ΔY[4, 1])
    # The finite entries against central differences along directions that keep s₃ = 0
    # (the columns 2 and 3).
    loss(X) = sum(svd_function(X, (:pow, 0.5)) .* ΔY)
    for j in 2:3, i in 1:4
        E = zeros(4, 3)
        E[i, j] = 1
        fd = FDM(t -> loss(B + t * E), 0.0)
        @test G[i, j] ≈ fd rtol = 1e-6 atol = 1e-8
    end

    # divdiff: finite between 0 and x > 0, infinite only at the tie.
    @test divdiff(0.0, 0.5, 0.0, sqrt(0.5), Inf, 0.5 / sqrt(0.5)) ≈ sqrt(0.5) / 0.5
    @test divdiff(0.0, 0.0, 0.0, 0.0, Inf, Inf) == Inf
    @test divdiff(1.0, 2.0, 1.0, 4.0, Inf, -Inf) ≈ 3.0  # a NaN average: the quotient
end

# ------------------------------------------------------------------ forward mode
# The frules push a tangent through the plain pushforwards of src/pullbacks. Where the
# output is a smooth function of A (singular values, eigenvalues, svd_function,
# matrix_function, and the real SVD at a generic spectrum, whose LAPACK signs are locally
# constant) ChainRulesTestUtils' test_frule applies as is. The factors otherwise carry a
# gauge that finite differences cannot follow (the caveats of the rrule tests above: the
# phases of a complex SVD, LAPACK's eigenvector sign and phase jumps), so their tangents are
# compared after rotating them into the smooth gauge of `aligned_svd` / `aligned_eigen`,
# and at degenerate spectra through gauge-invariant outputs only.

# The tangent of the aligned factors V .* transpose(c), c = alignment(V, ks), given the
# tangent (ΔW, ΔV) of (W, V) rotated with them (W = U for the SVD, W = V for eigh): the
# column i gets the phase motion -i Im(ΔV[kᵢ, i] / V[kᵢ, i]) of cᵢ.
function aligned_tangent(W, ΔW, V, ΔV, ks)
    c = alignment(V, ks)
    eltype(V) <: Complex || return ΔW .* transpose(c)
    θ = [imag(ΔV[k, i] / V[k, i]) for (i, k) in enumerate(ks)]
    return (ΔW .- W .* transpose(im .* θ)) .* transpose(c)
end

# The thin SVD with u_i and v_i rotated together so that V[kᵢ, i] is real positive: a
# smooth function of X near A at a generic spectrum (with `ks` fixed at A).
function aligned_svd(X, ks; kw...)
    F = PySpectral.svd(X; kw...)
    V = Matrix(F.Vt')
    c = transpose(alignment(V, ks))
    return (U=F.U .* c, S=F.S, V=V .* c)
end

# The svd frule's tangent against finite differences of `aligned_svd` along ΔA.
function test_svd_pushforward_fd(A, ΔA; rtol=RTOL, atol=ATOL, kw...)
    F, ΔF = frule((NoTangent(), ΔA), PySpectral.svd, A; kw...)
    V, ΔV = Matrix(F.Vt'), Matrix(ΔF.Vt')
    ks = [argmax(abs.(v)) for v in eachcol(V)]
    fd = FiniteDifferences.jvp(FDM, X -> aligned_svd(X, ks; kw...), (A, ΔA))
    @test ΔF.S ≈ fd.S rtol = rtol atol = atol
    @test aligned_tangent(F.U, ΔF.U, V, ΔV, ks) ≈ fd.U rtol = rtol atol = atol
    @test aligned_tangent(V, ΔV, V, ΔV, ks) ≈ fd.V rtol = rtol atol = atol
end

# The eigh frule's tangent against finite differences of `aligned_eigen` along ΔA (the
# forward twin of test_eigh_pullback_fd).
function test_eigh_pushforward_fd(A, ΔA, uplo; rtol=RTOL, atol=ATOL)
    E, ΔE = frule((NoTangent(), ΔA), PySpectral.eigh, A; uplo)
    V, ΔV = E.vectors, ΔE.vectors
    ks = [argmax(abs.(v)) for v in eachcol(V)]
    fd = FiniteDifferences.jvp(FDM, X -> aligned_eigen(X, uplo, ks), (A, ΔA))
    @test ΔE.values ≈ fd.values rtol = rtol atol = atol
    @test aligned_tangent(V, ΔV, V, ΔV, ks) ≈ fd.vectors rtol = rtol atol = atol
end

# d/dt P(A + tΔA) for the projector P = W Wᴴ onto the columns `c` of a factor.
projector_tangent(W, ΔW, c) = ΔW[:, c] * W[:, c]' + W[:, c] * ΔW[:, c]'
projector(W, c) = W[:, c] * W[:, c]'

@testset "frules" begin
    Random.seed!(15)
    for (m, n) in ((5, 3), (3, 5), (4, 4))
        # Real SVD at a generic spectrum: the raw factors are smooth (LAPACK's signs do
        # not flip under small perturbations), as test_rrule relies on above.
        A, ΔA = randn(m, n), randn(m, n)
        test_frule(PySpectral.svd, A ⊢ ΔA; check_inferred=false, rtol=RTOL, atol=ATOL)
        test_frule(PySpectral.svd, A ⊢ ΔA; fkwargs=(; k=2), check_inferred=false,
                   rtol=RTOL, atol=ATOL)
        for T in (Float64, ComplexF64)
            A, ΔA = randn(T, m, n), randn(T, m, n)
            test_svd_pushforward_fd(A, ΔA)
            test_svd_pushforward_fd(A, ΔA; k=2)
            test_frule(PySpectral.svdvals, A ⊢ ΔA; check_inferred=false, rtol=RTOL,
                       atol=ATOL)
            # Single precision: the tangent in the input's precision, as in double (the
            # polar factor's tangent, which does not depend on the phases).
            F32, ΔF32 = frule((NoTangent(), ComplexF32.(ΔA)), PySpectral.svd, ComplexF32.(A))
            F64, ΔF64 = frule((NoTangent(), ComplexF64.(ΔA)), PySpectral.svd, ComplexF64.(A))
            @test eltype(ΔF32.U) == ComplexF32 && eltype(ΔF32.S) == Float32
            @test ΔF32.U * F32.Vt + F32.U * ΔF32.Vt ≈ ΔF64.U * F64.Vt + F64.U * ΔF64.Vt rtol = 1e-3
        end
    end

    # Degenerate and zero singular values: the tangents of the polar factor, of the
    # projectors onto complete clusters (left and right) and of symmetric functions of S
    # are exact (the rotation inside a cluster is set to zero, as the pullback drops it).
    for T in (Float64, ComplexF64), (m, n) in ((4, 3), (3, 4)),
        (s, c) in (([3.0, 2.0, 2.0], 2:3), ([2.0, 2.0, 2.0], 1:3), ([2.0, 2.0, 0.0], 1:2))

        A, ΔA = with_singular_values(T, m, n, s), randn(T, m, n)
        F, ΔF = frule((NoTangent(), ΔA), PySpectral.svd, A; gauge=:raise)
        svd_invariants(G) = (polar=G.U * G.Vt, PU=projector(G.U, c),
                             PV=projector(Matrix(G.Vt'), c), S2=sum(abs2, G.S))
        fd = FiniteDifferences.jvp(FDM, X -> svd_invariants(PySpectral.svd(X)), (A, ΔA))
        if s[end] > 0  # the polar factor of a rank-deficient matrix is not differentiable
            @test ΔF.U * F.Vt + F.U * ΔF.Vt ≈ fd.polar rtol = 1e-5 atol = 1e-7
        end
        @test projector_tangent(F.U, ΔF.U, c) ≈ fd.PU rtol = 1e-5 atol = 1e-7
        @test projector_tangent(Matrix(F.Vt'), Matrix(ΔF.Vt'), c) ≈ fd.PV rtol = 1e-5 atol = 1e-7
        @test 2 * dot(F.S, ΔF.S) ≈ fd.S2 rtol = 1e-5 atol = 1e-7
        # full factors: the complement moves only through its span (differentiable at
        # full rank; at rank deficiency the null vectors of A mix with it)
        Ff, ΔFf = frule((NoTangent(), ΔA), PySpectral.svd, A; full=true)
        k = length(Ff.S)
        if m > k && s[end] > 0
            Pfd = FiniteDifferences.jvp(FDM, X -> projector(PySpectral.svd(X; full=true).U, k+1:m),
                                        (A, ΔA))
            @test projector_tangent(Ff.U, ΔFf.U, k+1:m) ≈ Pfd rtol = 1e-5 atol = 1e-7
        end
    end

    # svd_function: exact at every spectrum (the cases of the rrule testset above).
    fs = (:polar, (:truncate, 2), (:threshold, 1.5), (:pow, 3), (:pow, 0.5), (:pow, -1),
          :normalize, (x -> x^3 + x, x -> 3x^2 + 1))
    for T in (Float64, ComplexF64), (m, n) in ((5, 3), (3, 5), (3, 3))
        A, ΔA = with_singular_values(T, m, n, [3.0, 2.0, 1.0]), randn(T, m, n)
        for f in fs
            test_frule(PySpectral.svd_function, A ⊢ ΔA, f ⊢ NoTangent();
                       check_inferred=false, rtol=RTOL, atol=ATOL)
        end
    end
    cases = ([2.0, 2.0, 1.0] => (:polar, (:pow, 3), (:truncate, 2), (:threshold, 1.5)),
             [2.0, 2.0, 2.0] => (:polar, (:pow, 3), (:threshold, 1.0)),
             [3.0, 1.0, 0.0] => ((:pow, 3), (:truncate, 2), (:threshold, 0.5)),
             [2.0, 0.0, 0.0] => ((:pow, 3), (:truncate, 1), (:threshold, 1.0)))
    for T in (Float64, ComplexF64), (m, n) in ((4, 3), (3, 4)), (s, fs) in cases
        A, ΔA = with_singular_values(T, m, n, s), randn(T, m, n)
        for f in fs
            test_frule(PySpectral.svd_function, A ⊢ ΔA, f ⊢ NoTangent();
                       check_inferred=false, rtol=1e-5, atol=1e-7)
        end
        # U S Vᴴ = A: the pushforward is the identity at every spectrum.
        @test frule((NoTangent(), ΔA, NoTangent()), PySpectral.svd_function, A,
                    (:pow, 1))[2] ≈ ΔA
    end

    # eigh: the eigenvectors through the aligned gauge, the eigenvalues as they are.
    for T in (Float64, ComplexF64), uplo in (:L, :U)
        A, ΔA = randn(T, 4, 4), randn(T, 4, 4)  # only the uplo triangle is read
        test_eigh_pushforward_fd(A, ΔA, uplo)
        test_frule(PySpectral.eigvalsh, A ⊢ ΔA; fkwargs=(; uplo), check_inferred=false,
                   rtol=RTOL, atol=ATOL)
        # a Hermitian tangent gives the same tangents from either triangle
        H = ΔA + ΔA'
        _, ΔL = frule((NoTangent(), H), PySpectral.eigh, A + A'; uplo=:L)
        _, ΔU = frule((NoTangent(), H), PySpectral.eigh, A + A'; uplo=:U)
        @test ΔL.values ≈ ΔU.values
    end
    # Degenerate eigenvalues: complete-cluster projectors and symmetric functions.
    for T in (Float64, ComplexF64), (λ, c) in (([1.0, 1.0, 2.0, 3.0], 1:2),
                                               ([0.0, 0.0, 1.0, 2.0], 1:2),
                                               ([2.0, 2.0, 2.0, 5.0], 4:4))
        A, ΔA = with_eigenvalues(T, λ), randn(T, 4, 4)
        E, ΔE = frule((NoTangent(), ΔA), PySpectral.eigh, A; gauge=:raise)
        eigh_invariants(G) = (P=projector(G.vectors, c), s=sum(exp, G.values))
        fd = FiniteDifferences.jvp(FDM, X -> eigh_invariants(PySpectral.eigh(X)), (A, ΔA))
        @test projector_tangent(E.vectors, ΔE.vectors, c) ≈ fd.P rtol = 1e-5 atol = 1e-7
        @test dot(exp.(E.values), ΔE.values) ≈ fd.s rtol = 1e-5 atol = 1e-7
    end

    # matrix_function: Daleckii–Krein, exact at every spectrum.
    fs = (:sqrt, :invsqrt, :log, :exp, (:pow, 2), (:pow, 0.5), (:pow, -1), (sin, cos))
    for T in (Float64, ComplexF64), uplo in (:L, :U)
        B = randn(T, 4, 4)
        A, ΔA = B * B' + 4I, randn(T, 4, 4)
        for f in fs
            test_frule(PySpectral.matrix_function, A ⊢ ΔA, f ⊢ NoTangent();
                       fkwargs=(; uplo), check_inferred=false, rtol=RTOL, atol=ATOL)
        end
    end
    for T in (Float64, ComplexF64),
        λ in ([1.0, 1.0, 2.0, 3.0], [2.0, 2.0, 2.0, 2.0], [1.0, 1.0 + 1e-13, 2.0, 3.0])

        A, ΔA = with_eigenvalues(T, λ), randn(T, 4, 4)
        for f in (:exp, :log, :sqrt, (:pow, 3))
            test_frule(PySpectral.matrix_function, A ⊢ ΔA, f ⊢ NoTangent();
                       check_inferred=false, rtol=1e-5, atol=1e-7)
        end
        # f(x) = x: the tangent is the Hermitian matrix read from the lower triangle.
        Y, ΔY = frule((NoTangent(), ΔA, NoTangent()), PySpectral.matrix_function, A, (:pow, 1))
        @test ΔY ≈ Hermitian(ΔA, :L)
        @test PySpectral.hermitian_from_triangle(ΔA, :U) ≈ Hermitian(ΔA, :U)
    end

    # ∞ where the true derivative is (sqrt at an exact zero eigenvalue), never NaN.
    _, ΔY = frule((NoTangent(), Matrix(1.0I, 4, 4), NoTangent()), PySpectral.matrix_function,
                  Matrix(Diagonal([0.0, 0.5, 2.0, 3.0])), :sqrt)
    @test !any(isnan, ΔY) && isinf(ΔY[1, 1]) && all(isfinite, ΔY[2:4, 2:4])

    # Zero and thunked tangents; the plain pushforwards leave their inputs alone.
    A = randn(ComplexF64, 5, 3)
    F = PySpectral.svd(A)
    @test frule((NoTangent(), ZeroTangent()), PySpectral.svd, A)[2] isa ZeroTangent
    @test frule((NoTangent(), NoTangent()), PySpectral.eigvalsh, A' * A)[2] isa NoTangent
    ΔA = randn(ComplexF64, 5, 3)
    _, ref = frule((NoTangent(), ΔA), PySpectral.svd, A)
    _, th = frule((NoTangent(), @thunk(copy(ΔA))), PySpectral.svd, A)
    @test th.U ≈ ref.U && th.S ≈ ref.S && th.Vt ≈ ref.Vt
    ΔA0, U0 = copy(ΔA), copy(F.U)
    ΔU, ΔS, ΔVᴴ = svd_pushforward(F.U, F.S, F.Vt, ΔA)
    @test ΔA == ΔA0 && F.U == U0
    @test ΔU ≈ ref.U && ΔS ≈ ref.S && ΔVᴴ ≈ ref.Vt
    @test_throws DimensionMismatch svd_pushforward(F.U, F.S, F.Vt, randn(3, 5))
    @test_throws ArgumentError eigh_pushforward([1.0, 2.0], Matrix(1.0I, 2, 2), ones(2, 2);
                                                uplo=:X)
end

# Re⟨x, y⟩ of two arrays, or summed over the fields `names` of two structural tangents.
inner(x::AbstractArray, y::AbstractArray) = real(dot(x, y))
inner(x, y, names) = sum(n -> inner(getproperty(x, n), getproperty(y, n)), names)

# The frules push forward by exactly the transposes of the rrules' pullbacks,
# ⟨ΔΩ, Ω̄⟩ = ⟨ΔA, Ā⟩ for every tangent and cotangent, also at degenerate and zero
# singular values / eigenvalues and for basis-dependent cotangents (gauge=:ignore): the
# same gap inverses and cluster rule on both sides, broadened or not.
@testset "frule is the transpose of the rrule" begin
    Random.seed!(16)
    transposes(lhs, rhs) = isapprox(lhs, rhs; rtol=1e-10, atol=1e-10)
    for T in (Float64, ComplexF64), (m, n) in ((5, 3), (3, 5), (3, 3)),
        s in ([3.0, 2.0, 1.0], [2.0, 2.0, 1.0], [2.0, 2.0, 2.0], [3.0, 1.0, 0.0],
              [2.0, 2.0, 0.0])

        A, ΔA = with_singular_values(T, m, n, s), randn(T, m, n)
        for kw in ((; gauge=:ignore), (; full=true, gauge=:ignore), (; k=2, gauge=:ignore),
                   (; broadening=0.1, gauge=:ignore))
            F, ΔF = frule((NoTangent(), ΔA), PySpectral.svd, A; kw...)
            Fr, back = rrule(PySpectral.svd, A; kw...)
            if !(allunique(s) || haskey(kw, :k))
                # Untruncated at a split cluster the frule returns the basis the tangent
                # follows (svd_adapted), which depends on ΔA: the linear map that is
                # the rrule's transpose is the pushforward at the rrule's own basis.
                ΔF = Tangent{typeof(Fr)}(; zip((:U, :S, :Vt),
                    PySpectral.svd_pushforward(Fr.U, Fr.S, Fr.Vt, ΔA;
                                               broadening=get(kw, :broadening, nothing),
                                               gauge=:ignore))...)
            end
            F̄ = Tangent{typeof(F)}(; U=randn(T, size(F.U)), S=randn(length(F.S)),
                                   Vt=randn(T, size(F.Vt)))
            @test transposes(inner(ΔF, F̄, (:U, :S, :Vt)), inner(ΔA, back(F̄)[2]))
        end
        ΔS = if allunique(s)
            frule((NoTangent(), ΔA), PySpectral.svdvals, A)[2]
        else  # the frule's values are one-sided at a split cluster (see above)
            Fr = PySpectral.svd(A)
            PySpectral.svd_pushforward(Fr.U, Fr.S, Fr.Vt, ΔA; gauge=:ignore)[2]
        end
        S̄ = randn(length(ΔS))
        # random weights on a cluster: the pullback says it is not exact there
        pullback_S() = rrule(PySpectral.svdvals, A)[2](S̄)[2]
        Ā = if allunique(s)
            pullback_S()
        else
            @test_logs (:warn, r"weights the members") pullback_S()
        end
        @test transposes(inner(ΔS, S̄), inner(ΔA, Ā))
        fs = Any[:polar, (:pow, 3), (:truncate, 2), (:threshold, 1.5), :normalize,
                 (x -> x^3 + x, x -> 3x^2 + 1)]
        minimum(s) > 0 && push!(fs, (:pow, 0.5), (:pow, -1))
        for f in fs
            Y, ΔY = frule((NoTangent(), ΔA, NoTangent()), PySpectral.svd_function, A, f;
                          gauge=:ignore)
            Ȳ = randn(T, size(Y))
            Ā = rrule(PySpectral.svd_function, A, f; gauge=:ignore)[2](Ȳ)[2]
            @test transposes(inner(ΔY, Ȳ), inner(ΔA, Ā))
        end
    end
    for T in (Float64, ComplexF64), uplo in (:L, :U),
        λ in ([0.5, 1.0, 2.0, 3.0], [1.0, 1.0, 2.0, 3.0], [2.0, 2.0, 2.0, 2.0],
              [0.0, 0.0, 1.0, 2.0])

        A, ΔA = with_eigenvalues(T, λ), randn(T, 4, 4)
        for kw in ((; uplo, gauge=:ignore), (; uplo, broadening=0.1, gauge=:ignore))
            E, ΔE = frule((NoTangent(), ΔA), PySpectral.eigh, A; kw...)
            Er, back = rrule(PySpectral.eigh, A; kw...)
            if !allunique(λ)  # the frule's basis follows ΔA (eigh_adapted): see svd above
                ΔE = Tangent{typeof(Er)}(; zip((:values, :vectors),
                    PySpectral.eigh_pushforward(Er.values, Er.vectors, ΔA; uplo,
                                                broadening=get(kw, :broadening, nothing),
                                                gauge=:ignore))...)
            end
            Ē = Tangent{typeof(E)}(; values=randn(4), vectors=randn(T, 4, 4))
            @test transposes(inner(ΔE, Ē, (:values, :vectors)), inner(ΔA, back(Ē)[2]))
        end
        Δλ = if allunique(λ)
            frule((NoTangent(), ΔA), PySpectral.eigvalsh, A; uplo)[2]
        else  # one-sided at a split cluster (see svd above)
            Er = PySpectral.eigh(A; uplo)
            PySpectral.eigh_pushforward(Er.values, Er.vectors, ΔA; uplo, gauge=:ignore)[1]
        end
        λ̄ = randn(4)
        pullback_λ() = rrule(PySpectral.eigvalsh, A; uplo)[2](λ̄)[2]
        Ā = if allunique(λ)
            pullback_λ()
        else
            @test_logs (:warn, r"weights the members") pullback_λ()
        end
        @test transposes(inner(Δλ, λ̄), inner(ΔA, Ā))
        fs = Any[:exp, (:pow, 3), (sin, cos)]
        minimum(λ) > 0 && push!(fs, :sqrt, :log, :invsqrt)
        for f in fs
            Y, ΔY = frule((NoTangent(), ΔA, NoTangent()), PySpectral.matrix_function, A, f;
                          uplo)
            Ȳ = randn(T, 4, 4)
            Ā = rrule(PySpectral.matrix_function, A, f; uplo)[2](Ȳ)[2]
            @test transposes(inner(ΔY, Ȳ), inner(ΔA, Ā))
        end
    end
end

# Top-k forward mode: the frules of svd_topk / eigh_topk push forward through the
# certified block (truncated_svd_pushforward / truncated_eigh_pushforward, the
# transposes of the truncated pullbacks). Checked against finite differences (test_frule
# on the raw factors of a real top-k SVD at a gap, smooth there as the full SVD's are;
# complex factors and eigenvectors in the aligned gauge, as the full frules above are:
# the Rayleigh-Ritz step's eigen calls syevr, whose signs jump), against the full path's
# frule on gauge-invariant outputs, and as the transposes of the rrules' pullbacks.

# The top-k triplets with uᵢ and vᵢ rotated together so that V[kᵢ, i] is real positive
# (`aligned_svd` for svd_topk), and the top-k eigenpairs aligned as `aligned_eigen`.
function aligned_svd_topk(X, k, ks; kw...)
    F = svd_topk(X, k; kw...)
    V = Matrix(F.Vt')
    c = transpose(alignment(V, ks))
    return (U=F.U .* c, S=F.S, V=V .* c)
end

function aligned_eigh_topk(X, k, ks; kw...)
    E = eigh_topk(X, k; kw...)
    return (values=E.values, vectors=E.vectors .* transpose(alignment(E.vectors, ks)))
end

# The top-k frules' tangents against finite differences of the aligned factors along ΔA.
function test_svd_topk_pushforward_fd(A, ΔA, k; rtol=RTOL, atol=ATOL, kw...)
    F, ΔF = frule((NoTangent(), ΔA, NoTangent()), svd_topk, A, k; kw...)
    V, ΔV = Matrix(F.Vt'), Matrix(ΔF.Vt')
    ks = [argmax(abs.(v)) for v in eachcol(V)]
    fd = FiniteDifferences.jvp(FDM, X -> aligned_svd_topk(X, k, ks; kw...), (A, ΔA))
    @test ΔF.S ≈ fd.S rtol = rtol atol = atol
    @test aligned_tangent(F.U, ΔF.U, V, ΔV, ks) ≈ fd.U rtol = rtol atol = atol
    @test aligned_tangent(V, ΔV, V, ΔV, ks) ≈ fd.V rtol = rtol atol = atol
end

function test_eigh_topk_pushforward_fd(A, ΔA, k; rtol=RTOL, atol=ATOL, kw...)
    E, ΔE = frule((NoTangent(), ΔA, NoTangent()), eigh_topk, A, k; kw...)
    V, ΔV = E.vectors, ΔE.vectors
    ks = [argmax(abs.(v)) for v in eachcol(V)]
    fd = FiniteDifferences.jvp(FDM, X -> aligned_eigh_topk(X, k, ks; kw...), (A, ΔA))
    @test ΔE.values ≈ fd.values rtol = rtol atol = atol
    @test aligned_tangent(V, ΔV, V, ΔV, ks) ≈ fd.vectors rtol = rtol atol = atol
end

# The svd_topk frule's tangents equal the full path's (svd(A; k), which pushes forward
# through all triplets) on outputs that do not depend on the basis of the kept
# triplets: the polar factor, the projectors onto the kept columns, the kept values.
function test_svd_topk_is_full(A, ΔA, k; kw...)
    F, ΔF = frule((NoTangent(), ΔA, NoTangent()), svd_topk, A, k; kw...)
    F0, ΔF0 = frule((NoTangent(), ΔA), PySpectral.svd, A; k)
    polar_tangent(G, ΔG) = ΔG.U * G.Vt + G.U * ΔG.Vt
    PU(G, ΔG) = projector_tangent(G.U, ΔG.U, 1:k)
    PV(G, ΔG) = projector_tangent(Matrix(G.Vt'), Matrix(ΔG.Vt'), 1:k)
    @test ΔF.S ≈ ΔF0.S rtol = 1e-9
    @test polar_tangent(F, ΔF) ≈ polar_tangent(F0, ΔF0) rtol = 1e-9
    @test PU(F, ΔF) ≈ PU(F0, ΔF0) rtol = 1e-9
    @test PV(F, ΔF) ≈ PV(F0, ΔF0) rtol = 1e-9
end

function test_eigh_topk_is_full(A, ΔA, k; uplo=:L, largest=true, kw...)
    E, ΔE = frule((NoTangent(), ΔA, NoTangent()), eigh_topk, A, k; uplo, largest, kw...)
    E0, ΔE0 = frule((NoTangent(), ΔA), PySpectral.eigh, A; uplo)
    n = size(A, 1)
    sel = largest ? (n-k+1:n) : (1:k)
    P, P0 = projector_tangent(E.vectors, ΔE.vectors, 1:k),
            projector_tangent(E0.vectors, ΔE0.vectors, sel)
    @test ΔE.values ≈ ΔE0.values[sel] rtol = 1e-9
    @test P ≈ P0 rtol = 1e-9
end

# svd_topk of real input with each pair's sign fixed by V[ks[i], i] > 0 (`ks` chosen at
# the unperturbed matrix). test_frule needs it: the raw signs of the randomized path
# follow its iteration count, which a perturbation at rounding level can change (the
# convergence test sits at a threshold), so finite differences of raw svd_topk jump by
# 2u/h wherever that happens. These signs are locally constant, so the frule of this
# function is svd_topk's with the same signs applied to the tangents: test_frule checks
# svd_topk's frule, nothing else.
struct SignFixedTopK
    ks::Vector{Int}
end

function _sign_fixed(F, ks)
    d = alignment(Matrix(F.Vt'), ks)
    return d, SVD(F.U .* transpose(d), F.S, F.Vt .* d)
end

(g::SignFixedTopK)(A::AbstractMatrix{<:Real}, k; kw...) = last(_sign_fixed(svd_topk(A, k; kw...), g.ks))

function ChainRulesCore.frule((_, ΔA, _), g::SignFixedTopK, A::AbstractMatrix{<:Real}, k; kw...)
    F, ΔF = frule((NoTangent(), ΔA, NoTangent()), svd_topk, A, k; kw...)
    d, G = _sign_fixed(F, g.ks)
    return G, Tangent{typeof(G)}(; U=ΔF.U .* transpose(d), S=ΔF.S, Vt=ΔF.Vt .* d)
end

function sign_fixed_topk(A, k; kw...)
    V = Matrix(svd_topk(A, k; kw...).Vt')
    return SignFixedTopK([argmax(abs.(v)) for v in eachcol(V)])
end

@testset "top-k frules" begin
    Random.seed!(18)
    for (m, n) in ((30, 20), (20, 30))
        s = [10 * 0.7^i for i in 0:min(m, n)-1]
        # the CG path (block k + oversample = 7 < 20) and the full one
        A, ΔA = with_singular_values(Float64, m, n, s), randn(m, n)
        for kw in ((; method=:randomized, oversample=4), (; method=:full))
            g = sign_fixed_topk(A, 3; kw...)
            test_frule(g, A ⊢ ΔA, 3 ⊢ NoTangent(); fkwargs=kw, check_inferred=false,
                       rtol=RTOL, atol=ATOL)
        end
        for T in (Float64, ComplexF64)
            A, ΔA = with_singular_values(T, m, n, s), randn(T, m, n)
            test_svd_topk_pushforward_fd(A, ΔA, 3; method=:randomized, oversample=4)
            test_svd_topk_is_full(A, ΔA, 3; method=:randomized, oversample=4)
        end
    end
    for T in (Float64, ComplexF64), largest in (true, false), uplo in (:L, :U)
        λ = [10 * 0.7^i for i in 0:19]
        H = with_eigenvalues(T, largest ? λ : -λ)
        A = uplo === :L ? tril(H) : triu(H)  # only the uplo triangle is read
        ΔA = randn(T, 20, 20)
        kw = (; uplo, largest, method=:randomized, oversample=4)
        test_eigh_topk_pushforward_fd(A, ΔA, 3; kw...)
        test_eigh_topk_is_full(A, ΔA, 3; kw...)
    end

    # Degenerate outside the block: a five-fold cluster that the block (k + oversample =
    # 5) cuts, and a zero block (rank 3). The complement's system stays positive definite
    # (its spectrum is below s_k): the tangents of the kept triplets are exact.
    outside = ([5.0; 4.0; 3.0; fill(1.0, 5); [0.5 * 0.7^i for i in 0:11]],
               [5.0; 4.0; 3.0; zeros(17)])
    for T in (Float64, ComplexF64), s in outside
        A, ΔA = with_singular_values(T, 30, 20, s), randn(T, 30, 20)
        kw = (; method=:randomized, oversample=2)
        test_svd_topk_pushforward_fd(A, ΔA, 3; kw...)
        test_svd_topk_is_full(A, ΔA, 3; kw...)
    end
    for T in (Float64, ComplexF64), largest in (true, false)
        λ = [5.0; 4.0; 3.0; fill(1.0, 5); [0.5 * 0.7^i for i in 0:11]]
        H, ΔA = with_eigenvalues(T, largest ? λ : -λ), randn(T, 20, 20)
        kw = (; largest, method=:randomized, oversample=2)
        test_eigh_topk_pushforward_fd(H, ΔA, 3; kw...)
        test_eigh_topk_is_full(H, ΔA, 3; kw...)
    end

    # A CG capped at one step (no gap past the block) on a small matrix is redone by the
    # dense fallback, silently: the full path's tangents.
    A = with_singular_values(Float64, 40, 30, [1 / sqrt(i) for i in 1:30])
    ΔA = randn(40, 30)
    @test_logs min_level = WARN test_svd_topk_is_full(A, ΔA, 4; method=:randomized,
                                                      oversample=6, maxiter=1)
    H = with_eigenvalues(Float64, [1 / sqrt(i) for i in 1:30])
    @test_logs min_level = WARN test_eigh_topk_is_full(H, randn(30, 30), 4;
                                                       method=:randomized, oversample=6,
                                                       maxiter=1)
    # Larger matrices warn, as the pullback does: the tangent's words, the same keywords.
    logs, _ = Test.collect_test_logs(; min_level=WARN) do
        PySpectral._warn_unconverged(:eigh, 7, 0.25; mode=:pushforward)
    end
    rec = only(logs)
    @test occursin(r"^eigh_topk pushforward: the Sylvester solve did not converge in 7 " *
                   r"iterations \(relative residual 0\.25\)", rec.message)
    @test occursin("The tangent is approximate", rec.message)
    @test rec.kwargs[:maxiter] == 7 && rec.kwargs[:residual] == 0.25

    # Zero and thunked tangents; the plain pushforward leaves its inputs alone.
    A, ΔA = topk_decaying(ComplexF64, 30, 20), randn(ComplexF64, 30, 20)
    kw = (; method=:randomized, oversample=4)
    _, Δ0 = frule((NoTangent(), ZeroTangent(), NoTangent()), svd_topk, A, 3; kw...)
    @test Δ0 isa ZeroTangent
    _, Δ0 = frule((NoTangent(), NoTangent(), NoTangent()), eigh_topk, A' * A, 3)
    @test Δ0 isa NoTangent
    _, ref = frule((NoTangent(), ΔA, NoTangent()), svd_topk, A, 3; kw...)
    _, th = frule((NoTangent(), @thunk(copy(ΔA)), NoTangent()), svd_topk, A, 3; kw...)
    @test th.U ≈ ref.U && th.S ≈ ref.S && th.Vt ≈ ref.Vt
    B = PySpectral.svd_topk_block(A, 3; kw...)
    A0, ΔA0, U0 = copy(A), copy(ΔA), copy(B.U)
    ΔU, ΔS, ΔVᴴ = truncated_svd_pushforward(A, B.U, B.S, B.Vt, 3, ΔA; d=B.d)
    @test A == A0 && ΔA == ΔA0 && B.U == U0
    @test ΔU ≈ ref.U && ΔS ≈ ref.S && ΔVᴴ ≈ ref.Vt
    @test_throws DimensionMismatch truncated_svd_pushforward(A, B.U, B.S, B.Vt, 3,
                                                             randn(20, 30); d=B.d)
end

# ⟨ΔΩ, Ω̄⟩ = ⟨ΔA, Ā⟩ for the top-k frules and rrules on the same certified block, for
# random (basis-dependent: gauge=:ignore) cotangents: at a gap, where k cuts a cluster
# or a zero block, and where the block ends inside a cluster of the discarded spectrum.
@testset "top-k frule is the transpose of the rrule" begin
    Random.seed!(19)
    transposes(lhs, rhs) = isapprox(lhs, rhs; rtol=1e-9, atol=1e-9)
    tail(c, n) = [c * 0.7^i for i in 0:n-1]
    spectra = (([10 * 0.7^i for i in 0:19], (; oversample=4)),                # a gap
               ([3.0; 2.0; 2.0; 1.0; tail(0.5, 16)], (;)),                    # k cuts a cluster
               ([5.0; 4.0; 1.0; fill(0.5, 5); tail(0.2, 12)], (; oversample=2)),  # outside
               ([3.0; zeros(19)], (; oversample=3)))                          # k cuts zeros
    k = 2
    for T in (Float64, ComplexF64), (s, extra) in spectra
        A, ΔA = with_singular_values(T, 30, 20, s), randn(T, 30, 20)
        kw = (; method=:randomized, gauge=:ignore, extra...)
        F, ΔF = frule((NoTangent(), ΔA, NoTangent()), svd_topk, A, k; kw...)
        _, back = rrule(svd_topk, A, k; kw...)
        F̄ = Tangent{typeof(F)}(; U=randn(T, size(F.U)), S=randn(k), Vt=randn(T, size(F.Vt)))
        @test transposes(inner(ΔF, F̄, (:U, :S, :Vt)), inner(ΔA, back(F̄)[2]))
    end
    for T in (Float64, ComplexF64), largest in (true, false), uplo in (:L, :U),
        (λ, extra) in spectra[1:3]

        H = with_eigenvalues(T, largest ? λ : -λ)
        A, ΔA = uplo === :L ? tril(H) : triu(H), randn(T, 20, 20)
        kw = (; uplo, largest, method=:randomized, gauge=:ignore, extra...)
        E, ΔE = frule((NoTangent(), ΔA, NoTangent()), eigh_topk, A, k; kw...)
        _, back = rrule(eigh_topk, A, k; kw...)
        Ē = Tangent{typeof(E)}(; values=randn(k), vectors=randn(T, 20, k))
        @test transposes(inner(ΔE, Ē, (:values, :vectors)), inner(ΔA, back(Ē)[2]))
    end
end

# Issue 17: truncation by rank, tolerance and discarded weight, whole multiplets, k = 0
# (src/forward/truncation.jl), as pyspectral's tests/test_truncation.py checks them.
@testset "truncation rules" begin
    S = [4.0, 3.0, 2.0, 1.0]
    keep(x; kw...) = truncation_rank(x; kw...)
    @test keep(S) == 4
    @test keep(S; k=2) == 2
    @test keep(S; k=0) == 0
    @test keep(S; atol=2.0) == 2               # strictly above: 2 itself is cut
    @test keep(S; rtol=0.5) == 2               # 0.5 * S₁ = 2
    @test keep(S; atol=1.0, rtol=0.6) == 2     # max(1, 2.4)
    @test keep(S; atol=0.0, k=1) == 1
    @test keep(S; k=10, atol=0.0) == 4         # k a maximum past length(S)
    # the discarded weight: tails ‖S[r+1:end]‖ = √30, √14, √5, 1, 0
    @test keep(S; error_atol=1.0) == 3         # ≤ is inclusive (exact in units of S₁)
    @test keep(S; error_atol=0.99) == 4
    @test keep(S; error_rtol=0.5) == 2         # √5 ≤ 0.5 √30 < √14
    @test keep(S; error_atol=6.0) == 0         # keeps nothing
    @test keep(S; error_atol=1.0, k=2) == 2
    @test truncation_error(S, 2) ≈ sqrt(5.0)
    @test truncation_error(S, 4) == 0
    @test truncation_error(S, 0) ≈ norm(S)
    # multiplets: a cut inside {2, 2, 2} moves down to 1 or up to 4
    M = [3.0, 2.0, 2.0, 2.0, 1.0]
    @test keep(M; k=2) == 2
    @test keep(M; k=2, multiplets=:down) == 1
    @test keep(M; k=2, multiplets=:up) == 4
    @test keep(M; k=4, multiplets=:down) == 4  # already at a gap
    @test keep(M; atol=1.5, multiplets=:down) == 4
    N = M .+ [0, 1e-13, 0, -1e-13, 0]
    @test keep(N; k=2, multiplets=:down) == 1                        # within the tol
    @test keep(N; k=2, multiplets=:down, degeneracy_atol=0.0) == 2   # every gap counts
    @test keep(M; k=2, multiplets=:down, degeneracy_atol=0.0) == 1   # equal: still one
    # the floor min_rank, after the rules and the multiplets (zeros included)
    @test keep(S; atol=3.5, min_rank=2) == 2
    @test keep(S; atol=1.5, min_rank=2) == 3
    @test keep(S; k=3, error_atol=6.0, min_rank=1) == 1
    @test keep([4.0, 3.0]; rtol=0.9, min_rank=5) == 2
    @test keep(M; atol=2.5, min_rank=2, multiplets=:up) == 4
    @test keep(M; atol=2.5, min_rank=2, multiplets=:down) == 2
    @test keep([2.0, 1.0, 0.0, 0.0]; atol=0.5, min_rank=3) == 3
    # zeros are a multiplet too; the zero matrix keeps nothing under any tolerance
    Z = [2.0, 1.0, 0.0, 0.0]
    @test keep(Z; k=3, multiplets=:down) == 2
    @test keep(Z; k=3, multiplets=:up) == 4
    @test keep(Z; atol=0.0) == 2
    for kw in ((; atol=0.0), (; rtol=0.1), (; error_atol=0.0), (; error_rtol=0.5))
        @test keep(zeros(3); kw...) == 0
    end
    @test keep(zeros(3); k=2) == 2
    @test keep(zeros(3); k=2, multiplets=:down) == 0
    # all equal: one multiplet
    E = [2.0, 2.0, 2.0]
    @test keep(E; k=1, multiplets=:down) == 0
    @test keep(E; k=1, multiplets=:up) == 3
    @test keep(E; rtol=1.0) == 0
    @test keep(E; rtol=0.99) == 3
    @test keep(Float64[]; atol=0.0) == 0
    # scale invariance: the tails are summed in units of S₁
    @test keep(S .* 1e200; error_rtol=0.5) == 2
    @test keep(S .* 1e-200; error_rtol=0.5) == 2

    # svd: the same rules on its singular values
    Random.seed!(17)
    A = with_singular_values(Float64, 6, 4, S)
    @test PySpectral.svd(A; atol=2.5).S ≈ [4.0, 3.0]
    @test size(PySpectral.svd(A; k=0).U) == (6, 0)
    F, ϵ = tsvd(A; error_rtol=0.5)
    @test F.S ≈ [4.0, 3.0] && ϵ ≈ sqrt(5.0)
    @test ϵ ≈ norm(A - F.U * Diagonal(F.S) * F.Vt)
    F, ϵ = tsvd(A; k=0)
    @test size(F.U) == (6, 0) && size(F.Vt) == (0, 4) && ϵ ≈ norm(A)

    # eigh, by order from the wanted end: λ descending, or -λ from the smallest
    H = with_eigenvalues(Float64, [-3.0, -1.0, 0.5, 2.0])
    H = (H + H') / 2
    E2, ϵ2 = teigh(H; k=2)
    @test E2.values ≈ [0.5, 2.0] && ϵ2 ≈ norm([-3.0, -1.0])
    E2, ϵ2 = teigh(H; k=2, largest=false)
    @test E2.values ≈ [-3.0, -1.0] && ϵ2 ≈ norm([0.5, 2.0])
    @test teigh(H; atol=0.0)[1].values ≈ [0.5, 2.0]
    @test teigh(H; atol=0.0, largest=false)[1].values ≈ [-3.0, -1.0]
    @test teigh(H; rtol=0.3)[1].values ≈ [2.0]            # |x₁| = 2: above 0.6
    @test teigh(H; error_atol=3.2)[1].values ≈ [0.5, 2.0] # √10 ≤ 3.2 < √10.25

    # bad rules: an ArgumentError naming the keyword, in pyspectral's words
    TOL = "a finite number >= 0, or nothing"
    for name in (:atol, :rtol, :error_atol, :error_rtol), value in (-1.0, NaN, Inf, true)
        kw = NamedTuple{(name,)}((value,))
        for (op, call) in (("svd", () -> PySpectral.svd(A; kw...)),
                           ("tsvd", () -> tsvd(A; kw...)), ("teigh", () -> teigh(H; kw...)))
            @test argument_error_message(call) ==
                  "$op: $name must be $TOL, got $(repr(value))"
        end
    end
    @test argument_error_message(() -> tsvd(A; k=2, multiplets=:sideways)) ==
          "tsvd: multiplets must be :cut, :down or :up, got :sideways"
    @test startswith(argument_error_message(() -> tsvd(A; multiplets=:down)),
                     "tsvd: multiplets=:down moves the cut of a truncation, but none")
    @test startswith(argument_error_message(() -> PySpectral.svd(A; full=true, atol=1.0)),
                     "svd: k (top-k triplets) or a truncation rule cannot be combined")
    # the floor: an integer >= 0, at most k, and only with a rule to raise
    @test argument_error_message(() -> tsvd(A; atol=1.0, min_rank=-1)) ==
          "tsvd: min_rank must be an integer >= 0 (the fewest values kept), got -1"
    @test argument_error_message(() -> tsvd(A; k=2, min_rank=3)) ==
          "tsvd: min_rank = 3 exceeds k = 2; the floor must be at most the maximum rank"
    @test startswith(argument_error_message(() -> teigh(H; min_rank=2)),
                     "teigh: min_rank is the floor of a truncation, but none is asked for")
    @test length(first(tsvd(A; atol=1e9, min_rank=2)).S) == 2
    @test argument_error_message(() -> tsvd(A; k=-1, atol=1.0)) ==
          "tsvd: k must be an integer >= 0 (the maximum rank; a k past min(m, n) keeps " *
          "every value), got -1"
    @test size(tsvd(A; k=7, atol=0.0)[1].U) == (6, 4)   # a maximum, with a tolerance
end

@testset "svd split" begin
    Random.seed!(31)
    # At an exact kept doublet, the gradient and the tangent of losses of (L, R) that
    # break its symmetry (finite differences are exact there: the losses are smooth,
    # invariant under L → L Q, R → Qᴴ R), for every absorb and truncation; the split
    # written by hand from svd's factors misses the multiplet term.
    for T in (Float64, ComplexF64), (m, n) in ((6, 6), (7, 6), (6, 8)),
        absorb in (:left, :right, :both), kw in ((;), (; atol=0.3), (; k=4, min_rank=2))
        A = with_singular_values(T, m, n, [3, 2, 2, 1, 0.5, 0.1])
        B, C, E = randn(T, m, n), randn(T, m, m), randn(T, m, n)
        ℓ(L, R) = sum(abs2, L * R - B) + real(tr(L' * (C + C') * L)) + 0.3 * sum(abs2, R)
        loss(X) = ℓ(svd_split(X; absorb, kw...)...)
        ref = FiniteDifferences.grad(FDM, loss, A)[1]
        @test Zygote.gradient(loss, A)[1] ≈ ref rtol = 1e-8
        LR, ΔLR = frule((NoTangent(), E), svd_split, A; absorb, kw...)
        gL, gR = Zygote.gradient(ℓ, LR...)
        @test real(dot(gL, ΔLR[1]) + dot(gR, ΔLR[2])) ≈
              FiniteDifferences.jvp(FDM, loss, (A, E)) rtol = 1e-8
        g, h = absorb === :left ? (identity, one) : absorb === :right ? (one, identity) :
               (sqrt, sqrt)
        function by_hand(X)
            F = PySpectral.svd(X; kw..., gauge=:ignore)
            return ℓ(F.U .* transpose(g.(F.S)), h.(F.S) .* F.Vt)
        end
        @test norm(Zygote.gradient(by_hand, A)[1] - ref) > 1e-3 * norm(ref)
    end
    # the pullback and the pushforward are each other's transposes
    A = with_singular_values(ComplexF64, 5, 4, [2, 2, 1, 0.5])
    F = PySpectral.svd(A)
    ΔL, ΔR, ΔA = randn(ComplexF64, 5, 4), randn(ComplexF64, 4, 4), randn(ComplexF64, 5, 4)
    for absorb in PySpectral.ABSORB
        G = zeros(ComplexF64, 5, 4)
        ΔU, ΔS, ΔVᴴ = svd_split_pullback!(G, F.U, F.S, F.Vt, 4, absorb, ΔL, ΔR)
        dU, dS, dVᴴ = svd_pushforward(F.U, F.S, F.Vt, ΔA)
        dL, dR = svd_split_pushforward(F.U, F.S, F.Vt, 4, absorb, ΔA, dU, dS, dVᴴ)
        svd_pullback!(G, F.U, F.S, F.Vt, ΔU, ΔS, ΔVᴴ; gauge=:ignore)
        @test real(dot(G, ΔA)) ≈ real(dot(ΔL, dL) + dot(ΔR, dR)) rtol = 1e-10
    end
    # √S at a kept exact zero: infinite where a cotangent reaches it, never NaN
    Z = with_singular_values(Float64, 4, 3, [2, 1, 0])
    gz = Zygote.gradient(X -> sum(abs2, svd_split(X; absorb=:both)[1]), Z)[1]
    @test !any(isnan, gz)
    @test_throws ArgumentError svd_split(Z; absorb=:middle)
end

@testset "svd split near-degenerate gaps and kept zeros" begin
    Random.seed!(32)
    # Gaps 1e-12 ... 1e-8 above the degeneracy tolerance (the SVD's quotients there
    # carry the rounding of numerators that are 0 for a gauge-invariant loss): the
    # gradient of a fit of L R (= A) is 2 (A - B) to rounding, for every absorb; it was
    # up to 7e-5 off. And a zero-padded A (kept exact zeros, square or the shape whose
    # weight-1 factor has no arbitrary complement column): exact, gradient and tangent
    # (they were 3-44 % off).
    for T in (Float64, ComplexF64), absorb in (:left, :right, :both),
        gap in (1e-12, 1e-11, 1e-10, 1e-9, 1e-8)
        A = with_singular_values(T, 6, 4, [3, 2 + gap, 2, 1])
        B = randn(T, 6, 4)
        g = Zygote.gradient(X -> sum(abs2, *(svd_split(X; absorb)...) - B), A)[1]
        @test norm(g - 2 * (A - B), Inf) <= 1e-12 * norm(2 * (A - B), Inf)
    end
    for T in (Float64, ComplexF64), (m, n, absorb) in ((6, 6, :left), (6, 6, :right),
                                                       (7, 5, :left), (4, 6, :right))
        A = m >= n ? hcat(randn(T, m, 3), zeros(T, m, n - 3)) :
            vcat(randn(T, 3, n), zeros(T, m - 3, n))
        @test any(iszero, PySpectral.svd(A).S)
        W, E = randn(T, m, n), randn(T, m, n)
        f(Y) = real(dot(W, Y)) + real(sum(Y .* Y .* W))
        ref = Zygote.gradient(f, A)[1]
        g = Zygote.gradient(X -> f(*(svd_split(X; absorb)...)), A)[1]
        @test norm(g - ref, Inf) <= 1e-12 * norm(ref, Inf)
        LR, ΔLR = frule((NoTangent(), E), svd_split, A; absorb)
        t = real(dot(Zygote.gradient(f, LR[1] * LR[2])[1], ΔLR[1] * LR[2] + LR[1] * ΔLR[2]))
        @test t ≈ real(dot(ref, E)) rtol = 1e-12
    end
end

@testset "basis check pair by pair" begin
    # gauge_pairwise (pyspectral's check_gauge with spectrum=): a violation under the data
    # floor max(gtol, data_floor(λ) max|λ|) is quiet, above it reported with its pair's
    # allowance; outside a cluster nothing is measured
    λ = [3.0, 2.0, 2.0, 1.0]
    floor = PySpectral.data_floor(λ, Float64) * 3.0
    P = zeros(4, 4)
    P[2, 3] = 0.5 * floor
    @test PySpectral.gauge_pairwise(P, λ, 1e-9, 1e-30) == (0.0, 1e-30)
    P[2, 3] = 2 * floor
    viol, allowed = PySpectral.gauge_pairwise(P, λ, 1e-9, 1e-30)
    @test viol == 2 * floor && allowed ≈ floor
    P[1, 4] = 1.0  # not a cluster pair
    @test first(PySpectral.gauge_pairwise(P, λ, 1e-9, 1e-30)) == 2 * floor
    rec = GaugeRecorder()
    PySpectral.check_cluster_gauge(:svd, P, λ, 1e-9, 1e-30, rec)
    @test length(rec.records) == 1
    rec = GaugeRecorder()  # an explicit gauge_atol: no floor
    PySpectral.check_cluster_gauge(:svd, 0.5 .* P, λ, 1e-9, 1e-30, rec; default_tol=false)
    @test length(rec.records) == 1
end

@testset "weights allowance floor" begin
    # the floor: eps^(3/4) FLOOR_CURVATURE max|λ|, at least 2 FLOOR_CURVATURE (k + 1) eps
    # max|λ| (pyspectral's weights_floor and data_floor): a spread below it is quiet
    # however small the cotangent (a stationary point's residual), above it recorded;
    # gauge_atol replaces it
    S = [3.0, 2.0, 2.0, 1.0]
    data = PySpectral.data_floor(S, Float64)
    @test data == 2 * PySpectral.FLOOR_CURVATURE * 5 * eps(Float64) * 3.0
    floor = PySpectral.weights_floor(S, Float64)
    @test floor ≈ max(eps(Float64)^(3 / 4) * PySpectral.FLOOR_CURVATURE * 3.0, data)
    for (scale, quiet) in ((0.9, true), (1.1, false))
        rec = GaugeRecorder()
        PySpectral.check_weights(:svd, [1e-30, scale * floor, 0.0, 0.0], S, 1e-9, rec)
        @test isempty(rec.records) == quiet
    end
    rec = GaugeRecorder()
    PySpectral.check_weights(:svd, [0.0, 0.5 * floor, 0.0, 0.0], S, 1e-9, rec;
                             gauge_atol=0.0)
    @test length(rec.records) == 1
    # at the minimum of ‖U S Vᴴ - A₀‖² (rebuilt from the triplets) with a doublet: quiet
    for T in (Float64, ComplexF64)
        A₀ = with_singular_values(T, 6, 4, [3.0, 2.0, 2.0, 1.0])
        fit(X) = (F = PySpectral.svd(X); sum(abs2, F.U * Diagonal(F.S) * F.Vt - A₀))
        g = @test_logs Zygote.gradient(fit, A₀)[1]
        @test norm(g, Inf) < 100 * eps(Float64) * norm(A₀, Inf)
    end
end

@testset "truncation ties" begin
    Random.seed!(23)
    # keeping 1 of (0.7, 0.3) discards exactly 0.3: error_atol = 0.3 keeps 1
    @test truncation_rank([0.7, 0.3]; error_atol=0.3) == 1
    @test truncation_error([0.7, 0.3], 1) == 0.3
    (F, ϵ) = tsvd(Matrix(Diagonal([0.7, 0.3])); error_atol=0.3)
    @test length(F.S) == 1 && ϵ == 0.3
    (E, ϵ) = teigh(Matrix(Diagonal([-0.3, 0.7])); error_atol=0.3)
    @test E.values == [0.7] && ϵ == 0.3
    # an error fed back as error_atol keeps the rank, whatever rule chose it
    changed = 0
    for _ in 1:400
        x = sort(rand(8); rev=true)
        for r in (truncation_rank(x; error_rtol=0.5 * rand()), truncation_rank(x; k=rand(0:8)),
                  truncation_rank(x; rtol=rand()))
            changed += truncation_rank(x; error_atol=truncation_error(x, r)) != r
        end
    end
    @test changed == 0
    # the tails: a single value is its own norm, powers of two scale exactly (no
    # underflow of the squares), and the last tail is 0
    @test PySpectral.tail_norms([4.0, 3.0]) == [5.0, 3.0, 0.0]
    @test PySpectral.tail_norms(2.0^-600 .* [4.0, 3.0]) == 2.0^-600 .* [5.0, 3.0, 0.0]
    @test PySpectral.tail_norms(zeros(3)) == zeros(4)
    @test PySpectral.tail_norms(Float64[]) == [0.0]
    @test PySpectral.tail_norms(Float32[0.7, 0.3])[2:3] == Float32[0.3, 0]
end

@testset "truncated svd rrules" begin
    Random.seed!(18)
    rules = ((; k=2), (; atol=2.0), (; rtol=0.5, multiplets=:down), (; error_atol=1.2),
             (; k=3, error_rtol=0.3))
    for T in (Float64, ComplexF64), (m, n) in ((6, 4), (4, 6))
        A = with_singular_values(T, m, n, [4.0, 3.0, 1.0, 0.5])
        for kw in rules
            F, ϵ = tsvd(A; kw...)
            @test F.S ≈ [4.0, 3.0]
            @test ϵ ≈ norm([1.0, 0.5])
            Δ = Tangent{typeof((F, ϵ))}(fd_svd_tangent(F), 0.7)
            test_rrule(tsvd, A; fkwargs=kw, output_tangent=Δ, check_inferred=false,
                       rtol=RTOL, atol=ATOL)
            test_rrule(PySpectral.svd, A; fkwargs=kw, output_tangent=fd_svd_tangent(F),
                       check_inferred=false, rtol=RTOL, atol=ATOL)
        end
        # the error alone: ∂ϵ/∂A = (A - U_r S_r V_rᴴ) / ϵ, without a second decomposition
        F, ϵ = tsvd(A; k=2)
        g = only(Zygote.gradient(X -> tsvd(X; k=2)[2], A))
        @test g ≈ (A - F.U * Diagonal(F.S) * F.Vt) / ϵ
        # keeping nothing: empty factors, ϵ = ‖A‖ with gradient A / ‖A‖
        @test only(Zygote.gradient(X -> tsvd(X; k=0)[2], A)) ≈ A / norm(A)
        g0 = only(Zygote.gradient(X -> sum(abs2, tsvd(X; k=0)[1].S) + 0, A))
        @test g0 === nothing || iszero(g0)
    end
    # the zero matrix keeps nothing; its error 0 has the zero (sub)gradient
    Z = zeros(5, 3)
    F, ϵ = tsvd(Z; atol=0.0)
    @test isempty(F.S) && ϵ == 0
    @test iszero(only(Zygote.gradient(X -> tsvd(X; atol=0.0)[2], Z)))

    # Whole multiplets: at a degenerate spectrum, the cut moved to a boundary makes a
    # gauge-invariant loss differentiable (gauge=:raise: nothing basis dependent seen),
    # against finite differences, for :down and :up. (A degeneracy_atol above the steps
    # of the differences keeps the pair one multiplet along them: an exact degeneracy
    # split by a step would move the cut, the rank being piecewise constant.)
    for T in (Float64, ComplexF64)
        A = with_singular_values(T, 5, 4, [3.0, 2.0, 2.0, 1.0])
        W = randn(T, 5, 4)
        for (mult, kept) in ((:down, 1), (:up, 3))
            @test length(PySpectral.svd(A; k=2, multiplets=mult).S) == kept
            loss(X) = (t = tsvd(X; k=2, multiplets=mult, degeneracy_atol=0.1,
                                gauge=:raise);
                       real(dot(W, t[1].U * t[1].Vt)) + sum(abs2, t[1].S) + 3 * t[2])
            test_grad(loss, A; rtol=1e-5)
        end
        # :cut splits {2, 2}: a basis-dependent loss warns, as for a fixed k
        _, back = rrule(tsvd, A; k=2)
        F2 = tsvd(A; k=2)[1]
        @test_logs (:warn, r"^svd: ") match_mode = :any back(
            Tangent{typeof((F2, 0.0))}(Tangent{typeof(F2)}(; U=randn(T, 5, 2)), 0.0))
    end
end

@testset "truncated eigh rrules" begin
    Random.seed!(19)
    λ = [-3.0, -1.0, 0.5, 2.0, 4.0]
    for T in (Float64, ComplexF64), uplo in (:L, :U), largest in (true, false)
        H = with_eigenvalues(T, λ)
        A = uplo === :L ? tril(H) : triu(H)  # only the uplo triangle is read
        P = randn(T, 5, 5)
        for kw in ((; k=2), (; atol=0.2), (; error_atol=4.2), (; k=3, rtol=0.1))
            E, ϵ = teigh(A; uplo, largest, kw...)
            x = largest ? reverse(λ) : -λ
            r = truncation_rank(x; kw...)
            @test length(E.values) == r
            @test ϵ ≈ norm(x[r+1:end])
            # a gauge-invariant loss: the kept eigenvalues, the projector onto the kept
            # pairs, and the error, through Zygote and the rrule, against differences
            loss(X) = (t = teigh(X; uplo, largest, kw...);
                       sum(abs2, t[1].values) + real(dot(P, t[1].vectors * t[1].vectors')) +
                       2 * t[2])
            test_grad(loss, A; rtol=1e-5)
            g = only(Zygote.gradient(loss, A))
            @test iszero(uplo === :L ? triu(g, 1) : tril(g, -1))
        end
    end
end

@testset "truncation frules" begin
    Random.seed!(20)
    transposes(lhs, rhs) = isapprox(lhs, rhs; rtol=1e-10, atol=1e-10)
    for T in (Float64, ComplexF64)
        A, ΔA = with_singular_values(T, 5, 4, [4.0, 3.0, 1.0, 0.5]), randn(T, 5, 4)
        for kw in ((; k=2, gauge=:ignore), (; atol=2.0, gauge=:ignore),
                   (; error_atol=1.2, gauge=:ignore), (; k=0, gauge=:ignore))
            (F, ϵ), Δ = frule((NoTangent(), ΔA), tsvd, A; kw...)
            _, back = rrule(tsvd, A; kw...)
            F̄ = Tangent{typeof(F)}(; U=randn(T, size(F.U)), S=randn(length(F.S)),
                                   Vt=randn(T, size(F.Vt)))
            ϵ̄ = randn()
            lhs = inner(Δ[1], F̄, (:U, :S, :Vt)) + Δ[2] * ϵ̄
            @test transposes(lhs, inner(ΔA, back(Tangent{typeof((F, ϵ))}(F̄, ϵ̄))[2]))
            # ... and the svd frule with the same rules agrees with tsvd's
            F2, ΔF2 = frule((NoTangent(), ΔA), PySpectral.svd, A; kw...)
            @test F2.S ≈ F.S && ΔF2.S ≈ Δ[1].S
        end
        # the error's tangent against finite differences (a smooth function of A here)
        for kw in ((; k=2), (; error_atol=1.2))
            (_, ϵ), Δ = frule((NoTangent(), ΔA), tsvd, A; kw...)
            fd = FiniteDifferences.jvp(FDM, X -> tsvd(X; kw...)[2], (A, ΔA))
            @test Δ[2] ≈ fd rtol = 1e-6
        end
        H, ΔH = with_eigenvalues(T, [-3.0, -1.0, 0.5, 2.0]), randn(T, 4, 4)
        for largest in (true, false), kw in ((; k=2), (; atol=0.0), (; error_rtol=0.82))
            (E, ϵ), Δ = frule((NoTangent(), ΔH), teigh, H; largest, gauge=:ignore, kw...)
            _, back = rrule(teigh, H; largest, gauge=:ignore, kw...)
            Ē = Tangent{typeof(E)}(; values=randn(length(E.values)),
                                   vectors=randn(T, size(E.vectors)))
            ϵ̄ = randn()
            lhs = inner(Δ[1], Ē, (:values, :vectors)) + Δ[2] * ϵ̄
            @test transposes(lhs, inner(ΔH, back(Tangent{typeof((E, ϵ))}(Ē, ϵ̄))[2]))
            fd = FiniteDifferences.jvp(FDM, X -> teigh(X; largest, kw...)[2], (H, ΔH))
            @test Δ[2] ≈ fd rtol = 1e-6
        end
    end
end

@testset "unequal weights on a cluster" begin
    # A loss that weights a degenerate cluster's values unequally (U S Vᴴ rebuilt from the
    # triplets) has no exact gradient through the factors: the pullback says so; a
    # symmetric function of the cluster, and the split, are silent.
    Random.seed!(40)
    for T in (Float64, ComplexF64)
        A = with_singular_values(T, 5, 4, [3.0, 2.0, 2.0, 0.5])
        W = randn(T, 5, 4)
        rebuilt(X) = (F = PySpectral.svd(X); real(dot(W, F.U * Diagonal(F.S) * F.Vt)))
        @test_logs (:warn, r"svd: .*unequally.*svd_function") Zygote.gradient(rebuilt, A)
        @test_throws GaugeError Zygote.gradient(
            X -> (F = PySpectral.svd(X; gauge=:raise); real(dot(W, F.U * Diagonal(F.S) * F.Vt))), A)
        values_only(X) = PySpectral.svdvals(X)[2]
        @test_logs (:warn, r"unequally") Zygote.gradient(values_only, A)
        @test_logs Zygote.gradient(X -> sum(abs2, PySpectral.svd(X).S) + sum(PySpectral.svd(X).S), A)
        # a loss of the split invariant under its bond gauge (L -> L Q): its weights
        # on the kept pair are unequal, and the split's own term carries them
        M = randn(T, 5, 5)
        M = M + M'
        @test_logs Zygote.gradient(X -> (L = first(svd_split(X; absorb=:both));
                                         real(tr(L' * M * L))), A)
        H = with_eigenvalues(T, [1.0, 2.0, 2.0, 3.0])
        sqrt_rebuilt(X) = (E = eigh(X); real(sum(E.vectors * Diagonal(sqrt.(E.values)) * E.vectors')))
        @test_logs (:warn, r"eigh: .*unequally.*matrix_function") Zygote.gradient(sqrt_rebuilt, H)
        @test_logs Zygote.gradient(X -> sum(exp, eigh(X).values), H)
    end
    # what the recorder gets (pyspectral's bridge applies the policy)
    rec = GaugeRecorder()
    PySpectral.check_weights(:svd, [1.0, 0.3, 0.7], [3.0, 2.0, 2.0], 1e-9, rec)
    @test length(rec.records) == 1 && first(rec.records[1]) === Symbol("svd:weights")
    @test rec.records[1][2] ≈ 0.4
    # a near-degenerate pair: a symmetric function's weights differ by f″ gap, allowed
    S = [1.0 + 1e-12, 1.0, 0.5]
    rec = GaugeRecorder()
    PySpectral.check_weights(:svd, 4 .* S .^ 3, S, 2e-12, rec)
    @test isempty(rec.records)
end

@testset "qr and lq rrules" begin
    Random.seed!(41)
    for T in (Float64, ComplexF64), (m, n) in ((5, 3), (4, 4), (3, 5)), positive in (false, true)
        A = randn(T, m, n)
        Q, R = PySpectral.qr(A; positive)
        @test Q isa Matrix{T} && R isa Matrix{T} && Q * R ≈ A && istriu(R)
        @test Q' * Q ≈ I
        positive && @test all(real(R[i, i]) >= 0 && isreal(R[i, i]) for i in 1:min(m, n))
        test_rrule(PySpectral.qr, A; fkwargs=(; positive), check_inferred=false,
                   rtol=RTOL, atol=ATOL)
        test_frule(PySpectral.qr, A; fkwargs=(; positive), check_inferred=false,
                   rtol=RTOL, atol=ATOL)
        L, Ql = PySpectral.lq(A; positive)
        @test istril(L) && L * Ql ≈ A && Ql * Ql' ≈ I
        test_rrule(PySpectral.lq, A; fkwargs=(; positive), check_inferred=false,
                   rtol=RTOL, atol=ATOL)
        test_frule(PySpectral.lq, A; fkwargs=(; positive), check_inferred=false,
                   rtol=RTOL, atol=ATOL)
    end
    # complete: losses of the complement through its projector, exact and silent
    for T in (Float64, ComplexF64)
        A, W, G = randn(T, 6, 3), randn(T, 6, 6), randn(T, 6, 3)
        function complement(X)
            Q, R = PySpectral.qr(X; full=true, positive=true, gauge=:raise)
            Q2 = Q[:, 4:6]
            return real(dot(W, Q2 * Q2')) + real(dot(G, Q[:, 1:3])) + sum(abs2, R)
        end
        test_grad(complement, A)
        function lq_complement(X)
            L, Q = PySpectral.lq(X; full=true, positive=true, gauge=:raise)
            Q2 = Q[4:6, :]
            return real(dot(W, Q2' * Q2)) + sum(abs2, L)
        end
        test_grad(lq_complement, Matrix(A'))
        @test_logs (:warn, r"qr: the incoming gradient depends") Zygote.gradient(
            X -> real(sum(PySpectral.qr(X; full=true)[1][:, 5])), A)
    end
    # rank deficient: exact for the first r columns of Q and rows of R, the rest warns
    # (the columns past r span two dimensions or more: a real square Q's last column
    # alone is determined up to its sign, and its losses are exact)
    for T in (Float64, ComplexF64), (m, n, r) in ((6, 4, 2), (4, 4, 2), (3, 5, 1))
        A = randn(T, m, r) * randn(T, r, n)
        @test PySpectral.qr_rank(PySpectral.qr(A)[2]) == r
        G1, G2 = randn(T, m, r), randn(T, r, n)
        determined(X) = (QR = PySpectral.qr(X; positive=true, gauge=:raise);
                         real(dot(G1, QR[1][:, 1:r])) + real(dot(G2, QR[2][1:r, :])))
        test_grad(determined, A; rtol=1e-5)
        @test_logs (:warn, r"qr: A is rank deficient") Zygote.gradient(
            X -> real(sum(PySpectral.qr(X)[1])), A)
        rec = GaugeRecorder()
        Q, R = PySpectral.qr(A)
        qr_pullback!(zeros(T, m, n), Q, R, ones(T, size(Q)), nothing; gauge=rec)
        @test first(rec.records[1]) === Symbol("qr:rank")
    end
end

@testset "qr and lq at rank deficiency" begin
    # Pivot patterns (exact zeros, rounding-level dependent columns; first, middle,
    # last; several), real and complex, both gauges, lq, complete: the entries A
    # determines and f(Q R) exact (square, wide, complete Q), a loss of the choice past
    # the first small pivot and a thin Q's product that lacks its rank-raising part
    # warn, each kind recorded by its name; forward mode likewise (docs/math.md).
    Random.seed!(43)
    zeroed(T, m, n, cols) = (A = randn(T, m, n); A[:, cols] .= 0; A)
    function dependent(T, m, n, c)
        A = randn(T, m, n)
        A[:, c] = A[:, 1] - 2 * A[:, 2]
        return A
    end
    product(W; full=false, positive=false) =
        X -> (QR = PySpectral.qr(X; full, positive, gauge=:raise);
              sum(sin, real.(W .* (QR[1] * QR[2]))))
    function determined(j, G; positive=false)
        return X -> (QR = PySpectral.qr(X; positive, gauge=:raise);
                     real(dot(G, QR[2][1:j, :])) + sum(abs2, QR[1][:, 1:j] * QR[1][:, 1:j]'))
    end
    for T in (Float64, ComplexF64), positive in (false, true)
        # square and wide: f(Q R) exact at every zero pivot; the determined part too
        for (m, n, cols) in ((4, 4, [1]), (4, 4, [2]), (4, 4, [4]), (4, 4, [2, 3]),
                             (3, 5, [2]), (5, 5, [2, 4]))
            A = zeroed(T, m, n, cols)
            W = randn(T, m, n)
            test_grad(product(W; positive), A; rtol=1e-6)
            j = cols[1] - 1
            test_grad(determined(j, randn(T, j, n); positive), A; rtol=1e-6)
        end
        # rounding-level pivots: square, wide, and a tall A's last column
        for (m, n, c) in ((4, 4, 3), (4, 6, 4), (5, 4, 4))
            A = dependent(T, m, n, c)
            test_grad(product(randn(T, m, n); positive), A; rtol=1e-6)
            test_grad(determined(c - 1, randn(T, c - 1, n); positive), A; rtol=1e-6)
        end
        # a thin Q of a tall A at a zero middle column: determined exact; the product
        # warns (lost), mode="complete" is exact
        A = zeroed(T, 6, 3, [2])
        W = randn(T, 6, 3)
        test_grad(X -> abs2(PySpectral.qr(X; positive, gauge=:raise)[2][1, 3]), A)
        @test_logs (:warn, r"qr: A is rank deficient .* and Q is thin") Zygote.gradient(
            X -> (QR = PySpectral.qr(X; positive); sum(sin, real.(W .* (QR[1] * QR[2])))), A)
        test_grad(product(W; full=true, positive), A; rtol=1e-6)
        # lq: a zero middle row, the same through the transpose
        L, Q = PySpectral.lq(Matrix(A'))
        @test L * Q ≈ A'
        test_grad(X -> (LQ = PySpectral.lq(X; full=true, positive, gauge=:raise);
                        sum(sin, real.(W' .* (LQ[1] * LQ[2])))), Matrix(A'); rtol=1e-6)
        @test_logs (:warn, r"lq: A is rank deficient .* and Q is thin") Zygote.gradient(
            X -> (LQ = PySpectral.lq(X); sum(sin, real.(W' .* (LQ[1] * LQ[2])))),
            Matrix(A'))
    end
    # the choice past j warns (recorded as "qr:rank"); a complete Q's complement basis
    # as "qr:complement"; a thin Q's missing part as "qr:lost"
    A = zeroed(Float64, 4, 4, [2])
    @test_logs (:warn, r"qr: A is rank deficient.*one choice of many") Zygote.gradient(
        X -> sum(PySpectral.qr(X)[1][:, 3]), A)
    Q, R = PySpectral.qr(A)
    rec = GaugeRecorder()
    qr_pullback!(zeros(4, 4), Q, R, ones(4, 4), nothing; gauge=rec)
    @test first(rec.records[1]) === Symbol("qr:rank")
    B = zeroed(Float64, 6, 3, [2])
    Q, R = PySpectral.qr(B)
    rec = GaugeRecorder()
    G = randn(6, 3)
    qr_pullback!(zeros(6, 3), Q, R, G * R', Q' * G; gauge=rec)
    @test Symbol("qr:lost") in first.(rec.records)
    @test !(Symbol("qr:rank") in first.(rec.records))
    Qc, Rc = PySpectral.qr(randn(6, 3); full=true)
    rec = GaugeRecorder()
    ΔQ = zeros(6, 6)
    ΔQ[:, 5] .= 1
    qr_pullback!(zeros(6, 3), Qc, Rc, ΔQ, nothing; gauge=rec)
    @test first(rec.records[1]) === Symbol("qr:complement")
    @test occursin("Q2 Q2^H", PySpectral.complement_message(:qr, 1.0, 0.5))
    # forward mode: the determined entries' and the product's tangents exact (square),
    # a tangent that moves the choice warns, one that leaves Z alone is silent
    for T in (Float64, ComplexF64)
        A = zeroed(T, 4, 4, [2])
        ΔA = randn(T, 4, 4)
        Q, R = PySpectral.qr(A)
        ΔQ, ΔR = @test_logs (:warn, r"qr: forward mode at a rank-deficient A") (
            PySpectral.qr_pushforward(Q, R, ΔA))
        @test ΔQ * R + Q * ΔR ≈ ΔA
        f(t) = PySpectral.qr(A + t * ΔA)[2][1, 3]
        @test ΔR[1, 3] ≈ central_fdm(5, 1)(f, 0.0) rtol = 1e-6
        t = randn(T, 1, 4)
        t[1] = real(t[1])
        ΔA0 = Q[:, 1:1] * t  # moves R[1, :] only: Z is unmoved
        ΔQ0, ΔR0 = @test_logs PySpectral.qr_pushforward(Q, R, ΔA0)
        @test ΔQ0 * R + Q * ΔR0 ≈ ΔA0
        L, Ql = PySpectral.lq(Matrix(A'))
        @test_logs (:warn, r"lq: forward mode") PySpectral.lq_pushforward(L, Ql,
                                                                          Matrix(ΔA'))
    end
    # the issue's thin case, forward: R[1, 3] of a 6x3 with a zero middle column
    A = zeroed(Float64, 6, 3, [2])
    ΔA = randn(6, 3)
    Q, R = PySpectral.qr(A; positive=true)
    ΔQ, ΔR = PySpectral.qr_pushforward(Q, R, ΔA; gauge=:ignore)
    g(t) = PySpectral.qr(A + t * ΔA; positive=true)[2][1, 3]
    @test ΔR[1, 3] ≈ central_fdm(5, 1)(g, 0.0) rtol = 1e-6
end

@testset "polar" begin
    Random.seed!(42)
    for T in (Float64, ComplexF64), (m, n) in ((5, 3), (4, 4), (3, 5)), side in (:right, :left)
        A = randn(T, m, n)
        W, P = polar(A; side)
        @test (side === :right ? W * P : P * W) ≈ A && P == P' && isposdef(P + 1e-12I)
        test_rrule(polar, A; fkwargs=(; side), check_inferred=false, rtol=RTOL, atol=ATOL)
        test_frule(polar, A; fkwargs=(; side), check_inferred=false, rtol=RTOL, atol=ATOL)
        # repeated singular values: both factors exact
        k = min(m, n)
        B = with_singular_values(T, m, n, [2.0, 2.0, 2.0, 1.0][1:k])
        W0, P0 = randn(T, m, n), randn(T, size(P)...)
        both(X) = (WP = polar(X; side); real(dot(W0, WP[1])) + real(dot(P0, WP[2])))
        test_grad(both, B)
    end
    @test_throws DomainError polar(with_singular_values(Float64, 4, 3, [2.0, 1.0, 0.0]))
    @test_throws ArgumentError polar(randn(3, 3); side=:up)
end

@testset "eig rrules" begin
    Random.seed!(43)
    for T in (Float64, ComplexF64)
        A = randn(T, 5, 5)
        E = eig(A)
        @test E.values isa Vector{complex(T)} && E.vectors isa Matrix{complex(T)}
        @test A * E.vectors ≈ E.vectors * Diagonal(E.values)
        @test all(norm(v) ≈ 1 for v in eachcol(E.vectors))
        @test PySpectral.eigvals(A) ≈ E.values
        test_rrule(PySpectral.eigvals, A; check_inferred=false, rtol=RTOL, atol=ATOL)
        test_frule(PySpectral.eigvals, A; check_inferred=false, rtol=RTOL, atol=ATOL)
        W = randn(ComplexF64, 5, 5)
        projector(X) = (E = eig(X); c = [1, 2]; real(dot(W, E.vectors[:, c] * inv(E.vectors)[c, :])))
        test_grad(projector, A)
        # a repeated eigenvalue of a non-normal diagonalizable matrix: the cluster's
        # projector and a symmetric function of its eigenvalues, exact and silent
        S = randn(T, 5, 5)
        B = S * Diagonal(T[1, 2, 2, 2, -0.5]) / S
        function cluster(X)
            E = eig(X; gauge=:raise)
            c = abs.(E.values .- 2) .< 0.3
            P = E.vectors[:, c] * inv(E.vectors)[c, :]
            return real(dot(W, P)) + real(sum(E.values[c])^2) + real(sum(E.values[.!c] .^ 3))
        end
        test_grad(cluster, B; rtol=1e-5)
        ΔB = randn(T, 5, 5)
        # ΔB splits the cluster: forward mode cannot see that `cluster` is invariant
        (_, ΔE) = @test_logs (:warn, r"eig: .*splits it") frule((NoTangent(), ΔB), eig, B)
        @test real(dot(only(Zygote.gradient(cluster, B)), ΔB)) ≈
              FiniteDifferences.jvp(central_fdm(5, 1), cluster, (B, ΔB)) rtol = 1e-5
        @test_logs (:warn, r"eig: .*unequally") Zygote.gradient(
            X -> real(eig(X).values[findfirst(v -> abs(v - 2) < 0.3, eig(X).values)]), B)
    end
    J = [2.0 1.0 0.0; 0.0 2.0 0.0; 0.0 0.0 1.0]
    @test_throws DomainError Zygote.gradient(X -> real(sum(PySpectral.eigvals(X))), J)
end

@testset "eig defective and forward clusters" begin
    Random.seed!(36)
    # S J S⁻¹, J the Jordan block of 1 with δ in its corner (eigenvalues 1 ± √δ)
    near_jordan(δ, T=Float64) = (S = I + 0.3randn(2, 2); T.(S * [1.0 1.0; δ 1.0] / S))
    function refused(A)
        E = eig(A)
        try
            PySpectral.check_diagonalizable(E.values, E.vectors)
        catch err
            err isa DomainError || rethrow()
            return true
        end
        return false
    end
    # a Jordan block to rounding, or within eps^(3/4) of one: refused (before: 2 of 20
    # exact Jordan blocks passed with a gradient of norm 4e7)
    @test all(refused(near_jordan(δ)) for δ in (0.0, 1e-14) for _ in 1:20)
    @test all(refused(near_jordan(δ, Float32)) for δ in (0.0, 1e-8) for _ in 1:20)
    @test !any(refused(near_jordan(δ)) for δ in (1e-8, 1e-4) for _ in 1:20)
    A = near_jordan(1e-14)
    @test_throws DomainError Zygote.gradient(X -> abs(-(PySpectral.eigvals(X)...)), A)
    # resolved: exact against finite differences (of a smooth loss at δ = 1e-2)
    A = near_jordan(1e-2)
    splitting(X) = abs(-(PySpectral.eigvals(X)...))
    @test only(Zygote.gradient(splitting, A)) ≈ only(FiniteDifferences.grad(
        central_fdm(5, 1), splitting, A)) rtol = 1e-6
    # a well-conditioned near pair is not refused
    S = I + 0.3randn(3, 3)
    @test !refused(S * Diagonal([1.0, 1.0 + 1e-9, 2.0]) / S)
    # the message names routes that exist
    E = eig(near_jordan(1e-14))
    err = try
        PySpectral.check_diagonalizable(E.values, E.vectors)
    catch e
        e
    end
    @test err isa DomainError && occursin("matrix_power", sprint(showerror, err))

    # forward mode at a triple eigenvalue: a tangent that splits it warns (the tangent
    # of V exp(Λ) V⁻¹ is off), one that keeps it together is exact and silent
    S = I + 0.3randn(4, 4)
    B = S * Diagonal([1.0, 1, 1, 2]) / S
    E = eig(B)
    function expm_tangent(ΔB)
        Δλ, ΔV = eig_pushforward(E.values, E.vectors, ΔB)
        V, W, e = E.vectors, inv(E.vectors), exp.(E.values)
        Y = V * Diagonal(e) * W
        return real(ΔV * Diagonal(e) * W + V * Diagonal(e .* Δλ) * W - Y * ΔV * W)
    end
    exact(ΔB) = FiniteDifferences.jvp(central_fdm(5, 1), exp, (B, ΔB))
    ΔB = randn(4, 4)
    t = @test_logs (:warn, r"eig: forward mode .*splits it.*eig_function") expm_tangent(ΔB)
    @test norm(t - exact(ΔB)) > 1e-3 * norm(exact(ΔB))
    for ΔB in (B * B - 2B, Matrix(1.0I, 4, 4))
        t = @test_logs expm_tangent(ΔB)
        @test t ≈ exact(ΔB) rtol = 1e-8
    end
    @test_throws GaugeError eig_pushforward(E.values, E.vectors, randn(4, 4); gauge=:raise)
    @test_logs eig_pushforward(E.values, E.vectors, randn(4, 4); gauge=:ignore)
    recorder = PySpectral.GaugeRecorder()
    eig_pushforward(E.values, E.vectors, randn(4, 4); gauge=recorder)
    @test first(only(recorder.records)) === Symbol("eig:split")
end

@testset "eig_function" begin
    Random.seed!(36)
    # S Diagonal(λ) S⁻¹ with a well-conditioned S: a diagonalizable matrix with a
    # chosen, possibly repeated, spectrum.
    similar_to(T, λ) = (S = I + 0.3randn(T, length(λ), length(λ)); S * Diagonal(T.(λ)) / S)
    for T in (Float64, ComplexF64)
        A = similar_to(T, [1.0, 2.0, 3.5, 0.6])
        @test PySpectral.eig_function(A, :exp) ≈ exp(A)
        @test PySpectral.eig_function(A, (:pow, 3)) ≈ A^3
        @test PySpectral.eig_function(A, (:pow, -1)) ≈ inv(A)
        @test eltype(PySpectral.eig_function(A, :exp)) == T
        R = PySpectral.eig_function(A, :sqrt)
        @test R * R ≈ A
        @test exp(PySpectral.eig_function(A, :log)) ≈ A
        for f in (:exp, :log, :sqrt, :invsqrt, (:pow, 3), (:pow, -2), (:pow, 0.7),
                  (z -> z^2 + exp(z), z -> 2z + exp(z)))
            test_rrule(PySpectral.eig_function, A, f ⊢ NoTangent(); check_inferred=false,
                       rtol=RTOL, atol=ATOL)
            test_frule(PySpectral.eig_function, A, f ⊢ NoTangent(); check_inferred=false,
                       rtol=RTOL, atol=ATOL)
        end
    end
    # Exact at repeated eigenvalues of a diagonalizable A: against exp(A)'s and A^3's
    # derivatives by finite differences, and the pullback against the pushforward.
    for T in (Float64, ComplexF64), λ in ([1.0, 1.0, 2.0, 3.0], [2.0, 2.0, 2.0, 0.5])
        A = similar_to(T, λ)
        W, ΔA = randn(T, 4, 4), randn(T, 4, 4)
        for (f, ref) in ((:exp, exp), ((:pow, 3), X -> X^3))
            Y, back = rrule(PySpectral.eig_function, A, f)
            @test Y ≈ ref(A)
            g = back(W)[2]
            g_fd = only(FiniteDifferences.grad(central_fdm(5, 1),
                                               X -> real(dot(W, ref(X))), A))
            @test g ≈ g_fd rtol = 1e-7 atol = 1e-8
            _, ΔY = frule((NoTangent(), ΔA, NoTangent()), PySpectral.eig_function, A, f)
            @test real(dot(W, ΔY)) ≈ real(dot(g, ΔA)) rtol = 1e-10
        end
    end
    # A real matrix with a repeated complex-conjugate pair: a real Y and gradient.
    B = [1.0 -2.0 0 0; 2.0 1.0 0 0; 0 0 1.0 -2.0; 0 0 2.0 1.0]
    S = I + 0.3randn(4, 4)
    A = S * B / S
    Y = PySpectral.eig_function(A, :exp)
    @test eltype(Y) == Float64 && Y ≈ exp(A)
    W4 = randn(4, 4)
    test_grad(X -> real(dot(W4, PySpectral.eig_function(X, :exp))), A; rtol=1e-6)
    # Refusals: a defective A (the routes that do not diagonalize are exact there),
    # the cut of a branch, a user f that is not real on a real A.
    J = [2.0 1.0 0.0; 0.0 2.0 0.0; 0.0 0.0 -1.0]
    @test_throws DomainError PySpectral.eig_function(J, :exp)
    @test_throws DomainError PySpectral.eig_function(similar_to(Float64, [1.0, -2.0, 3.0]),
                                                     :log)
    @test_throws DomainError PySpectral.eig_function(similar_to(Float64, [0.0, 1.0, 2.0]),
                                                     (:pow, -1))
    @test_throws ArgumentError PySpectral.eig_function(A, (z -> exp(im * z),
                                                           z -> im * exp(im * z)))
    @test PySpectral.eig_function(complex(A), (z -> exp(im * z), z -> im * exp(im * z))) ≈
          exp(im * A)
    @test_throws ArgumentError PySpectral.eig_function(A, :cosh)
end

# Forward mode at a degenerate cluster: the frules return the basis the tangent follows
# (pyspectral/pullbacks/eigh.py), so an output that reads a cluster's values through its
# vectors (V Λ Vᴴ, U S Vᴴ) is exact, a split cluster's values get their one-sided
# derivatives and its vectors the branch's; a split near-degenerate cluster, which
# cannot be rotated, warns, and the route it names is exact there.
onesided(f, h) = (-3 .* f(0.0) .+ 4 .* f(h) .- f(2h)) ./ (2h)

@testset "frules at a degenerate cluster" begin
    Random.seed!(36)
    h = 1e-4
    for T in (Float64, ComplexF64)
        A, ΔA = with_eigenvalues(T, [0.5, 2.0, 2.0, 2.0, 3.0]), randn(T, 5, 5)
        ΔH = PySpectral.hermitian_from_triangle(ΔA, :L)
        E, ΔE = frule((NoTangent(), ΔA), PySpectral.eigh, A; gauge=:raise)
        V, λ, ΔV, Δλ = E.vectors, E.values, ΔE.vectors, ΔE.values
        @test V * Diagonal(λ) * V' ≈ A atol = 1e-13
        @test ΔV * Diagonal(λ) * V' + V * Diagonal(Δλ) * V' + V * Diagonal(λ) * ΔV' ≈ ΔH atol = 1e-12
        @test Δλ ≈ onesided(t -> PySpectral.eigh(A + t * ΔH).values, h) rtol = 1e-6
        function vectors(t)  # the eigenvectors of A + tΔH, phases aligned with V's
            t == 0 && return V
            W = PySpectral.eigh(A + t * ΔH).vectors
            return W .* transpose([conj(c) / abs(c) for c in diag(V' * W)])
        end
        @test ΔV ≈ onesided(vectors, h) rtol = 1e-6 atol = 1e-6
        @test last(frule((NoTangent(), ΔA), PySpectral.eigvalsh, A)) ≈ Δλ
        B, ΔB = with_singular_values(T, 6, 4, [5.0, 2.0, 2.0, 2.0]), randn(T, 6, 4)
        F, ΔF = frule((NoTangent(), ΔB), PySpectral.svd, B; gauge=:raise)
        @test F.U * Diagonal(F.S) * F.Vt ≈ B atol = 1e-13
        @test ΔF.U * Diagonal(F.S) * F.Vt + F.U * Diagonal(ΔF.S) * F.Vt +
              F.U * Diagonal(F.S) * ΔF.Vt ≈ ΔB atol = 1e-12
        @test last(frule((NoTangent(), ΔB), PySpectral.svdvals, B)) ≈
              onesided(t -> PySpectral.svdvals(B + t * ΔB), h) rtol = 1e-6
        # near-degenerate (1e-13 apart): not rotatable, warns; the named route is exact
        A2 = with_eigenvalues(T, [0.25, 1.0, 1.0 + 1e-13, 4.0, 5.0])
        @test_logs (:warn, r"eigh: forward mode.*matrix_function") match_mode = :any frule(
            (NoTangent(), ΔA), PySpectral.eigh, A2)
        _, ΔY = frule((NoTangent(), ΔA, NoTangent()), PySpectral.matrix_function, A2,
                      (:pow, 1))
        @test ΔY ≈ ΔH atol = 1e-10
        B2 = with_singular_values(T, 5, 4, [5.0, 2.0, 2.0 + 1e-13, 1.0])
        @test_logs (:warn, r"svd: forward mode.*svd_function") match_mode = :any frule(
            (NoTangent(), ΔB[1:5, :]), PySpectral.svd, B2)
        _, ΔY = frule((NoTangent(), ΔB[1:5, :], NoTangent()), PySpectral.svd_function, B2,
                      (:pow, 1))
        @test ΔY ≈ ΔB[1:5, :] atol = 1e-10
    end
end

# Issue 39: the linear solve (KrylovKit.linsolve forward, src/pullbacks/linsolve.jl
# adjoint solve) against finite differences, torch's formulas' twin, and KrylovKit's own
# rrule through Zygote.
@testset "linsolve" begin
    Random.seed!(39)
    for T in (Float64, ComplexF64)
        n = 8
        A, b = randn(T, n, n) / sqrt(n), randn(T, n)
        x = PySpectral.linsolve(A, b, 2.0, 0.5)
        @test (2.0 * I + 0.5 * A) * x ≈ b
        test_rrule(PySpectral.linsolve, A, b, 2.0, T(0.5); check_inferred=false,
                   rtol=RTOL, atol=ATOL)
        test_frule(PySpectral.linsolve, A, b, 2.0, T(0.5); check_inferred=false,
                   rtol=RTOL, atol=ATOL)
        test_frule(PySpectral.linsolve, A, b; check_inferred=false, rtol=RTOL, atol=ATOL)
        # a restarted GMRES, the adjoint solve included
        test_rrule(PySpectral.linsolve, A, b, 1.5, 1.0; fkwargs=(; krylovdim=3),
                   check_inferred=false, rtol=RTOL, atol=ATOL)
        # Zygote through PySpectral's rule and through KrylovKit's agree
        w = randn(T, n)
        ours(A, b) = real(dot(w, PySpectral.linsolve(A, b, 2.0, 0.5)))
        theirs(A, b) = real(dot(w, KrylovKit.linsolve(A, b, zero(b), 2.0, 0.5;
                                                      tol=1e-13)[1]))
        g1, g2 = Zygote.gradient(ours, A, b), Zygote.gradient(theirs, A, b)
        @test g1[1] ≈ g2[1] rtol = 1e-9
        @test g1[2] ≈ g2[2] rtol = 1e-9
    end
    # conjugate gradients on a Hermitian positive definite matrix
    B = randn(6, 6)
    H = B * B' + I
    h = randn(6)
    @test PySpectral.linsolve(H, h; ishermitian=true, isposdef=true) ≈ H \ h
    test_rrule(PySpectral.linsolve, H, h; fkwargs=(; ishermitian=true, isposdef=true),
               check_inferred=false, rtol=RTOL, atol=ATOL, output_tangent=randn(6))
    @test_logs (:warn, r"did not converge") PySpectral.linsolve(randn(30, 30), randn(30),
                                                                0.1; krylovdim=2, maxiter=1)
    @test_throws DimensionMismatch PySpectral.linsolve(randn(3, 3), randn(4))
    # MINRES for a Hermitian indefinite matrix with real a0, a1: the solution, its short
    # recurrences (no restart: in rounding Lanczos loses orthogonality, so a condition
    # of ~100 takes about 1.25 n steps to 1e-12, within 2 n) and the rule, whose adjoint
    # solve is MINRES too
    for T in (Float64, ComplexF64)
        n = 40
        Q = Matrix(qr(randn(T, n, n)).Q)
        H = Hermitian(Q * Diagonal(range(-2.0, 3.0; length=n) .+ 0.01) * Q')
        H = Matrix(H)
        h = randn(T, n)
        x, info = PySpectral._krylov(H, h, zero(h), 0.1, 1.0; tol=1e-12 * norm(h),
                                     krylovdim=30, maxiter=100, ishermitian=true,
                                     isposdef=false)
        @test info.converged == 1 && info.numops <= 2n
        @test x ≈ (0.1I + H) \ h
        @test PySpectral.linsolve(H, h, 0.1; ishermitian=true) ≈ (0.1I + H) \ h
        Hs = H[1:8, 1:8]
        test_rrule(PySpectral.linsolve, Hs, h[1:8], 0.1, 1.0;
                   fkwargs=(; ishermitian=true), check_inferred=false, rtol=RTOL,
                   atol=ATOL, output_tangent=randn(T, 8))
    end
    @test_logs (:warn, r"did not converge") PySpectral.linsolve(
        Matrix(Symmetric(randn(60, 60))), randn(60); ishermitian=true, krylovdim=2,
        maxiter=3)
    # a zero right-hand side at tolerance zero (a zero cotangent, as the bridge passes
    # absolute tolerances) is solved by zero, the pullback too
    C = randn(5, 5) + 5I
    @test PySpectral.linsolve(C, zeros(5); atol=0, rtol=0) == zeros(5)
    ΔC = zeros(5, 5)
    y, Δa0, Δa1 = linsolve_pullback!(ΔC, C, C \ ones(5), zeros(5); atol=0, rtol=0)
    @test iszero(y) && iszero(ΔC) && iszero(Δa0) && iszero(Δa1)
end

@testset "fixed_point" begin
    Random.seed!(40)
    # x = cos(a x): dx/da = -x sin(ax) / (1 + a sin(ax))
    a = 0.7
    x = fixed_point(x -> cos.(a .* x), [0.0])
    @test x ≈ cos.(a .* x)
    g = Zygote.gradient(a -> fixed_point(x -> cos.(a .* x), [0.0])[1], a)[1]
    s = sin(a * x[1])
    @test g ≈ -x[1] * s / (1 + a * s) rtol = 1e-10
    # a complex step that is only real-linear (conj), against unrolled Zygote
    n = 5
    W, c, w = 0.2 * randn(ComplexF64, n, n), 0.3 * randn(ComplexF64, n), randn(ComplexF64, n)
    step(W, c) = x -> 0.5 .* tanh.(W * conj(x) .+ c)
    implicit(W, c) = real(dot(w, fixed_point(step(W, c), zeros(ComplexF64, n))))
    function unrolled(W, c)
        x = zeros(ComplexF64, n)
        for _ in 1:200
            x = step(W, c)(x)
        end
        return real(dot(w, x))
    end
    g1, g2 = Zygote.gradient(implicit, W, c), Zygote.gradient(unrolled, W, c)
    @test g1[1] ≈ g2[1] rtol = 1e-9
    @test g1[2] ≈ g2[2] rtol = 1e-9
    # power iteration with a negative dominant eigenvalue: a fixed point only up to the
    # sign, fixed by gauge_fix and frozen at x*; a sign-invariant loss against eigen
    Q = Matrix(qr(randn(6, 6)).Q)
    A0 = Q * Diagonal([-5.0, 2.0, 1.0, 0.5, 0.2, 0.1]) * Q'
    P = Symmetric(randn(6, 6))
    power(A) = x -> (A * x) / norm(A * x)
    sign_fix(new, ref) = (s = sign(real(dot(new, ref))); v -> s * v)
    function by_fixed_point(A)
        v = fixed_point(power((A + A') / 2), ones(6); gauge_fix=sign_fix)
        return dot(v, P * v)
    end
    function by_eigen(A)
        E = eigen(Symmetric((A + A') / 2))
        v = E.vectors[:, argmax(abs.(E.values))]
        return dot(v, P * v)
    end
    @test Zygote.gradient(by_fixed_point, A0)[1] ≈ Zygote.gradient(by_eigen, A0)[1] rtol = 1e-8
    @test_logs (:warn, r"not converged") match_mode = :any fixed_point(power(A0), ones(6);
                                                                       maxiter=50)
    # the phase of a complex eigenvector is free: J has the eigenvalue 1
    Ac = ComplexF64.(Diagonal([3.0, 1.0, 0.5, 0.2]))
    phase(A) = imag(fixed_point(power(A), fill(1.0 + 1.0im, 4))[1])
    @test_throws PySpectral.DerivativeError Zygote.gradient(phase, Ac)
    @test_throws PySpectral.DerivativeError Zygote.gradient(phase, Matrix(Ac))
end

@testset "eig_topk" begin
    Random.seed!(40)
    key(λ, which) = PySpectral._eig_key(λ, which)
    for T in (Float64, ComplexF64), which in (:LM, :LR, :SR, :LI, :SI)
        n = 90  # above DENSE_EIG_TOPK: KrylovKit's Arnoldi
        A = randn(T, n, n)
        λ, V = eig_topk(A, 4, which)
        @test length(λ) >= 4 && size(V) == (n, length(λ))
        full = LinearAlgebra.eigvals(A)
        ref = sort(full; by=z -> key(z, which), rev=true)[1:length(λ)]
        @test all(z -> minimum(abs.(ref .- z)) < 1e-9 * maximum(abs, ref), λ)
        @test all(z -> minimum(abs.(λ .- z)) < 1e-9 * maximum(abs, ref), ref)
        @test issorted(key.(λ, which); rev=true)
        @test norm(A * V - V * LinearAlgebra.Diagonal(λ)) < 1e-9 * norm(A)
        @test all(j -> norm(V[:, j]) ≈ 1, axes(V, 2))
    end
    # the gradient of a gauge-invariant loss against the dense eig rrule and finite
    # differences, through Zygote
    for T in (Float64, ComplexF64), n in (10, 80)
        A = randn(T, n, n)
        c = randn(ComplexF64, n)
        loss(λ, V) = sum(abs2, real.(λ)) + 0.3 * sum(abs2, imag.(λ)) + sum(abs2, V' * c)
        function topk(A)
            λ, V = eig_topk(A, 3)
            return loss(λ, V)
        end
        λ0, _ = eig_topk(A, 3)
        function dense(A)
            λ, V = eig(A)
            idx = [argmin(abs.(λ .- z)) for z in λ0]
            return loss(λ[idx], V[:, idx])
        end
        g = Zygote.gradient(topk, A)[1]
        @test g ≈ Zygote.gradient(dense, A)[1] rtol = 1e-8
        n == 10 && @test g ≈ FiniteDifferences.grad(central_fdm(5, 1), topk, A)[1] rtol = 1e-6
    end
    # the deformed AKLT transfer operator: spectrum {b² + ac, b² - ac, -b², -b²}, k = 2
    # extended over the 2-fold cluster, the correlation length's gradient in closed form
    function transfer(a, b, c)
        Ap = [0 a; 0 0]; A0 = [b 0; 0 -b]; Am = [0 0; c 0]
        return sum(kron(conj(M), M) for M in (Ap, A0, Am))
    end
    xi(a, b, c) = (λ = eig_topk(transfer(a, b, c), 2)[1];
                   -1 / log(sum(abs, λ[2:end]) / (length(λ) - 1) / abs(λ[1])))
    a, b, c = 1.0, 0.8, 0.5
    λ, _ = eig_topk(transfer(a, b, c), 2)
    @test λ ≈ [b^2 + a * c, -b^2, -b^2]
    exact(a, b, c) = 1 / log((b^2 + a * c) / b^2)
    @test xi(a, b, c) ≈ exact(a, b, c) rtol = 1e-12
    @test collect(Zygote.gradient(xi, a, b, c)) ≈ collect(Zygote.gradient(exact, a, b, c)) rtol = 1e-9
    # a loss that reads one vector of the cluster (here entries 2 and 3 of vec X, where
    # the cluster's eigenvectors live) is a basis choice: the gauge policy
    E = transfer(a, b, c)
    one_vector(V) = abs2(V[2, 2] + V[3, 2])
    @test_throws GaugeError Zygote.gradient(
        E -> one_vector(eig_topk(E, 2; gauge=:raise)[2]), E)
    @test_logs (:warn, r"gauge") match_mode = :any Zygote.gradient(
        E -> one_vector(eig_topk(E, 2)[2]), E)
    # forward mode: the frule's derivative of a gauge-invariant loss along dA against the
    # rrule's gradient paired with dA and against central differences
    for T in (Float64, ComplexF64)
        n = 80
        A, dA, c = randn(T, n, n), randn(T, n, n), randn(ComplexF64, n)
        ℓ(λ, V) = sum(abs2, λ) + sum(abs2, V' * c)
        (λ, V), ∂ = ChainRulesCore.frule((NoTangent(), dA, NoTangent()), eig_topk, A, 3)
        dℓ = 2 * real(dot(λ, ∂[1])) + 2 * real(dot(V' * c, ∂[2]' * c))
        g = Zygote.gradient(A -> ℓ(eig_topk(A, 3)...), A)[1]
        @test dℓ ≈ real(dot(g, dA)) rtol = 1e-8
        h = 1e-6
        fd = (ℓ(eig_topk(A + h * dA, 3)...) - ℓ(eig_topk(A - h * dA, 3)...)) / 2h
        @test dℓ ≈ fd rtol = 1e-6
    end
    # a tangent that splits the AKLT cluster: the gauge policy
    dE = randn(4, 4)
    @test_throws GaugeError ChainRulesCore.frule((NoTangent(), dE, NoTangent()), eig_topk,
                                                 E, 2; gauge=:raise)
    @test_throws ArgumentError eig_topk(randn(5, 5), 6)
    @test_throws ArgumentError eig_topk(randn(5, 5), 2, :XX)
end

# Script runs: close the outer testset (see the top of the file); throws if any failed.
if STANDALONE
    Test.pop_testset()
    Test.finish(ALL_TESTS)
end
