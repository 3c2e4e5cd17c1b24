"""benchmarks/space_points.py: points of a kernel's schedule space timed side by side, with their ranks."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import space_points as sp  # noqa: E402

PROBLEM = "L1/dense_ae_128x128"


def test_the_first_points_and_a_named_one_are_timed_with_their_ranks(capsys):
    from edgekernelbench.backends.registry import get_profile
    from edgekernelbench.search.cost import Machine
    from edgekernelbench.search.graph import graph_reference
    from edgekernelbench.search.variants import KernelSpace

    kernel = graph_reference(PROBLEM, "").kernel_calls()[0]
    space = KernelSpace(PROBLEM, kernel, Machine.for_profile(get_profile("host-cpu", 1)), 1, "")
    tiled = [cfg.label for _, cfg in space.ranked if cfg.acc_vectors is not None]
    named = tiled[5]  # a point after the first two
    rows = sp.measure(PROBLEM, kernel, "", 2, [named], rounds=2)
    assert [r["label"] for r in rows] == [*tiled[:2], named]
    assert [r["rank"] for r in rows] == sorted(r["rank"] for r in rows)
    assert all(r["same"] and r["us"] > 0 for r in rows)  # the same output as the first point
    assert rows[0]["vs_first"][0] == 1.0 and all(0 < r["peak"][0] < 2 for r in rows)

    assert sp.main([f"{PROBLEM}:{kernel}", "--top", "1", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("\np0 ") == 1 and tiled[0] in out


def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path):
    assert sp.main([f"{PROBLEM}:no_such_kernel", "--top", "1"]) == 2
    assert sp.main([f"{PROBLEM}:x", "--run", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("space_points: error:") for line in err)
    assert "no run store" in err[1]
