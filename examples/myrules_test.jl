# Tests of the rule in myrules.jl, one top-level @testset each:
#   python -m pyspectral test-julia examples/myrules_test.jl
using Test
using Random
using ChainRulesTestUtils

include("myrules.jl")

@testset "logdet_reg rrule" begin
    Random.seed!(0)
    test_rrule(logdet_reg, randn(5, 3))
    test_rrule(logdet_reg, randn(3, 3))
end
