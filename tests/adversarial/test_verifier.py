"""The judge's IR verifier (harness/verify.py): attacks written at the IR level are refused with one line
that names the function and the construct; every reference and built-in candidate passes.

The module texts below are parsed here (the TVMScript parser evaluates Python, but these are ours);
in the harness a candidate's text is parsed by the builder, and the judge verifies the IR it hands back."""

from __future__ import annotations

import time

import pytest

from edgekernelbench.errors import ForbiddenConstruct
from edgekernelbench.harness.verify import verify_module
from edgekernelbench.ir.replay import materialize
from edgekernelbench.ir.spec import KernelSpec
from edgekernelbench.problems import get_problem, select
from edgekernelbench.reference import build_reference

PROBLEM = "L1/tiny_scale_add"
SIG = (
    'x: T.Buffer((4, 8), "float32"), w1: T.Buffer((8,), "float32"), b3: T.Buffer((8,), "float32"), '
    'out: T.Buffer((4, 8), "float32")'
)
RIGHT = "for i, j in T.grid(4, 8):\n    out[i, j] = x[i, j] * w1[j] + b3[j]"
CALL = 'gv = R.call_tir(cls.fused_multiply_add, (x, w1, b3), out_ty=R.Tensor((4, 8), dtype="float32"))'
MAIN_SIG = (
    'x: R.Tensor((4, 8), dtype="float32"), w1: R.Tensor((8,), dtype="float32"), '
    'b3: R.Tensor((8,), dtype="float32")'
)


def prim(
    body: str, sig: str = SIG, name: str = "fused_multiply_add", deco: str = "T.prim_func(private=True)"
):
    """A module text with one PrimFunc that replaces the reference's kernel."""
    lines = "\n".join("        " + ln for ln in body.strip().splitlines())
    return f"@I.ir_module\nclass Module:\n    @{deco}\n    def {name}({sig}):\n{lines}\n"


def full(main_body: str, extra: str = "") -> str:
    """A full module: main (with `main_body`), the kernel, and `extra` functions."""
    k = "\n".join("        " + ln for ln in RIGHT.strip().splitlines())
    m = "\n".join("        " + ln for ln in main_body.strip().splitlines())
    return (
        "@I.ir_module\nclass Module:\n"
        f"    @T.prim_func(private=True)\n    def fused_multiply_add({SIG}):\n{k}\n\n"
        f"    @R.function\n    def main({MAIN_SIG}):\n        cls = Module\n{m}\n{extra}"
    )


def module_of(text: str, problem: str = PROBLEM):
    """The candidate's module as the judge receives it (materialize: parsed; a full module legalized)."""
    p = get_problem(problem)
    ref = build_reference(p)
    return materialize(KernelSpec(problem=problem, module=text), p, ref), ref


def refused(text: str) -> str:
    mod, ref = module_of(text)
    with pytest.raises(ForbiddenConstruct) as e:
        verify_module(mod, ref.module)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def accepted(text: str) -> None:
    mod, ref = module_of(text)
    verify_module(mod, ref.module)


