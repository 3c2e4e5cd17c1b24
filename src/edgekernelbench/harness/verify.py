"""The judge's IR verifier: what a candidate module may contain before anything of it is built.

A candidate's IRModule (Relax functions + PrimFuncs) is compiled to native code and run in the judge's
process. `verify_module` inspects the IR only (no Python of the candidate runs here) and raises
`ForbiddenConstruct` -- naming the function and the construct, in one line -- for anything that could
reach outside the kernel's own buffers or run code that is not the module's:

- the module: only PrimFuncs and the Relax functions the reference has (`main`, `main_transform_params`);
  no module attributes or global infos (external modules, system-lib prefixes, virtual devices);
- Relax functions: calls only of `RELAX_OPS` (call_tir and its in-place / with-grad forms), each to a
  PrimFunc of the module; no packed or extern function (call_packed, call_dps_packed, call_pure_packed,
  call_builtin_with_ctx, ExternFunc), no call of another Relax function, no nested function or closure;
- no state from one call to the next: a PrimFunc may not store into a buffer that a call passes it as an
  input (a constant -- the executable's own storage --, a weight, a graph input, another kernel's
  output), directly or through a view of it; call_tir_inplace may write only the inputs it names, and
  only intermediate values (not a constant or a parameter of the function);
- PrimFuncs: every parameter a static-shape, compact, global buffer (no handle or scalar parameter);
  every Call's operator in `TIR_OPS` (math intrinsics and the like) -- anything else, including
  call_extern, call_pure_extern, (tvm_)call_packed/cpacked, address_of, tvm_access_ptr, tvm_struct_*,
  tvm_stack_*, buffer_data outside a buffer declaration, is rejected, so an operator TVM adds later is
  rejected too; LLVM intrinsics only from `LLVM_INTRINSICS` (pure register arithmetic);
  `reinterpret` never to or from a pointer; no pointer-typed value anywhere (handle variables,
  pointer arithmetic); a buffer declared over another buffer's data (T.decl_buffer(data=...)) or
  matched to a region of it (T.match_buffer) may not reach beyond it, nor sit at an explicit address;
  node kinds, function attributes and loop / block / allocation / attribute-statement annotations
  come from allow-lists too (`pragma_import_llvm` / `pragma_import_c` would link candidate-written
  LLVM IR or C); names and thread tags must be identifiers (code generators write them into source).

How the lists were derived: every reference of the suite (levels 1-3), the built-in candidates
(`reference_spec`, `rule_spec` materialized with `ir.replay.materialize`), the CPU dlight baseline
and `gpu_default_spec` for the GPU profiles were walked with `tvm_ffi.structural_walk` (TVM 0.27 has no
Python TIR visitor); what they use is on the lists (tests/adversarial/test_verifier.py checks that
they all pass). Added by hand, each harmless: the rest of TVM's scalar math intrinsics, bit and
vector-lane operators, GPU barriers and warp shuffles (no memory operand), the in-place forms of
call_tir, and the pure arithmetic LLVM intrinsics of TVM's own tensor intrinsics
(tvm.s_tir.tensor_intrin: x86 VNNI / AVX-512, AArch64 NEON, RISC-V V), whose loads and stores
(llvm.riscv.vle, SME ld1/st1) are left out.

Not covered here: an index past a buffer's end. TIR has no bounds checks, and it cannot be ruled out
from the IR alone (the references' gathers index with loaded data). Such an access stays inside the
judge process, which the OS sandbox confines, but can read or corrupt that process's memory.
"""

from __future__ import annotations

import re

from ..errors import ForbiddenConstruct

# ------------------------------------------------------------------------------------------ Relax
# Call operators a Relax function may use: the references (whole suite, legalized and fused) call only
# relax.call_tir; a full-module candidate is legalized before it gets here (ir/replay.py), so its
# graph-level ops (R.add, R.nn.conv2d, ...) are call_tir too. The in-place / with-grad forms call a
# module PrimFunc the same way. Everything else -- call_packed, call_dps_packed, call_pure_packed,
# call_inplace_packed, call_builtin_with_ctx, vm.* / memory.* / builtin.* allocation and views,
# invoke_closure, print, shape_of, ... -- is refused (the kernel-by-kernel executor cannot run them
# either).
RELAX_PRIMFUNC_CALLS = frozenset({"relax.call_tir", "relax.call_tir_inplace", "relax.call_tir_with_grad"})
RELAX_OPS = RELAX_PRIMFUNC_CALLS
RELAX_FUNC_ATTRS = frozenset({"num_input", "global_symbol"})  # what the references carry
MODULE_ATTRS: frozenset[str] = frozenset()  # the references have none (no external_mods, no system lib)

