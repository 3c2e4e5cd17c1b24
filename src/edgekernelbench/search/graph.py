"""The graph layer of the builtin proposer: a problem's alternative graphs, derived from its operators.

A graph decision is a list of Relax passes (`Decisions.graph["passes"]`, replayed by
`ir.replay.apply_graph_decisions` before legalization and fusion); what they add that depends on weights
only (e.g. a kernel re-laid out) is lifted into `main_transform_params` and runs once, at load time.
Today's alternatives: convolutions channels last (2-D: NHWC with HWIO kernels, 1-D: NWC with WIO; after
DropoutAsIdentity where the model has Dropout, ir/dropout.py; the output channel, contiguous in the output and
in the re-laid-out weights, becomes the vector axis; strided, small-spatial and odd-length convolutions then
vectorize without gathers or partial vectors), at the price of transposing the activations where the graph
enters and leaves that layout; depthwise convolutions whose sums start at their bias (ir/bias_init.py: no add
in the epilogue); fast math (approximations of softmax, exp, erf, tanh that vectorize); the activations'
transposes as tiles through registers (ir/block_transpose.py). A model with ONNX Clip gets channels last after
ClipAsOps (ir/clip_ops.py: the importer's clamp kernels as Relax operators, which ConvertLayout carries the
layout through and FuseOps fuses into the convolution). LEKA tries them one after the other, each on top of
those already kept. Packed layouts (NCHW[x]c) are not offered: TVM 0.27's Relax has no legalization for conv2d
in them (the op stays high-level and cannot be built).

Beside the graphs, one whole-module target decision (`target_alternatives`, `Decisions.target_attrs`):
LLVM's fast-math flags for every kernel. Measured on softmax_mobilebert_attn's rows (512 x 128, after
FastMathTransform): 58 -> 33 us standalone; any one flag alone, or all but one, kept it at 41-57 us (max and
min without NaN tests, the division by a reciprocal, horizontal sums as trees). It assumes the inputs hold
no NaN or infinity: a kernel that tests for NaN (ONNX Clip's) no longer does.

A graph is named by its key (`graph_key`: the passes as canonical JSON; "" is the reference's graph), and
the kernels, schedule spaces and scripts of search/ take that key."""

from __future__ import annotations

import functools
import json

# channels last: conv2d in NHWC with HWIO weights, conv1d in NWC with WIO weights
NHWC = [
    {
        "name": "ConvertLayout",
        "args": {"desired_layouts": {"relax.nn.conv2d": ["NHWC", "HWIO"], "relax.nn.conv1d": ["NWC", "WIO"]}},
    }
]
# ONNX Clip as Relax maximum / minimum (ir/clip_ops.py), before channels last: ConvertLayout then carries
# the layout through the clamps (ReLU6) instead of transposing around each one
CLIP_AS_OPS = [{"name": "ClipAsOps", "args": {}}]
# ONNX Dropout as the identity it is at inference (ir/dropout.py), before channels last: Relax's dropout
# returns a tuple (output, mask), on which ConvertLayout fails for the whole graph
DROPOUT_AS_IDENTITY = [{"name": "DropoutAsIdentity", "args": {}}]
FAST_MATH = [{"name": "FastMathTransform", "args": {}}]
# integer GEMMs (MatMulInteger) as u8 x s8 dot products on packed weights (ir/int8_dot.py)
INT8_DOT = [{"name": "Int8DotProduct", "args": {}}]
# the natural logarithm as a polynomial that vectorizes (ir/fast_log.py): LLVM calls logf per element
FAST_LOG = [{"name": "FastLog", "args": {}}]
# 8-bit quantize as one rounding conversion (llvm.lrint) between clamps, bit for bit (ir/quantize_rint.py)
QUANTIZE_RINT = [{"name": "QuantizeRint", "args": {}}]
# grouped (depthwise) convolutions whose sums start at their bias: the epilogue's add gone (ir/bias_init.py)
BIAS_INIT = [{"name": "BiasInit", "args": {}}]
# float GEMMs by a weight (channels-last pointwise convolutions, matmuls) on weight panels packed once at
# load (ir/packed_gemm.py): each panel one contiguous stream where a weight row is read a few lanes at a time
PACKED_WEIGHTS = [{"name": "PackedWeights", "args": {}}]
# the activations' layout transposes (channels last's, the model's own) as tiles through registers: vector
# loads, rounds of shuffles, vector stores (ir/block_transpose.py)
BLOCK_TRANSPOSE = [{"name": "BlockTranspose", "args": {}}]
# ONNX operators whose Relax form FastMathTransform replaces (softmax, exp, erf, tanh) or imports to one
FAST_MATH_OPS = {"Softmax", "Exp", "Erf", "Tanh", "Gelu"}


