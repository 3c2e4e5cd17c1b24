"""The graph pass "FastLog" (ir/fast_log.py): log as Cephes' polynomial, which vectorizes."""

from __future__ import annotations

import numpy as np

from edgekernelbench.problems import get_problem

TINY_LOG = "L1/tiny_log"


def _scheduled(n: int):
    import tvm
    from tvm import te

    from edgekernelbench.ir.fast_log import fast_log_te

    x = te.placeholder((n,), "float32", name="x")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, fast_log_te(x)]))
    (i,) = sch.get_loops(sch.get_sblock("fast_log"))
    sch.vectorize(sch.split(i, [None, 16])[1])
    return sch.mod


def _log_kernel(n: int):
    import tvm

    from edgekernelbench.search.rules import build_target

    return tvm.tirx.build(_scheduled(n), target=build_target(1))


def test_tvm_keeps_the_polynomial_log_vectorized():
    """TVM's VectorizeLoop leaves a loop serial when its body calls an op it cannot vectorize (`isnan` was
    one); LLVM then vectorized that loop itself, through gathers and scatters (logmel's mel matmul: 43 us
    either way, 31 us once TVM vectorized it). The lowered store must be one vector of 16 lanes."""
    import tvm
    from tvm import s_tir, tirx

    from edgekernelbench.search.rules import build_target

    passes = [
        s_tir.transform.LowerInitBlock(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.LowerOpaqueBlock(),
        tirx.transform.FlattenBuffer(),
        tirx.transform.VectorizeLoop(True),
    ]
    with build_target(1):
        lowered = tvm.ir.transform.Sequential(passes)(_scheduled(64))
    text = lowered["main"].script()
    assert "T.Ramp(" in text and "_s in range" not in text, text[-600:]


def test_the_polynomial_log_is_within_an_ulp_and_exact_at_the_special_values():
    """Against float64 NumPy on finite values from subnormals to FLT_MAX: within 1 ulp of the float32
    result (Cephes' logf); -inf at +-0, NaN below 0 and at NaN, inf at inf, and no logf call left (it
    vectorizes)."""
    import tvm

    specials = [0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, 1.0, 2.0, 0.5, 1e-45, 1e-40, 1.1754944e-38, 3.4e38]
    specials += [0.70710677, 0.7071068, 1.0000001, 0.9999999]
    rng = np.random.default_rng(0)
    n = 1 << 14
    rand = np.exp(rng.uniform(-103, 88, n - len(specials))).astype("float32")
    x = np.concatenate([np.array(specials, "float32"), rand])
    lib = _log_kernel(n)
    out = tvm.runtime.tensor(np.zeros(n, "float32"))
    lib["main"](tvm.runtime.tensor(x), out)
    got = out.numpy()
    with np.errstate(all="ignore"):
        want = np.log(x.astype(np.float64))
    finite = np.isfinite(want)
    ulp = np.spacing(np.abs(want[finite]).astype(np.float32)).astype(np.float64)
    assert (np.abs(got[finite] - want[finite]) <= ulp).all()
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])  # +-inf
    assert "logf" not in lib.inspect_source("asm")


def test_the_fast_log_graph_is_judged_exact():
    """A candidate with the pass (the builtin proposer offers it for a model with a Log, below) is
    correct against the oracle, and its kernel holds no call of the log intrinsic."""
    from edgekernelbench.harness.api import TimingConfig, evaluate
    from edgekernelbench.ir.replay import materialize
    from edgekernelbench.ir.spec import Decisions, KernelSpec
    from edgekernelbench.reference import build_reference
    from edgekernelbench.search.graph import FAST_LOG

    problem = get_problem(TINY_LOG)
    spec = KernelSpec(problem=TINY_LOG, decisions=Decisions(graph={"passes": FAST_LOG}), method="test")
    mod = materialize(spec, problem, build_reference(problem), {})
    text = "\n".join(f.script() for gv, f in mod.functions.items() if gv.name_hint != "main")
    assert "T.log(" not in text and "T.reinterpret" in text
    res = evaluate(TINY_LOG, spec, trials=2, timing=TimingConfig.quick(), baselines=("tvm-default",))
    assert res.correct, res.detail
