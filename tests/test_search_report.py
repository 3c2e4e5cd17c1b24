"""Where a search's judgments went (report/agents.search_rows): per kept improvement, failed, too wide."""

from edgekernelbench.report.agents import render_search, search_rows


def judge(problem, proposal, correct=True, improved=False, method="leka"):
    return {
        "problem": problem,
        "method": method,
        "kind": "judge",
        "proposal": proposal,
        "improved": improved,
        "verdict": {"correct": correct},
    }


def test_judgments_per_kept_improvement_failures_and_points_wider_than_the_machine():
    steps = [
        judge("L3/a", "start", improved=True),
        judge("L3/a", "tile+cache/16 lanes/acc 4/vec 2/unroll 64"),  # wider than 8 lanes
        judge("L3/a", "tile+cache/8 lanes/acc 4/vec 2/unroll 64", improved=True),
        judge("L3/a", "tile/8 lanes", correct=False),
        {"problem": "L3/a", "method": "leka", "kind": "accept", "proposal": "tile/8 lanes"},  # not a judgment
        {"problem": "L3/a", "method": "leka", "kind": "final", "proposal": "final"},
        judge("L3/a", "tile/16 lanes", method="flat"),  # another method
        judge("L3/b", "start"),
        judge("L3/b", "tile/16 lanes"),
    ]
    runs = {("L3/a", "leka"): {"machine_lanes": 8}, ("L3/b", "leka"): {}, ("L3/a", "flat"): {}}
    a, b = search_rows(runs, steps)
    assert (a.problem, a.judgments, a.kept, a.per_kept, a.failed, a.too_wide) == ("L3/a", 4, 2, 2.0, 1, 1)
    assert (b.judgments, b.kept, b.per_kept, b.too_wide) == (2, 0, None, None)  # lanes not recorded: unknown
    _, b16 = search_rows(runs, steps, lanes=16)  # a run from before lanes were recorded, on a 16-lane machine
    assert b16.too_wide == 0 and b16.machine_lanes == 16
    assert [r.problem for r in search_rows(runs, steps, method="flat")] == ["L3/a"]
    assert render_search([a, b]).row_count == 2