def graph_key(passes: list[dict] | None) -> str:
    return json.dumps(passes, sort_keys=True) if passes else ""


def graph_passes(key: str) -> list[dict]:
    return json.loads(key) if key else []


def graph_alternatives(problem, backend=None) -> list[tuple[str, list[dict]]]:
    """(label, passes) for each graph change worth judging, in order: channels last when the model has 1-D or
    2-D convolutions (ONNX Conv with a 3-D or 4-D weight), after ClipAsOps when it has Clip; integer GEMMs as
    u8 x s8 dot products on weights packed for VNNI, when the model has MatMulInteger or a quantized pointwise
    convolution and `backend`'s target has VNNI (after channels last: a pointwise convolution in NHWC needs no
    transposes); 8-bit quantize as one rounding conversion between clamps (ir/quantize_rint.py) when the
    model has QuantizeLinear and the target is an x86 CPU, after the dot products (their pass rewrites
    quantize operators); grouped convolutions with a bias starting their sums at it (ir/bias_init.py),
    after the rounding (its scale folding looks for the add); fast math (TVM's FastMathTransform: softmax,
    exp, erf and tanh as polynomial approximations that vectorize, where LLVM's libm calls stay scalar) when
    it has those functions -- the judge's tolerance decides whether an approximation is close enough; and
    the natural logarithm as a polynomial within an ulp of float64 (ir/fast_log.py) when it has a Log: LLVM
    calls logf once per element of a vector (logmel_frontend_yamnet's mel matmul with its log epilogue: 43 ->
    31 us standalone); last, float GEMMs by a constant weight (pointwise convolutions, after channels last;
    matmuls) on weight panels packed once at load (ir/packed_gemm.py), when the model has one with more than
    one panel of columns; very last, the activations' transposes (channels last's, where the graph enters and
    leaves it, and the model's own) as tiles of vector loads, shuffles and stores (ir/block_transpose.py), on
    an LLVM target: conv2d_yamnet_stem's output transpose, 13.2 us in TVM's loop, 6.3 us so."""
    nodes = problem.model.graph.node
    out = []
    if any(n.op_type == "Conv" and _weight_rank(problem.model.graph, n.input[1]) in (3, 4) for n in nodes):
        clamps = any(n.op_type == "Clip" for n in nodes)
        dropout = any(n.op_type == "Dropout" for n in nodes)
        label = "NHWC / HWIO, NWC / WIO weights" + ("; clamps as operators" if clamps else "")
        label += "; Dropout as the identity" if dropout else ""
        before = (DROPOUT_AS_IDENTITY if dropout else []) + (CLIP_AS_OPS if clamps else [])
        out.append((f"graph: convolutions channels last ({label})", before + NHWC))
    if backend is not None and _int8_gemms(problem.model.graph) and _has_vnni(backend):
        out.append(("graph: integer GEMMs as u8 x s8 dot products on packed weights (VNNI)", INT8_DOT))
    if backend is not None and any(n.op_type == "QuantizeLinear" for n in nodes) and _is_x86(backend):
        out.append(("graph: quantize as one rounding conversion (lrint; the same values)", QUANTIZE_RINT))
    if any(_grouped_conv_with_bias(n) for n in nodes):
        out.append(("graph: depthwise convolutions start from their bias (no epilogue add)", BIAS_INIT))
    if any(n.op_type in FAST_MATH_OPS for n in nodes):
        out.append(("graph: fast math (softmax, exp, erf, tanh)", FAST_MATH))
    if any(n.op_type == "Log" for n in nodes):
        out.append(("graph: log as a polynomial that vectorizes (within 1 ulp)", FAST_LOG))
    if _packable_gemms(problem.model.graph):
        out.append(("graph: float GEMMs on packed weight panels (re-laid out once)", PACKED_WEIGHTS))
    channels_last = any(NHWC[0] in passes for _, passes in out)
    transposes = channels_last or any(n.op_type == "Transpose" for n in nodes)
    if transposes and backend is not None and _llvm_target(backend, lambda _target: True):  # any LLVM CPU
        out.append(
            ("graph: layout transposes as register tiles (vector loads, shuffles, stores)", BLOCK_TRANSPOSE)
        )
    return out


