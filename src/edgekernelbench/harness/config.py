"""How the judge judges, as one object: built once at a command's edge (cli/, runs.EvalConfig,
agents.episode.AgentConfig) and carried whole to `evaluate`, which turns it into a worker's Job."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from .isolation import Limits
from .job import DEFAULT_BASELINES
from .timing import TimingConfig


@dataclass(frozen=True)
class JudgeConfig:
    threads: int = 1  # TVM's and ONNX Runtime's threads (1: one small edge core)
    trials: int = 5  # correctness trials, at least one per stress distribution (harness/inputs.py)
    seed: int | None = None  # the judgments' input seed: None draws a fresh one per judgment (--seed replays)
    timing: TimingConfig = field(default_factory=TimingConfig)
    baselines: tuple[str, ...] = DEFAULT_BASELINES
    measure: bool = True  # time the correct candidates (False: correctness only)
    limits: Limits = field(default_factory=Limits)
    tracker: str | None = None  # TVM RPC tracker HOST:PORT for profiles with an rpc_key (backends/rpc.py)
    device_retries: int = 2  # a remote device lost mid-judgment: judged again on another one

    @classmethod
    def names(cls) -> set[str]:
        return {f.name for f in fields(cls)}

    def record(self) -> dict:
        """What a run store keeps of it (meta "eval_config")."""
        return {
            "threads": self.threads,
            "trials": self.trials,
            "seed": self.seed,
            "timing": asdict(self.timing),
            "baselines": list(self.baselines),
            "measure": self.measure,
            "tracker": self.tracker,
        }