# ------------------------------------------------------------------------------------ PrimFunc attacks
PRIM_ATTACKS = [
    (
        "call_extern system",
        'T.evaluate(T.call_extern("int32", "system", "touch /tmp/ekb-pwned"))\n' + RIGHT,
        "T.call_extern('system') is not allowed",
    ),
    (
        "call_pure_extern",
        'for i, j in T.grid(4, 8):\n    out[i, j] = T.call_pure_extern("float32", "getpid") + x[i, j]',
        "T.call_pure_extern('getpid')",
    ),
    (
        "call_packed of a global function",
        'T.evaluate(T.call_packed("ffi.GetGlobalFunc", "x"))\n' + RIGHT,
        "call_packed",
    ),
    ("call_cpacked", 'T.evaluate(T.call_cpacked("TVMBackendAllocWorkspace", 1))\n' + RIGHT, "call_cpacked"),
    (
        "LLVM intrinsic off the list (no pointer argument)",
        'T.evaluate(T.call_llvm_intrin("int64", "llvm.readcyclecounter", T.uint32(0)))\n' + RIGHT,
        "T.call_llvm_intrin('llvm.readcyclecounter')",
    ),
    (
        "LLVM memset over a parameter's data",
        'T.evaluate(T.call_llvm_intrin("void", "llvm.memset.p0.i64", x.data, T.int8(0), T.int64(1 << 30), '
        "T.bool(False)))\n" + RIGHT,
        "llvm.memset",
    ),
    ("address_of", "T.evaluate(T.address_of(x[0, 0]))\n" + RIGHT, "T.address_of is not allowed"),
    (
        "pointer arithmetic through a handle variable",
        'p: T.let[T.handle("float32")] = x.data\n'
        "q: T.let[T.handle] = T.handle_add_byte_offset(p, 4000000)\nT.evaluate(q)\n" + RIGHT,
        "a pointer-typed value 'p' (T.handle) is not allowed",
    ),
    (
        "an integer reinterpreted as a pointer",
        'T.evaluate(T.reinterpret("handle", T.uint64(140737488355328)))\n' + RIGHT,
        "T.reinterpret to or from a pointer is not allowed",
    ),
    (
        "tvm_access_ptr past the end",
        'T.evaluate(T.tvm_access_ptr(T.type_annotation("float32"), x.data, 0, 1000000, 2))\n' + RIGHT,
        "T.tvm_access_ptr is not allowed",
    ),
    (
        "tvm_struct_get",
        'T.evaluate(T.tvm_struct_get(x.data, 0, 1, "handle"))\n' + RIGHT,
        "T.tvm_struct_get is not allowed",
    ),
    ("tvm_throw_last_error", "T.evaluate(T.tvm_throw_last_error())\n" + RIGHT, "T.tvm_throw_last_error"),
    (
        "buffer over a parameter's data, larger",
        'y = T.decl_buffer((100000,), "float32", data=x.data)\ny[99999] = T.float32(1)\n' + RIGHT,
        "buffer 'y' declared over the data of 'x' reaches 400000 bytes, 'x' has 128",
    ),
    (
        "buffer over a parameter's data, offset past its end",
        'y = T.decl_buffer((4, 8), "float32", data=x.data, elem_offset=100)\ny[0, 0] = T.float32(1)\n'
        + RIGHT,
        "reaches 528 bytes, 'x' has 128",
    ),
    (
        "buffer over a parameter's data, wider element type",
        'y = T.decl_buffer((32,), "float64", data=x.data)\ny[31] = T.float64(1)\n' + RIGHT,
        "reaches 256 bytes, 'x' has 128",
    ),
    (
        "buffer over a parameter's data, strided past its end",
        'y = T.decl_buffer((4, 8), "float32", data=x.data, strides=(64, 1))\ny[3, 0] = T.float32(1)\n'
        + RIGHT,
        "reaches",
    ),
    (
        "loop annotation that imports LLVM IR",
        'for i in T.serial(4, annotations={"pragma_import_llvm": "define void @f() { ret void }"}):\n'
        "    for j in range(8):\n        out[i, j] = x[i, j] * w1[j] + b3[j]",
        "loop annotation 'pragma_import_llvm'",
    ),
    (
        "function attribute that changes the calling convention",
        'T.func_attr({"calling_conv": 2})\n' + RIGHT,
        "function attribute 'calling_conv'",
    ),
    (
        "a T.attr pragma",
        'with T.attr(0, "pragma_import_c", "int x;"):\n    T.evaluate(0)\n' + RIGHT,
        "T.attr 'pragma_import_c'",
    ),
]


@pytest.mark.parametrize("name, body, expect", PRIM_ATTACKS, ids=[a[0] for a in PRIM_ATTACKS])
def test_primfunc_attack_is_refused(name, body, expect):
    msg = refused(prim(body))
    assert msg.startswith("PrimFunc fused_multiply_add: ") and expect in msg, (name, msg)


def test_match_buffer_past_the_region_is_refused():
    body = """
with T.sblock("root"):
    for i in range(4):
        with T.sblock("row"):
            vi = T.axis.spatial(4, i)
            T.reads(x[vi, 0:8], w1[0:8], b3[0:8])
            T.writes(out[vi, 0:8])
            X = T.match_buffer(x[vi, 0:64], (64,), "float32")
            for j in range(8):
                out[vi, j] = X[j] * w1[j] + b3[j]
"""
    msg = refused(prim(body, deco="T.prim_func(private=True, s_tir=True)"))
    assert msg.startswith("PrimFunc fused_multiply_add: ") and "matched to 'x' dimension 1" in msg, msg