# LLVM's fast-math flags for every kernel of the module (Decisions.target_attrs): no NaN or infinity assumed,
# reassociation (horizontal sums as trees), reciprocals, contraction. All of them: on softmax's rows the
# subsets measured 1.2-1.7x slower than the whole set (min/max without NaN tests, division by a reciprocal).
FAST_MATH_FLAGS = {"fast-math": True}


def target_alternatives(backend, problem=None) -> list[tuple[str, dict]]:
    """(label, target attributes) for each whole-module target decision worth judging on `backend` (a
    profile or its name) for `problem`: LLVM's fast-math flags on a CPU target, unless the model quantizes
    (QuantizeLinear). A module-wide decision, judged like a graph change: the judge's oracle and tolerance
    decide whether the kernels stay correct (a kernel that tests for NaN no longer does). Not for quantized
    models: a quantize rounds to a grid, and a reciprocal or a reassociated sum in front of it moves values
    next to a tie to the other step (dscnn_kws_int8's average pool, sum / 120 as sum * (1 / 120): correct on
    the search's inputs, one int8 step off on the final judge's; int8 tolerances admit no step)."""
    from ..backends.registry import as_profile

    if (as_profile(backend).target or {}).get("kind") != "llvm":
        return []
    if problem is not None and any(n.op_type == "QuantizeLinear" for n in problem.model.graph.node):
        return []
    return [("target: LLVM fast math, all kernels (no NaN/Inf, reassociation, reciprocals)", FAST_MATH_FLAGS)]


def _grouped_conv_with_bias(node) -> bool:
    """An ONNX Conv with a bias input and group > 1 (a depthwise convolution): BiasInit's pattern."""
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    return node.op_type == "Conv" and len(node.input) > 2 and bool(node.input[2]) and group > 1


def _int8_gemms(graph) -> bool:
    """Whether the model has a GEMM the Int8DotProduct pass rewrites: MatMulInteger, or a dense layer or
    pointwise convolution (a 1x1 weight, one group) of a quantized (QDQ) model, its weight behind
    DequantizeLinear -- with whole vectors of output columns (16) and whole groups of 4 along K."""
    from ..ir.int8_dot import GROUP, LANES

    inits = {t.name: list(t.dims) for t in graph.initializer}
    producers = {o: n for n in graph.node for o in n.output}

    def deq_weight(name):
        node = producers.get(name)
        return inits.get(node.input[0]) if node is not None and node.op_type == "DequantizeLinear" else None

    def fits(k: int, n: int) -> bool:
        return k % GROUP == 0 and n % LANES == 0

    for n in graph.node:
        if n.op_type == "MatMulInteger":
            w = inits.get(n.input[1])
            if w is not None and len(w) == 2 and fits(*w):
                return True
            if w is None and _weight_rank(graph, n.input[1], LAYOUT_OPS) is not None:
                return (
                    True  # a weight reshaped or transposed in the graph (im2col): the pass checks its shape
                )
        elif n.op_type in ("MatMul", "Gemm"):
            w = deq_weight(n.input[1])
            trans = next((a.i for a in n.attribute if a.name == "transB"), 0)
            if w is not None and len(w) == 2 and fits(*(w[::-1] if trans else w)):
                return True
        elif n.op_type == "Conv" and next((a.i for a in n.attribute if a.name == "group"), 1) == 1:
            w = deq_weight(n.input[1])
            if w is not None and len(w) == 4 and w[2:] == [1, 1] and fits(w[1], w[0]):
                return True
    return False