# IR node kinds a Relax function may contain (expressions, bindings, struct info, containers).
RELAX_NODE_TYPES = frozenset(
    {
        "Function",  # only the function itself: a nested one is refused below
        "SeqExpr",
        "DataflowBlock",
        "BindingBlock",
        "VarBinding",
        "MatchCast",
        "Var",
        "DataflowVar",
        "GlobalVar",  # checked: a PrimFunc of the module, called by call_tir
        "Call",  # checked: operator in RELAX_OPS
        "Tuple",
        "TupleGetItem",
        "GenericConst",
        "Constant",
        "ShapeExpr",
        "If",
        # types / struct info
        "TensorType",
        "ShapeType",
        "TupleType",
        "FuncType",
        "PrimType",
        "ObjectType",
        "AnyType",
        # values and containers
        "IntImm",
        "FloatImm",
        "DictAttrs",
        "Array",
        "Map",
        "String",
        "str",
        "int",
        "float",
        "bool",
        "Tensor",  # a constant's data
    }
)

# ------------------------------------------------------------------------------------------ TIR
# Call operators a PrimFunc may use. From the built-ins: if_then_else, isnan, erf, rsqrt, round, floor,
# exp, log, sqrt, sigmoid (references and rule-based schedules), reinterpret and call_llvm_pure_intrin
# (tensorize with TVM's intrinsics). Added: TVM's other scalar math intrinsics, bit counting, vector
# lane operators, fixed-point multiply, the `likely` / `assume` hints, and GPU barriers / warp shuffles.
_MATH = (
    *("exp", "exp2", "exp10", "log", "log10", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "fabs"),
    *("floor", "round", "nearbyint", "trunc", "pow", "fmod", "fma", "sin", "cos", "tan", "asin", "acos"),
    *("atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "hypot", "copysign", "ldexp"),
    *("nextafter", "isnan", "isinf", "isfinite", "popcount", "q_multiply_shift", "q_multiply_shift_per_axis"),
)
TIR_OPS = frozenset(
    {
        # math
        *(f"tirx.{n}" for n in _MATH),
        "prim.ceil",
        "prim.log2",
        "prim.clz",
        "prim.if_then_else",
        "prim.likely",
        "tirx.assume",
        "tirx.ignore_loop_partition",
        # vector lanes (register values only)
        "tirx.reinterpret",  # checked: neither side a pointer
        "tirx.vectorhigh",
        "tirx.vectorlow",
        "tirx.vectorcombine",
        "tirx.dp4a",
        # GPU: barriers and warp shuffles (no memory operand)
        "tirx.tvm_storage_sync",
        "tirx.tvm_warp_activemask",
        "tirx.tvm_warp_shuffle",
        "tirx.tvm_warp_shuffle_up",
        "tirx.tvm_warp_shuffle_down",
        "tirx.tvm_warp_shuffle_xor",
        # LLVM intrinsics: checked against LLVM_INTRINSICS
        "tirx.call_llvm_pure_intrin",
        "tirx.call_llvm_intrin",
    }
)
LLVM_CALLS = frozenset({"tirx.call_llvm_pure_intrin", "tirx.call_llvm_intrin"})
# Pure register arithmetic: TVM 0.27's tensor intrinsics (tvm/s_tir/tensor_intrin: x86.py, arm_cpu.py,
# riscv_cpu.py) without their memory accesses, and the FMA / min / max / abs / rounding conversion (lrint:
# ir/quantize_rint.py) LLVM itself has.
LLVM_INTRINSICS = frozenset(
    {
        "llvm.x86.avx512.vpdpbusd.512",
        "llvm.x86.avx512.vpdpbusd.256",
        "llvm.x86.avx512.vpdpbusd.128",
        "llvm.x86.avx512.pmaddubs.w.512",
        "llvm.x86.avx512.pmaddw.d.512",
        "llvm.x86.avx2.pmadd.ub.sw",
        "llvm.x86.avx2.pmadd.wd",
        "llvm.aarch64.neon.sdot",
        "llvm.aarch64.neon.udot",
        "llvm.aarch64.neon.usdot",
        "llvm.aarch64.neon.smull",
        "llvm.aarch64.neon.umull",
        "llvm.aarch64.neon.saddlp",
        "llvm.aarch64.neon.uaddlp",
        "llvm.aarch64.neon.addp",
        "llvm.riscv.vfmul",
        "llvm.riscv.vwmul",
        "llvm.riscv.vwmulsu",
        "llvm.riscv.vfredusum",
        "llvm.riscv.vwredsum",
        "llvm.riscv.vfmv.f.s",
        "llvm.riscv.vmv.x.s",
        "llvm.fma",
        "llvm.fmuladd",
        "llvm.minnum",
        "llvm.maxnum",
        "llvm.fabs",
        "llvm.sqrt",
        "llvm.lrint",
    }
)
# PrimFunc attributes: the references' and dlight's. Not e.g. "target" or "calling_conv" (they change
# how the function is compiled and called).
TIR_FUNC_ATTRS = frozenset({"global_symbol", "tirx.noalias", "s_tir", "op_pattern", "tirx.is_scheduled"})
# Loop and block annotations (and AttrStmt keys): the built-ins' and MetaSchedule's; not other pragmas
# (pragma_import_llvm / pragma_import_c link code written by the candidate).
LOOP_ANNOTATIONS = frozenset({"pragma_auto_unroll_max_step", "pragma_unroll_explicit", "pragma_vectorize"})
BLOCK_ANNOTATIONS = frozenset({"schedule_rule", "axis", "buffer_dim_align"})
ANNOTATION_PREFIXES = ("meta_schedule.", "software_pipeline_")  # read by TVM's schedule passes only
ATTR_STMT_KEYS = LOOP_ANNOTATIONS | {"thread_extent", "virtual_thread"}
ALLOC_ANNOTATIONS: frozenset[str] = frozenset()  # the built-ins' allocations carry none
PARAM_SCOPES = frozenset({"", "global"})
# Thread tags a loop may bind (GPU codegen writes them into the kernel's source).
THREAD_TAGS = frozenset(f"{axis}.{d}" for axis in ("blockIdx", "threadIdx", "vthread") for d in "xyz") | {
    "vthread"
}
# Names of PrimFuncs, their variables and buffers: C identifiers, plus "." (rfactor's "x.rf"; code
# generators write it as "_"). Source-emitting code generators (CUDA, OpenCL, Metal, WGSL, C) write
# names into the source they compile, otherwise unescaped: an IRModule loaded from JSON could carry
# code in a name. (The ONNX importer sanitizes graph names.)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")

TIR_NODE_TYPES = frozenset(
    {
        "PrimFunc",
        # statements
        "SeqStmt",
        "For",
        "While",
        "Break",
        "Continue",
        "IfThenElse",
        "Evaluate",
        "Bind",
        "LetStmt",
        "AssertStmt",
        "BufferStore",
        "AllocBuffer",
        "DeclBuffer",  # checked
        "AttrStmt",  # checked
        "SBlock",
        "SBlockRealize",
        "MatchBufferRegion",  # checked
        "IterVar",
        "Range",
        "TensorRegion",
        # expressions
        "Var",
        "IntImm",
        "FloatImm",
        "StringImm",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Mod",
        "FloorDiv",
        "FloorMod",
        "Min",
        "Max",
        "EQ",
        "NE",
        "LT",
        "LE",
        "GT",
        "GE",
        "And",
        "Or",
        "Not",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
        "BitwiseNot",
        "LShift",
        "RShift",
        "Select",
        "Cast",
        "Ramp",
        "Broadcast",
        "Shuffle",
        "Let",
        "Call",  # checked: operator in TIR_OPS
        "TensorLoad",
        # types
        "PrimType",
        "BufferType",  # checked: no explicit address
        "BufferRegionType",
        "TupleType",
        "FuncType",
        "StringType",
        # layouts (a buffer view or parameter must have a trivial one)
        "TileLayout",
        "Axis",
        "Iter",
        # values and containers
        "DictAttrs",
        "Array",
        "Map",
        "String",
        "str",
        "int",
        "float",
        "bool",
    }
)

# Operators whose first argument names the function they call: shown in messages.
_NAMED_CALLS = {
    "tirx.call_extern",
    "tirx.call_pure_extern",
    "tirx.tvm_call_packed",
    "tirx.tvm_call_cpacked",
    "tirx.tvm_call_packed_lowered",
    "tirx.tvm_call_cpacked_lowered",
    "tirx.tvm_call_trace_packed",
    *LLVM_CALLS,
}


def verify_module(mod, reference_module) -> None:
    """Raises ForbiddenConstruct for the first construct of `mod` that the judge does not build.
    `reference_module`: the problem's reference IRModule (which Relax functions may exist)."""
    import tvm
    from tvm import relax

    attrs = list(mod.attrs.keys()) if mod.attrs is not None else []
    bad = sorted(str(k) for k in attrs if str(k) not in MODULE_ATTRS)
    if bad:
        raise ForbiddenConstruct("module", "", f"module attribute {bad[0]!r} is not allowed")
    infos = getattr(mod, "global_infos", None)
    if infos is not None and len(infos):
        raise ForbiddenConstruct(
            "module", "", f"module global info {sorted(str(k) for k in infos)[0]!r} is not allowed"
        )
    ref_relax = sorted(
        gv.name_hint for gv, f in reference_module.functions.items() if isinstance(f, relax.Function)
    )
    prim = {gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    for gv, func in mod.functions.items():  # which functions, before what they do
        name = gv.name_hint
        if not _IDENTIFIER.match(str(name)):
            raise ForbiddenConstruct("function", repr(str(name)), "a function name must be an identifier")
        if isinstance(func, relax.Function) and name not in ref_relax:
            raise ForbiddenConstruct(
                "Relax function",
                name,
                f"not one of the reference's Relax functions ({', '.join(ref_relax)}); "
                "other functions must be PrimFuncs",
            )
        if not isinstance(func, (relax.Function, tvm.tirx.PrimFunc)):
            raise ForbiddenConstruct(
                "function", name, f"a {type(func).__name__} is not allowed in the module"
            )
    written: dict[str, list[int]] = {}
    calls: list[tuple[str, str, int, frozenset[int]]] = []
    for gv, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            check = PrimFuncCheck(gv.name_hint, func)
            check.run()
            written[gv.name_hint] = check.written_params()
        else:
            relax_check = RelaxCheck(gv.name_hint, func, prim)
            relax_check.run()
            calls += [(gv.name_hint, *c) for c in relax_check.calls]
    for caller, callee, n_inputs, inplace in calls:  # no kernel writes what it is given to read
        for i in written.get(callee, []):
            if i < n_inputs and i not in inplace:
                param = mod[callee].params[i]
                raise ForbiddenConstruct(
                    "PrimFunc",
                    callee,
                    f"stores into its input #{i} ('{param.name}'), which {caller} passes it to read: a "
                    "kernel writes only its outputs (a write into a constant, a weight or an input would "
                    "keep state from one call to the next)",
                )


# Target attributes a spec may merge into the backend's target (KernelSpec.decisions.target_attrs):
# ISA features and sizes that tune code generation. Not "kind", "host", "mtriple", "keys", "libs",
# "jit", "runtime", "system-lib", "link-params", ...: they change what is built and how it is loaded.
TARGET_ATTRS = frozenset(
    {
        "mcpu",
        "mattr",
        "num-cores",
        "opt-level",
        "max_num_threads",
        "thread_warp_size",
        "max_shared_memory_per_block",
        "max_threads_per_block",
    }
)


def verify_target_attrs(attrs: dict) -> None:
    """Raises ForbiddenConstruct for a target attribute off `TARGET_ATTRS` (or "fast-math*"), or a
    value that is not a plain string / number / list of strings."""
    for key, value in (attrs or {}).items():
        if str(key) not in TARGET_ATTRS and not str(key).startswith("fast-math"):
            raise ForbiddenConstruct("target", "", f"target attribute {str(key)!r} is not allowed")
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(v, (str, int, float, bool)) for v in items):
            raise ForbiddenConstruct("target", "", f"target attribute {str(key)!r} has a non-scalar value")


def _walk(node, callback) -> None:
    """Pre-order walk of every object reachable from `node` (TVM 0.27's structural walk: all reflected
    fields -- statements, expressions, types, attributes, annotations). `callback` returns True to skip
    the node's children (it has checked them itself)."""
    import tvm_ffi

    raised: list[BaseException] = []

    def visit(value):
        try:
            return tvm_ffi.WalkResult.SKIP if callback(value) else tvm_ffi.WalkResult.ADVANCE
        except Exception as e:  # an exception would cross the C++ walk as a RuntimeError: stop, re-raise
            raised.append(e)
            return tvm_ffi.VisitInterrupt(None)

    tvm_ffi.structural_walk(node, visit, order="pre")
    if raised:
        raise raised[0]


def _kind(value) -> str:
    return type(value).__name__


def _op_name(call) -> str | None:
    import tvm

    return call.op.name if isinstance(call.op, tvm.ir.Op) else None


def _script_name(op: str) -> str:
    """tirx.call_extern -> T.call_extern, prim.likely -> T.likely, relax.call_packed -> R.call_packed."""
    ns, _, rest = op.partition(".")
    return {"tirx": "T.", "prim": "T.", "relax": "R."}.get(ns, ns + ".") + rest


def _str_arg(call) -> str | None:
    """The called function's name for extern/packed/LLVM calls (a string, or an LLVM intrinsic id)."""
    import tvm
    import tvm_ffi

    if not len(call.args):
        return None
    first = call.args[0]
    if isinstance(first, tvm.ir.StringImm):
        return str(first.value)
    if isinstance(first, tvm.tirx.IntImm) and _op_name(call) in LLVM_CALLS:
        lookup = tvm_ffi.get_global_func("target.llvm_get_intrinsic_name", allow_missing=True)
        if lookup is not None and int(first.value) > 0:
            try:
                return str(lookup(int(first.value)))
            except Exception:  # an id LLVM does not know
                return f"<intrinsic id {int(first.value)}>"
        return f"<intrinsic id {int(first.value)}>"
    return None


def _is_pointer(value) -> bool:
    import tvm

    return isinstance(getattr(value, "ty", None), tvm.ir.PointerType)


def _allowed_annotation(key: str, names: frozenset) -> bool:
    return key in names or key.startswith(ANNOTATION_PREFIXES)


class RelaxCheck:
    def __init__(self, name: str, func, primfuncs: set[str]):
        self.name, self.func, self.primfuncs = name, func, primfuncs
        # per call of a PrimFunc: (callee, how many arguments are inputs, the in-place inputs it may write)
        self.calls: list[tuple[str, int, frozenset[int]]] = []

    def fail(self, construct: str):
        raise ForbiddenConstruct("Relax function", self.name, construct)

    def run(self) -> None:
        attrs = self.func.attrs
        for key in list(attrs.keys()) if attrs is not None else []:
            if str(key) not in RELAX_FUNC_ATTRS:
                self.fail(f"function attribute {str(key)!r} is not allowed")
        symbol = attrs.get("global_symbol") if attrs is not None else None
        if symbol is not None and not _IDENTIFIER.match(str(symbol)):
            self.fail(f"global_symbol {str(symbol)!r} is not an identifier")
        _walk(self.func, self.visit)

    def visit(self, v) -> bool:
        from tvm import relax

        kind = _kind(v)
        if kind == "ExternFunc":
            self.fail(f"extern function {str(getattr(v, 'global_symbol', '?'))!r} is not allowed")
        if kind not in RELAX_NODE_TYPES:
            self.fail(f"{kind} is not allowed")
        if isinstance(v, relax.Function) and not v.same_as(self.func):
            self.fail("a nested function (closure) is not allowed")
        if kind == "GlobalVar" and v.name_hint not in self.primfuncs:
            self.fail(f"reference to {v.name_hint!r}, which is not a PrimFunc of the module")
        if kind == "Call":
            op = _op_name(v)
            if op is None and _kind(v.op) == "ExternFunc":  # what R.call_packed makes
                self.fail(f"R.call_packed({str(v.op.global_symbol)!r}) is not allowed")
            if op is None:
                callee = getattr(v.op, "name_hint", None) or ""
                self.fail(
                    f"a direct call of {_kind(v.op)} {str(callee)!r} is not allowed (PrimFuncs: R.call_tir)"
                )
            if op not in RELAX_OPS:
                named = _str_arg(v) if op in _NAMED_CALLS else None
                extern = v.args[0] if len(v.args) else None
                if named is None and _kind(extern) == "ExternFunc":
                    named = str(extern.global_symbol)
                what = f"{_script_name(op)}({named!r})" if named else _script_name(op)
                self.fail(f"{what} is not allowed (Relax operators allowed: {', '.join(sorted(RELAX_OPS))})")
            callee = v.args[0] if len(v.args) else None
            if _kind(callee) != "GlobalVar" or callee.name_hint not in self.primfuncs:
                self.fail(f"{_script_name(op)} of {callee!s:.60} (not a PrimFunc of the module)")
            self.record_call(v, op, callee.name_hint)
        return False

    def record_call(self, call, op: str, callee: str) -> None:
        from tvm import relax

        args = call.args[1] if len(call.args) > 1 else None
        fields = list(args.fields) if isinstance(args, relax.Tuple) else []
        inplace: frozenset[int] = frozenset()
        if op == "relax.call_tir_inplace":
            inplace = frozenset(int(i) for i in call.attrs.inplace_indices if int(i) >= 0)
            params = set(self.func.params)
            for i in sorted(inplace):
                source = self.source(fields[i]) if i < len(fields) else None
                if source is None or _kind(source) == "GenericConst" or source in params:
                    self.fail(
                        f"call_tir_inplace of {callee!r} writes its input #{i}, which is not an "
                        "intermediate value (a constant or a parameter of the function would keep state)"
                    )
        self.calls.append((callee, len(fields), inplace))

    def source(self, expr):
        """What a Relax value is bound to, through aliases (`a = b`) and tuple items (`w = params[0]`):
        a parameter of the function, a constant, or the call that made it."""
        from tvm import relax

        if not hasattr(self, "_bound"):
            self._bound = {
                b.var: b.value
                for block in self.func.body.blocks
                for b in block.bindings
                if isinstance(b, relax.VarBinding)
            }
        seen = 0
        while seen < 10_000:
            seen += 1
            if isinstance(expr, relax.TupleGetItem):
                expr = expr.tuple_value
            elif isinstance(expr, relax.Var) and expr in self._bound:
                expr = self._bound[expr]
            else:
                return expr
        return None


class PrimFuncCheck:
    def __init__(self, name: str, func):
        self.name, self.func = name, func
        self.declared: dict = {}  # buffer var -> its footprint in bytes (None: not static)
        self.alias: dict = {}  # a view (decl_buffer over another's data, match_buffer) -> the buffer it is of
        self.written: set = set()  # the buffers stored into, each as the buffer it is a view of

    def root(self, buf):
        while buf in self.alias:
            buf = self.alias[buf]
        return buf

    def written_params(self) -> list[int]:
        """The indices of the parameters this PrimFunc stores into (directly or through a view)."""
        return [i for i, p in enumerate(self.func.params) if p in self.written]

    def fail(self, construct: str):
        raise ForbiddenConstruct("PrimFunc", self.name, construct)

    def run(self) -> None:
        import tvm

        f = self.func
        attrs = f.attrs
        for key in list(attrs.keys()) if attrs is not None else []:
            if str(key) not in TIR_FUNC_ATTRS:
                self.fail(f"function attribute {str(key)!r} is not allowed")
        symbol = attrs.get("global_symbol") if attrs is not None else None
        if symbol is not None and not _IDENTIFIER.match(str(symbol)):
            self.fail(f"global_symbol {str(symbol)!r} is not an identifier")
        for i, p in enumerate(f.params):
            ty = p.ty
            if not isinstance(ty, tvm.tirx.BufferType):
                what = "a pointer (T.handle)" if isinstance(ty, tvm.ir.PointerType) else f"a {ty}"
                self.fail(f"parameter {i} ('{p.name}') is {what}, not a buffer")
            if str(ty.storage_scope) not in PARAM_SCOPES:
                self.fail(f"parameter '{p.name}' is in storage scope {str(ty.storage_scope)!r}, not global")
            if not _is_zero(ty.elem_offset) or len(ty.strides) and not _compact(ty):
                self.fail(f"parameter '{p.name}' has an element offset or strides (a view, not a tensor)")
            self.declared[p] = self.footprint(p, "parameter")
        self.analyzer = tvm.sym.Analyzer()
        _walk(f, self.collect)  # declarations and loop domains, before uses
        _walk(f, self.visit)

    # ----------------------------------------------------------------------------- declarations
    def footprint(self, buf, what: str) -> int:
        """Bytes from the start of the buffer's data to the end of its last element; fails when that is
        not static, the layout is not trivial, or the buffer sits at an explicit address."""
        ty = buf.ty
        if ty.allocated_addr is not None and len(ty.allocated_addr):
            self.fail(f"{what} '{buf.name}' at an explicit address is not allowed")
        layout = ty.layout
        if layout is not None and not layout.is_trivial():
            self.fail(f"{what} '{buf.name}' has a non-trivial layout ({layout})")
        shape = [_const(d) for d in ty.shape]
        strides = [_const(s) for s in ty.strides] if len(ty.strides) else _compact_strides(shape)
        offset = 0 if ty.elem_offset is None else _const(ty.elem_offset)
        if None in shape or None in strides or offset is None:
            self.fail(f"{what} '{buf.name}' has a shape, strides or offset that is not a constant")
        if any(s < 0 for s in shape + strides) or offset < 0:
            self.fail(f"{what} '{buf.name}' has a negative shape, stride or offset")
        if 0 in shape:
            return 0
        last = offset + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
        return (last + 1) * _dtype_bytes(ty.dtype)

    def collect(self, v) -> bool:
        import tvm
        from tvm import s_tir, tirx

        if isinstance(v, tirx.AllocBuffer):
            self.declared[v.buffer] = None
        elif isinstance(v, s_tir.SBlock):
            for b in v.alloc_buffers:
                self.declared[b] = None
            for it in v.iter_vars:
                self._bind(it.var, it.dom)
            for m in v.match_buffers:
                self.declared[m.buffer] = None
        elif isinstance(v, tirx.DeclBuffer):
            self.declared[v.buffer] = None
        elif isinstance(v, tirx.For):
            self._bind(v.loop_var, tvm.ir.Range.from_min_extent(v.min, v.extent))
        return False

    def _bind(self, var, dom) -> None:
        if _const(dom.min) is not None and _const(dom.extent) is not None:
            self.analyzer.bind(var, dom)

    # ----------------------------------------------------------------------------- the walk
    def visit(self, v) -> bool:
        from tvm import s_tir, tirx

        kind = _kind(v)
        if kind not in TIR_NODE_TYPES and kind != "PointerType":
            self.fail(f"{kind} is not allowed")
        if kind == "Call":
            self.check_call(v)  # names the operator first
        if kind == "Var" and not _IDENTIFIER.match(str(v.name)):
            self.fail(f"variable or buffer name {str(v.name)!r} is not an identifier")
        if kind == "PointerType" or _is_pointer(v):
            what = f"'{v.name}' " if kind == "Var" else ""
            self.fail(f"a pointer-typed value {what}(T.handle) is not allowed: no raw addresses or pointers")
        if kind == "BufferType":
            if v.allocated_addr is not None and len(v.allocated_addr):
                self.fail("a buffer at an explicit address (allocated_addr) is not allowed")
        elif kind == "DeclBuffer":
            self.check_view(v)
            _walk(v.buffer, self.visit)
            return True  # its data (a pointer) was checked by check_view
        elif isinstance(v, tirx.For):
            for key in v.annotations:
                if not _allowed_annotation(str(key), LOOP_ANNOTATIONS):
                    self.fail(f"loop annotation {str(key)!r} is not allowed")
        elif kind == "AllocBuffer":
            for key in getattr(v, "annotations", None) or {}:
                if str(key) not in ALLOC_ANNOTATIONS:
                    self.fail(f"allocation annotation {str(key)!r} on '{v.buffer.name}' is not allowed")
        elif kind == "IterVar":
            tag = str(v.thread_tag or "")
            if tag and tag not in THREAD_TAGS:
                self.fail(f"thread tag {tag!r} is not allowed")
        elif kind in ("Bind", "LetStmt", "Let") and _kind(v.var.ty) not in ("PrimType", "PointerType"):
            self.fail(f"'{v.var.name}' bound to a {_kind(v.var.ty)}: only scalar values can be bound")
        elif isinstance(v, tirx.AttrStmt):
            if str(v.attr_key) not in ATTR_STMT_KEYS:
                self.fail(f"T.attr {str(v.attr_key)!r} is not allowed")
        elif isinstance(v, s_tir.SBlock):
            for key in v.annotations:
                if not _allowed_annotation(str(key), BLOCK_ANNOTATIONS):
                    self.fail(f"block annotation {str(key)!r} in block '{v.name_hint}' is not allowed")
            for m in v.match_buffers:
                self.check_match(m)
        elif kind in ("TensorLoad", "BufferStore", "TensorRegion"):
            buf = v.buffer if kind == "BufferStore" else v.source
            if buf not in self.declared:
                self.fail(f"buffer '{getattr(buf, 'name', buf)}' is used but never declared")
            if kind == "BufferStore":
                self.written.add(self.root(buf))
        return False

    def check_call(self, call) -> None:
        op = _op_name(call)
        if op is None:
            callee = str(getattr(call.op, "name_hint", call.op))
            self.fail(f"a call of {_kind(call.op)} {callee!r} is not allowed")
        named = _str_arg(call) if op in _NAMED_CALLS else None
        if op not in TIR_OPS:
            what = f"{_script_name(op)}({named!r})" if named else _script_name(op)
            self.fail(f"{what} is not allowed")
        if op in LLVM_CALLS and named not in LLVM_INTRINSICS:
            self.fail(f"{_script_name(op)}({named!r}) is not allowed (LLVM intrinsic not on the list)")
        if op == "tirx.reinterpret" and (_is_pointer(call) or any(_is_pointer(a) for a in call.args)):
            self.fail("T.reinterpret to or from a pointer is not allowed")

    def check_view(self, decl) -> None:
        """T.decl_buffer(..., data=B.data): B must be a buffer of this function, and the view may not
        reach past B's last byte."""
        data = decl.data
        buf = decl.buffer
        if _kind(data) != "Call" or _op_name(data) != "tirx.buffer_data" or len(data.args) != 1:
            self.fail(f"buffer '{buf.name}' declared over {data!s:.60}: a view must take a buffer's data")
        src = data.args[0]
        if src not in self.declared:
            self.fail(
                f"buffer '{buf.name}' declared over the data of '{src.name}', not a buffer of this function"
            )
        size = self.footprint(buf, "buffer")
        src_size = self.declared.get(src)
        if src_size is None:
            src_size = self.footprint(src, "buffer")
        if size > src_size:
            self.fail(
                f"buffer '{buf.name}' declared over the data of '{src.name}' reaches {size} bytes, "
                f"'{src.name}' has {src_size}"
            )
        self.declared[buf] = size
        self.alias[buf] = src

    def check_match(self, match) -> None:
        """T.match_buffer(B[region], shape): the region inside B, the matched buffer no larger."""
        buf, region = match.buffer, match.source
        src = region.source
        if src not in self.declared:
            self.fail(f"buffer '{buf.name}' matched to '{src.name}', which is not declared here")
        ty, src_ty = buf.ty, src.ty
        if len(ty.allocated_addr or []):
            self.fail(f"buffer '{buf.name}' at an explicit address is not allowed")
        shape = [_const(d) for d in ty.shape]
        src_shape = [_const(d) for d in src_ty.shape]
        extents = [_const(r.extent) for r in region.region]
        if None in shape or None in extents or None in src_shape:
            self.fail(f"buffer '{buf.name}' matched to a region of '{src.name}' that is not of constant size")
        if _dtype_bytes(ty.dtype) != _dtype_bytes(src_ty.dtype):
            self.fail(f"buffer '{buf.name}' matched to '{src.name}' with another element size")
        if _prod(shape) > _prod(extents):
            self.fail(
                f"buffer '{buf.name}' ({_prod(shape)} elements) matched to a region of "
                f"'{src.name}' of {_prod(extents)} elements"
            )
        for dim, (r, n, e) in enumerate(zip(region.region, src_shape, extents, strict=True)):
            bound = self.analyzer.const_int_bound(r.min)
            if bound.min_value < 0 or bound.max_value + e > n:
                self.fail(
                    f"buffer '{buf.name}' matched to '{src.name}' dimension {dim} "
                    f"[{r.min}, +{e}), which may leave [0, {n})"
                )
        self.alias[buf] = src


def _const(x) -> int | None:
    import tvm

    if isinstance(x, int):
        return x
    if isinstance(x, tvm.tirx.IntImm):
        return int(x.value)
    return None


def _is_zero(x) -> bool:
    return x is None or _const(x) == 0


def _compact_strides(shape: list) -> list:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc = acc * n if n is not None and acc is not None else None
    return list(reversed(out))


def _compact(ty) -> bool:
    shape = [_const(d) for d in ty.shape]
    return [_const(s) for s in ty.strides] == _compact_strides(shape)


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _dtype_bytes(dtype) -> int:
    import tvm

    t = tvm.DataType(str(getattr(dtype, "dtype", dtype)))
    return max(1, (t.bits * t.lanes + 7) // 8)