@pytest.mark.parametrize(
    "param, expect",
    [
        ('b: T.handle("float32")', "parameter 1 ('b') is a pointer (T.handle), not a buffer"),
        ("n: T.int32", "parameter 1 ('n') is a"),
    ],
)
def test_handle_and_scalar_parameters_are_refused(param, expect):
    """In a full module's extra PrimFunc (a replacement PrimFunc must take the reference's buffers,
    ir/replay.py check_params, before the verifier sees it)."""
    extra = f"""
    @T.prim_func(private=True)
    def extra(x: T.Buffer((4, 8), "float32"), {param}):
        x[0, 0] = T.float32(0)
"""
    msg = refused(full(f"{CALL}\nreturn gv", extra=extra))
    assert msg.startswith("PrimFunc extra: ") and expect in msg, msg


def test_names_that_would_reach_generated_source_are_refused():
    """GPU and C code generators write names into the source they compile, unescaped: a module loaded
    from JSON (the judge's input) can carry any string there."""
    import tvm

    mod, ref = module_of(prim(RIGHT))
    verify_module(mod, ref.module)
    js = tvm.ir.save_json(mod)
    assert js.count('"w1"') >= 1
    hostile = tvm.ir.load_json(
        js.replace('"w1"', '"w1){} extern \\"C\\" int evil(){return 0;} void g(float* q"')
    )
    with pytest.raises(
        ForbiddenConstruct, match="^PrimFunc fused_multiply_add: variable or buffer name 'w1.*evil"
    ):
        verify_module(hostile, ref.module)
    body = (
        'for i in T.thread_binding(4, thread="threadIdx.x; evil"):\n    for j in range(8):\n'
        "        out[i, j] = x[i, j] * w1[j] + b3[j]"
    )
    assert "thread tag 'threadIdx.x; evil' is not allowed" in refused(prim(body))


def test_a_buffer_bound_to_another_buffer_is_refused():
    """Aliasing a buffer through a let-binding (IR the TVMScript parser's well-formedness check refuses,
    but a module loaded from JSON is not checked)."""
    import tvm
    from tvm import tirx

    mod, ref = module_of(prim(RIGHT))
    f = mod["fused_multiply_add"]
    x = f.params[0]
    y = tvm.ir.Var("y", x.ty)
    store = tirx.BufferStore(y, tvm.tirx.FloatImm("float32", 1.0), [3, 7])
    bad = f.with_body(tirx.SeqStmt([tirx.Bind(y, x), store, f.body]))
    funcs = {gv: (bad if gv.name_hint == "fused_multiply_add" else g) for gv, g in mod.functions.items()}
    with pytest.raises(ForbiddenConstruct, match="^PrimFunc fused_multiply_add: 'y' bound to a BufferType"):
        verify_module(tvm.IRModule(funcs), ref.module)


def test_views_that_stay_inside_are_accepted():
    """A view of the same bytes (reshaped, reinterpreted) and plain math are fine: the check is not a
    blanket ban."""
    accepted(
        prim(
            'y = T.decl_buffer((32,), "float32", data=x.data)\n'
            "for i, j in T.grid(4, 8):\n    out[i, j] = y[i * 8 + j] * w1[j] + b3[j]"
        )
    )
    accepted(
        prim(
            "for i, j in T.grid(4, 8):\n"
            "    out[i, j] = T.exp(T.log(T.max(x[i, j] * w1[j] + b3[j], T.float32(0))))"
            " + T.min(x[i, j] * w1[j] + b3[j], T.float32(0))"
        )
    )
    accepted(
        prim(
            "for i, j in T.grid(4, 8):\n"
            '    out[i, j] = T.reinterpret("float32", T.reinterpret("int32", x[i, j] * w1[j] + b3[j]))'
        )
    )


