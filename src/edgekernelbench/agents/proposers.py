"""Proposers: "give me the decisions for this layer of this kernel". Methods differ in how they use a
proposer, never in the judge.

- `BuiltinProposer` (offline, no key): the kernel's schedule space (search/variants.py KernelSpace: the
  rules' strategies over register tiles, vector widths, accumulator caching and unroll steps), ranked by
  the analytical cost model (search/cost.py); it offers the cheapest points whose earlier layers equal the
  accepted ones and whose asked-for layer differs, each with its own later layers as a completion.
- `LLMProposer`: one model call per proposal with the versioned `leka_layer` template: the kernel's
  TVMScript after the accepted layers, where the time goes, the layer's primitives, the judge's feedback
  on earlier attempts; the answer is `schedule(name, sch)` code for that kernel only."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..llm.prompts import render_prompt
from ..search.cost import Machine
from ..search.graph import graph_alternatives, target_alternatives
from ..search.kernels import KernelInfo, kernel_script
from ..search.variants import KernelSpace, Variant, lanes_options, layer_key
from .episode import Episode, ProfileRow
from .model import ModelClient, ModelError, ParseError, schedule_code


@dataclass
class LayerRequest:
    kernel: KernelInfo
    layer: str  # "loop" | "memory" | "target"
    accepted: dict  # this kernel's accepted layer traces
    feedback: list[str] = field(default_factory=list)  # the judge's verdicts on earlier attempts
    profile: list[ProfileRow] = field(default_factory=list)  # the current best's time per kernel


@dataclass
class Proposal:
    label: str
    layers: dict | None = None  # the kernel's complete layer traces (replaces the accepted ones)
    code: str | None = None  # schedule(name, sch) for this kernel, applied after the accepted layers
    error: str = ""  # no usable proposal (the model's answer had no code): feedback for the next try


def kernel_only(code: str, kernel: str) -> str:
    """A model's schedule code, applied to `kernel` only."""
    return (
        f"{code}\n\n_ekb_layer_schedule = schedule\n\n\ndef schedule(name, sch):\n"
        f"    if name == {kernel!r}:\n        _ekb_layer_schedule(name, sch)\n"
    )