def _packable_gemms(graph) -> bool:
    """Whether the model has a GEMM the PackedWeights pass rewrites: a pointwise convolution (a 1x1 weight,
    one group) or a MatMul / Gemm whose weight is a constant, with more than one panel of output columns."""
    from ..ir.packed_gemm import panel_width

    inits = {t.name: list(t.dims) for t in graph.initializer}
    for n in graph.node:
        w = inits.get(n.input[1]) if len(n.input) > 1 else None
        if w is None:
            continue
        if n.op_type == "Conv" and next((a.i for a in n.attribute if a.name == "group"), 1) == 1:
            if len(w) == 4 and w[2:] == [1, 1] and panel_width(w[0]):
                return True
        elif n.op_type in ("MatMul", "Gemm") and len(w) == 2:
            trans = next((a.i for a in n.attribute if a.name == "transB"), 0)
            if panel_width(w[0] if trans else w[1]):
                return True
    return False


def _has_vnni(backend) -> bool:
    """Whether `backend`'s (a profile or its name) target has VNNI ("native": this machine's CPU)."""
    from ..ir.int8_dot import target_has_vnni

    return _llvm_target(backend, target_has_vnni)


def _is_x86(backend) -> bool:
    """Whether `backend`'s (a profile or its name) target is an x86 CPU."""
    from ..ir.quantize_rint import target_is_x86

    return _llvm_target(backend, target_is_x86)


def _llvm_target(backend, test) -> bool:
    """Whether `backend`'s target is an LLVM one for which `test(its resolved Target)` holds."""
    from ..backends.host import resolve_target
    from ..backends.registry import as_profile

    profile = as_profile(backend)
    return (profile.target or {}).get("kind") == "llvm" and test(resolve_target(profile))


LAYOUT_OPS = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten")


def _weight_rank(graph, name: str, through: tuple = ()) -> int | None:
    """The rank of a constant weight: an initializer, or one behind the casts and DequantizeLinear of a
    quantized (QDQ) model (and the ops in `through`); None for a tensor computed from the inputs."""
    inits = {t.name: len(t.dims) for t in graph.initializer}
    producers = {o: n for n in graph.node for o in n.output}
    for _ in range(4):
        if name in inits:
            return inits[name]
        node = producers.get(name)
        if node is None or node.op_type not in ("DequantizeLinear", "Cast", "Identity", *through):
            return None
        name = node.input[0]
    return None


@functools.lru_cache(maxsize=32)
def graph_reference(problem_id: str, key: str = ""):
    """The reference of `problem_id` with graph `key` applied (the reference itself for "")."""
    from ..problems import get_problem
    from ..reference import build_reference

    problem = get_problem(problem_id)
    ref = build_reference(problem)
    return with_graph(problem, ref, graph_passes(key)) if key else ref


def same_graph(problem_id: str, key_a: str, key_b: str) -> bool:
    """Whether graphs `key_a` and `key_b` of a problem are one module (a graph change that rewrote nothing:
    BlockTranspose where no transpose holds a whole tile, resnet8_ic's 3-channel input), structurally."""
    import tvm_ffi

    if key_a == key_b:
        return True
    a, b = graph_reference(problem_id, key_a).module, graph_reference(problem_id, key_b).module
    return bool(tvm_ffi.structural_equal(a, b))


def with_graph(problem, reference, passes: list[dict]):
    """`reference` (the problem's) rebuilt with graph passes (ir.replay.apply_graph_decisions: what depends
    on weights only is lifted into main_transform_params); raises DecisionError when they do not apply."""
    from ..ir.replay import apply_graph_decisions
    from ..reference import Reference

    mod = apply_graph_decisions(problem, passes)
    ref = reference
    return Reference(ref.problem_id, mod, ref.input_names, ref.param_names, ref.params)