# What `sch.tensorize(ji, "dot_16x4_vnni")` and `sch.tensorize(ji, "dot_4x4_i8i8s32_sdot")` (TVM 0.27's x86
# and AArch64 intrinsics, tvm.s_tir.tensor_intrin) make of a 16x64 @ 64x32 int8 matmul, as TVM prints it
# (importing tvm.s_tir.tensor_intrin takes ~40 s: it registers every CUDA intrinsic).
TENSORIZED = {
    "vnni": """
@T.prim_func(s_tir=True)
def mm(A: T.Buffer((16, 64), "uint8"), B: T.Buffer((32, 64), "int8"), C: T.Buffer((16, 32), "int32")):
    # with T.sblock("root"):
    for i, j_0 in T.grid(16, 2):
        for j_1_init in range(16):
            with T.sblock("C_init"):
                vi = T.axis.spatial(16, i)
                vj = T.axis.spatial(32, j_0 * 16 + j_1_init)
                T.reads()
                T.writes(C[vi, vj])
                C[vi, vj] = 0
        for k_0 in range(16):
            with T.sblock("C_update_o"):
                vi_o, vj_o, vk_o = T.axis.remap("SSR", [i, j_0, k_0])
                T.reads(C[vi_o, vj_o * 16:vj_o * 16 + 16], A[vi_o, vk_o * 4:vk_o * 4 + 4], B[vj_o * 16:vj_o * 16 + 16, vk_o * 4:vk_o * 4 + 4])
                T.writes(C[vi_o, vj_o * 16:vj_o * 16 + 16])
                A_1 = T.match_buffer(A[vi_o, vk_o * 4:vk_o * 4 + 4], (4,), "uint8", offset_factor=1)
                B_1 = T.match_buffer(B[vj_o * 16:vj_o * 16 + 16, vk_o * 4:vk_o * 4 + 4], (16, 4), "int8", offset_factor=1)
                C_1 = T.match_buffer(C[vi_o, vj_o * 16:vj_o * 16 + 16], (16,), "int32", offset_factor=1)
                A_u8x4: T.uint8x4 = A_1[T.Ramp(0, 1, 4)]
                A_i32: T.int32 = T.reinterpret("int32", A_u8x4)
                B_i8x64: T.int8x64 = B_1[0, T.Ramp(0, 1, 64)]
                B_i32x16: T.int32x16 = T.reinterpret("int32x16", B_i8x64)
                C_i32x16: T.int32x16 = C_1[T.Ramp(0, 1, 16)]
                C_1[0:16] = T.call_llvm_pure_intrin("int32x16", "llvm.x86.avx512.vpdpbusd.512", C_i32x16, T.Broadcast(A_i32, 16), B_i32x16)
""",
    "sdot": """
@T.prim_func(s_tir=True)
def mm(A: T.Buffer((16, 64), "int8"), B: T.Buffer((32, 64), "int8"), C: T.Buffer((16, 32), "int32")):
    # with T.sblock("root"):
    for i, j_0 in T.grid(16, 8):
        for j_1_init in range(4):
            with T.sblock("C_init"):
                vi = T.axis.spatial(16, i)
                vj = T.axis.spatial(32, j_0 * 4 + j_1_init)
                T.reads()
                T.writes(C[vi, vj])
                C[vi, vj] = 0
        for k_0 in range(16):
            with T.sblock("C_update_o"):
                vi_o, vj_o, vk_o = T.axis.remap("SSR", [i, j_0, k_0])
                T.reads(C[vi_o, vj_o * 4:vj_o * 4 + 4], A[vi_o, vk_o * 4:vk_o * 4 + 4], B[vj_o * 4:vj_o * 4 + 4, vk_o * 4:vk_o * 4 + 4])
                T.writes(C[vi_o, vj_o * 4:vj_o * 4 + 4])
                A_1 = T.match_buffer(A[vi_o, vk_o * 4:vk_o * 4 + 4], (4,), "int8", offset_factor=1)
                B_1 = T.match_buffer(B[vj_o * 4:vj_o * 4 + 4, vk_o * 4:vk_o * 4 + 4], (4, 4), "int8", offset_factor=1)
                C_1 = T.match_buffer(C[vi_o, vj_o * 4:vj_o * 4 + 4], (4,), "int32", offset_factor=1)
                A_i8x4: T.int8x4 = A_1[T.Ramp(0, 1, 4)]
                A_i32: T.int32 = T.reinterpret("int32", A_i8x4)
                vec_ai32: T.int32x4 = T.Broadcast(A_i32, 4)
                vec_a: T.int8x16 = T.reinterpret("int8x16", vec_ai32)
                vec_b: T.int8x16 = B_1[0, T.Ramp(0, 1, 16)]
                vec_c: T.int32x4 = C_1[T.Ramp(0, 1, 4)]
                C_1[0:4] = T.call_llvm_pure_intrin("int32x4", "llvm.aarch64.neon.sdot", vec_c, vec_a, vec_b)
""",
}