class BuiltinProposer:
    name = "builtin"

    def __init__(self, episode: Episode):
        self.ep = episode
        self.machine = Machine.for_profile(episode.cfg.backend)
        self.tried: dict[tuple[str, str, str], set[str]] = {}
        self.spaces: dict[tuple[str, str], KernelSpace] = {}
        self.graph = ""  # the graph key (search/graph.py) the kernels belong to; LEKA sets it

    def space(self, kernel: str) -> KernelSpace:
        key = (self.graph, kernel)
        if key not in self.spaces:
            self.spaces[key] = KernelSpace(
                self.ep.problem.id, kernel, self.machine, self.ep.cfg.threads, graph=self.graph
            )
        return self.spaces[key]

    def carry(self, old: str, new: str, names: dict[str, str]) -> None:
        """LEKA moved to graph `new`, whose kernels stand for those of graph `old` (names: old kernel ->
        new): the points tried on a kernel count as tried on its counterpart (they are offered once)."""
        for (graph, kernel, layer), seen in list(self.tried.items()):
            if graph == old and kernel in names:
                self.tried.setdefault((new, names[kernel], layer), set()).update(seen)

    def translate(self, old: str, kernel: str, new: str, counterpart: str, layers: dict) -> dict | None:
        """`layers` (kernel `kernel`'s decisions in graph `old`) for its counterpart in graph `new`, whose
        blocks they do not fit (e.g. BiasInit took the add out of its epilogue): the same point of the
        schedule space (strategy, vector width, register tile, unroll step) recorded on the counterpart;
        None when the decisions are no point of the space or the point does not apply there."""
        old_graph, self.graph = self.graph, old
        try:
            cfg = self.space(kernel).point_of(layers)
            if cfg is None:
                return None
            self.graph = new
            return self.space(counterpart).layers_at(cfg)
        finally:
            self.graph = old_graph

    def graphs(self) -> list[tuple[str, list[dict]]]:
        """The graph layer's alternatives to the reference's graph: (label, passes)."""
        return graph_alternatives(self.ep.problem, self.ep.cfg.backend)

    def target_options(self) -> list[tuple[str, dict]]:
        """Whole-module target decisions to judge after the graph layer: (label, target attributes)."""
        return target_alternatives(self.ep.cfg.backend, self.ep.problem)

    def start(self, kernel: str) -> dict | None:
        """Where the search of a kernel starts: its rule-based schedule (the rules' first strategy that
        applies and builds at the target's vector width, else at a narrower one), every layer filled, its
        loop layer counted as tried (judged with the start, it is not offered again once another loop
        layer is kept: matmulint_kws_pw's search spent one of its seven judgments on the start's VNNI tile).
        Strategies are tried in order and the first that builds is kept (not every variant built first:
        that compiled a dozen schedules per kernel to use one, ~15 s of an L3 model's wall time)."""
        from ..search.graph import graph_reference
        from ..search.rules import build_target, schedule_func

        func = graph_reference(self.ep.problem.id, self.graph).primfuncs()[kernel]
        target = build_target(self.ep.cfg.threads)
        for lanes in lanes_options(self.machine.lanes):
            fs = schedule_func(func, kernel, lanes, parallel=self.ep.cfg.threads > 1, target=target)
            if fs.traces:
                layers = dict(fs.traces)
                self._tried_loop(kernel, Variant("start", layers))
                return layers
        return None

    def _tried_loop(self, kernel: str, v: Variant) -> None:
        self.tried.setdefault((self.graph, kernel, "loop"), set()).add(layer_key(v, "loop"))

    def first_point(self, kernel: str) -> dict | None:
        """Where a kernel of a graph judged again on tuned kernels starts (leka._first_points): the cost
        model's cheapest point of its space that builds, every layer filled, counted as tried (not offered
        again as a loop decision); the rules' start for a kernel the model does not tile."""
        space = self.space(kernel)
        for v in space.alternatives("loop", {}, set()):
            self._tried_loop(kernel, v)
            return dict(v.layers)
        return self.start(kernel)

    def propose(self, req: LayerRequest) -> Proposal | None:
        tried = self.tried.setdefault((self.graph, req.kernel.name, req.layer), set())
        space = self.space(req.kernel.name)
        for v in space.alternatives(req.layer, req.accepted, tried):
            tried.add(layer_key(v, req.layer))
            est = space.estimate(v.label)
            label = v.label if est is None else f"{v.label} (model {est:.3g} cycles)"
            return Proposal(label, layers=dict(v.layers))
        return None


class LLMProposer:
    name = "llm"

    def __init__(self, episode: Episode, model: ModelClient):
        self.ep, self.model = episode, model
        self.n = 0

    def propose(self, req: LayerRequest) -> Proposal | None:
        pid = self.ep.problem.id
        prompt = render_prompt(
            "leka_layer",
            self.ep.problem,
            self.ep.cfg.backend,
            kernel=req.kernel.name,
            op_class=req.kernel.op_class,
            kernel_script=kernel_script(pid, req.accepted, req.kernel.name).strip(),
            accepted=list(req.accepted),
            layer=req.layer,
            feedback=req.feedback,
            profile_rows=req.profile,
        )
        self.n += 1
        label = f"llm {req.layer} #{self.n}"
        try:
            text = self.model.ask(prompt.system, prompt.user)
        except ModelError as e:
            return Proposal(label, error=f"the model call failed: {e}")
        try:
            return Proposal(label, code=kernel_only(schedule_code(text), req.kernel.name))
        except ParseError as e:
            return Proposal(label, error=f"your answer had no usable code block ({e})")