@pytest.mark.parametrize("name", sorted(TENSORIZED))
def test_tensorized_with_tvms_own_intrinsics_is_accepted(name):
    """The tensorize path: LLVM intrinsics on the list, T.match_buffer regions, reinterpret of vectors."""
    import tvm

    func = tvm.script.from_source(TENSORIZED[name])
    verify_module(tvm.IRModule({"mm": func}), build_reference(get_problem(PROBLEM)).module)
    # the same kernel with the matched region one row too far is refused
    moved = TENSORIZED[name].replace(
        "A[vi_o, vk_o * 4:vk_o * 4 + 4], (4,)", "A[vi_o + 1, vk_o * 4:vk_o * 4 + 4], (4,)"
    )
    assert moved != TENSORIZED[name]
    with pytest.raises(ForbiddenConstruct, match="^PrimFunc mm: buffer 'A_1' matched to 'A' dimension 0"):
        verify_module(
            tvm.IRModule({"mm": tvm.script.from_source(moved)}), build_reference(get_problem(PROBLEM)).module
        )


# ------------------------------------------------------------------------------------ Relax attacks
RELAX_ATTACKS = [
    (
        "call_packed",
        f'_ = R.call_packed("system", R.str("touch /tmp/ekb-pwned"), sinfo_args=R.Object())\n{CALL}\nreturn gv',
        "Relax function main: ",
        "R.call_packed('system') is not allowed",
    ),
    (
        "call_dps_packed",
        'gv = R.call_dps_packed("vm.builtin.copy", (x,), out_ty=R.Tensor((4, 8), dtype="float32"))\nreturn gv',
        "Relax function main: ",
        "R.call_dps_packed('vm.builtin.copy') is not allowed",
    ),
    (
        "call_pure_packed",
        f'_ = R.call_pure_packed("vm.builtin.copy", x, ty_args=R.Tensor((4, 8), dtype="float32"))\n{CALL}\nreturn gv',
        "Relax function main: ",
        "R.call_pure_packed('vm.builtin.copy') is not allowed",
    ),
    (
        "a Relax function the reference does not have",
        "gv = cls.helper(x, w1, b3)\nreturn gv",
        "Relax function helper: not one of the reference's Relax functions",
        "",
    ),
]
HELPER = f"""
    @R.function
    def helper({MAIN_SIG}):
        cls = Module
        {CALL}
        return gv
"""


@pytest.mark.parametrize("name, main, prefix, expect", RELAX_ATTACKS, ids=[a[0] for a in RELAX_ATTACKS])
def test_relax_attack_is_refused(name, main, prefix, expect):
    text = full(main, extra=HELPER if "helper" in main else "")
    if "call_packed" in main:  # an impure call: main must say so to parse
        text = text.replace("@R.function\n    def main", "@R.function(pure=False)\n    def main")
    msg = refused(text)
    assert msg.startswith(prefix) and expect in msg, (name, msg)


def test_extern_functions_and_closures_built_as_ir_are_refused():
    """What TVMScript cannot write directly (the judge loads IR, not text): an ExternFunc in the module,
    main calling an ExternFunc, main holding a nested function."""
    import tvm
    from tvm import relax

    mod, ref = module_of(full(f"{CALL}\nreturn gv"))
    verify_module(mod, ref.module)  # the module as written is fine
    funcs = dict(mod.functions.items())
    with pytest.raises(ForbiddenConstruct, match="^function libc: a ExternFunc is not allowed"):
        verify_module(
            tvm.IRModule({**funcs, tvm.ir.GlobalVar("libc"): relax.ExternFunc("system")}), ref.module
        )

    main = mod["main"]

    def with_binding(value):
        b = relax.VarBinding(relax.Var("r", relax.ObjectType()), value)
        body = relax.SeqExpr([relax.BindingBlock([b]), *main.body.blocks], main.body.body)
        f = relax.Function(main.params, body, main.ret_ty, is_pure=False, attrs=main.attrs)
        return tvm.IRModule({gv: (f if gv.name_hint == "main" else g) for gv, g in funcs.items()})

    call = relax.Call(relax.ExternFunc("system"), [main.params[0]], ty_args=[relax.ObjectType()])
    with pytest.raises(ForbiddenConstruct, match=r"^Relax function main: R.call_packed\('system'\)"):
        verify_module(with_binding(call), ref.module)
    closure = relax.Function([], main.params[0], main.params[0].ty)
    with pytest.raises(ForbiddenConstruct, match="^Relax function main: a nested function"):
        verify_module(with_binding(closure), ref.module)


def test_a_module_attribute_is_refused():
    text = full(f"{CALL}\nreturn gv").replace(
        "class Module:\n", 'class Module:\n    I.module_attrs({"system_lib_prefix": "ekb_"})\n', 1
    )
    msg = refused(text)
    assert "module attribute 'system_lib_prefix' is not allowed" in msg, msg


# ------------------------------------------------------------------------------------ the built-ins pass
def _spread(level: int, every: int) -> list[str]:
    ids = sorted(p.id for p in select(level=level))
    return ids[::every]


def _built_ins(problem_id: str, lanes: int = 8):
    """(label, module) of every CPU built-in candidate of a problem, as the judge would get them."""
    from edgekernelbench.generators.reference_candidates import reference_spec
    from edgekernelbench.search.rules import rule_spec

    p = get_problem(problem_id)
    ref = build_reference(p)
    yield "reference", ref.module
    yield "reference_spec", materialize(reference_spec(p), p, ref)
    spec = rule_spec(p, vector_lanes=lanes, verify_build=False)
    yield "rule_spec", materialize(spec, p, ref)


@pytest.mark.parametrize("level, every", [(1, 2), (2, 4), (3, 4)])
def test_references_and_built_in_candidates_pass(level, every):
    """A spread of each level: every 2nd problem of level 1, every 4th of levels 2 and 3 (the whole suite,
    with the CPU dlight baseline and the rules at 8 and 16 lanes, passed once: 480 modules in about 2
    minutes)."""
    t0 = time.perf_counter()
    problems = _spread(level, every)
    checked = 0
    for pid in problems:
        ref = build_reference(get_problem(pid))
        for label, mod in _built_ins(pid, lanes=16 if checked % 2 else 8):
            try:
                verify_module(mod, ref.module)
            except ForbiddenConstruct as e:
                pytest.fail(f"{pid} {label}: {e}")
            checked += 1
    assert checked == 3 * len(problems) > 0
    print(
        f"level {level}: {len(problems)} problems, {checked} modules verified in {time.perf_counter() - t0:.1f} s"
    )


# one of each kind dlight schedules differently: GEMV, matmul, conv, depthwise, reductions (rfactor),
# elementwise, int8, resize; two blocks and a whole model
GPU_PROBLEMS = [
    "L1/dense_kws_classifier",
    "L1/matmul_mobilebert_ffn_in",
    "L1/pwconv_vww_16x32",
    "L1/dwconv3x3_kws",
    "L1/layernorm_mobilebert_128",
    "L1/softmax_kws_classifier",
    "L1/gap_kws",
    "L1/hardswish_mobilenetv3",
    "L1/matmulint_kws_pw",
    "L1/resize_bilinear2x_seg",
    "L2/attention_mobilebert",
    "L2/int8_ds_block_kws",
    "L3/cnn1d_har",
]
# dlight's Metal matmul rule imports tvm.s_tir.tensor_intrin (30-40 s, once per process): on apple-m
# these (all of them passed in the sweep of the whole suite) are left to the other profiles
METAL_SLOW = {
    "L1/matmul_mobilebert_ffn_in",
    "L1/pwconv_vww_16x32",
    "L1/matmulint_kws_pw",
    "L2/attention_mobilebert",
    "L2/int8_ds_block_kws",
    "L3/cnn1d_har",
}


@pytest.mark.parametrize(
    "profile", ["jetson-orin-nano", "mali", "webgpu", "apple-m"]
)  # cuda, opencl, wgsl, metal
def test_gpu_default_candidates_pass(profile):
    """dlight's GPU schedules (threads bound, shared / local buffers, rfactor, cross-thread reductions),
    on GPU_PROBLEMS. Every problem of the suite on every GPU profile passed once (80-100 s a profile;
    dlight takes 50 s for one conv on Metal)."""
    from edgekernelbench.backends.registry import get_profile
    from edgekernelbench.generators.reference_candidates import gpu_default_spec

    for pid in GPU_PROBLEMS:
        if profile == "apple-m" and pid in METAL_SLOW:
            continue
        p = get_problem(pid)
        ref = build_reference(p)
        mod = materialize(gpu_default_spec(p, get_profile(profile)), p, ref)
        try:
            verify_module(mod, ref.module)
        except ForbiddenConstruct as e:
            pytest.fail(f"{pid} on {profile}: {e}")


# ------------------------------------------------------------------------------------ end to end
def test_call_extern_system_is_forbidden_and_does_not_run(tmp_path):
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.isolation import Limits
    from edgekernelbench.report.summary import per_problem_rows

    marker = tmp_path / "pwned"
    body = f'T.evaluate(T.call_extern("int32", "system", "touch {marker}"))\n' + RIGHT
    r = evaluate(
        PROBLEM,
        KernelSpec(problem=PROBLEM, module=prim(body)),
        trials=2,
        measure=False,
        limits=Limits(timeout_s=120, memory_mb=4096),
    )
    assert r.reason == "forbidden" and not r.compiled and not r.correct, (r.reason, r.detail)
    assert r.detail == "PrimFunc fused_multiply_add: T.call_extern('system') is not allowed", r.detail
    assert not marker.exists()
    (row,) = per_problem_rows([r])  # `ekb report`'s detail table
    assert row["status"] == "forbidden" and "T.call_extern('system')" in row["detail"], row


def test_target_attributes_that_change_what_is_built_are_refused():
    from edgekernelbench.harness.api import evaluate
    from edgekernelbench.harness.isolation import Limits
    from edgekernelbench.harness.verify import verify_target_attrs
    from edgekernelbench.ir.spec import Decisions

    verify_target_attrs({"mattr": ["+avx2", "+fma"], "fast-math": True, "num-cores": 1})
    for bad in ({"kind": "c"}, {"host": {"kind": "llvm"}}, {"jit": "orcjit"}, {"mattr": [{"x": 1}]}):
        with pytest.raises(ForbiddenConstruct, match="^target attribute"):
            verify_target_attrs(bad)
    spec = KernelSpec(
        problem=PROBLEM, module=prim(RIGHT), decisions=Decisions(target_attrs={"libs": ["cblas"]})
    )
    r = evaluate(PROBLEM, spec, trials=1, measure=False, limits=Limits(timeout_s=120, memory_mb=4096))
    assert r.reason == "forbidden" and r.detail == "target attribute 'libs' is not allowed", (
        r.reason,
        r.detail,
    )


# ------------------------------------------------------------------------------------ state in a module
BUMP = """
    @T.prim_func(private=True)
    def bump(w: T.Buffer((8,), "float32")):
        w[0] = w[0] + T.float32(1)
"""


@pytest.mark.parametrize(
    "name, main",
    [
        (
            "call_tir_inplace on a weight",
            'b = R.call_tir_inplace(cls.bump, (w1,), inplace_indices=[0], out_ty=R.Tensor((8,), "float32"))',
        ),
        (
            "call_tir_inplace on an alias of a weight",
            "a = w1\n"
            'b = R.call_tir_inplace(cls.bump, (a,), inplace_indices=[0], out_ty=R.Tensor((8,), "float32"))',
        ),
        (
            "call_tir_inplace on a constant",
            'c = R.const([1, 2, 3, 4, 5, 6, 7, 8], "float32")\n'
            'b = R.call_tir_inplace(cls.bump, (c,), inplace_indices=[0], out_ty=R.Tensor((8,), "float32"))',
        ),
    ],
)
def test_an_in_place_write_to_what_main_does_not_own_is_refused(name, main):
    msg = refused(full(f"{main}\n{CALL}\nreturn gv", extra=BUMP))
    assert "call_tir_inplace of 'bump' writes its input #0" in msg, (name, msg)


def test_a_kernel_that_stores_into_its_input_through_a_view_is_refused():
    body = 'v = T.decl_buffer((8,), "float32", data=w1.data)\nv[0] = T.float32(0)\n' + RIGHT
    msg = refused(prim(body))
    assert "stores into its input #1 ('w1')" in msg, msg
