"""The whole model as a C program: for a cross-compiled board without a TVM runtime, and for the host (the
same form, measured where it is built).

A deployed Relax `main` with static shapes is a fixed sequence of kernel calls (executor.graph_steps):
`call_tir`s over the inputs, the weights, constants and intermediate buffers, plus tuple plumbing that only
renames buffers. `model_program` writes that sequence as C: one statically shaped buffer per tensor, each
kernel called through TVM's packed ABI (`__tvm_ffi_<name>`, TVMFFIAny arguments holding DLTensor pointers),
as backends/data/ekb_driver.c calls one kernel. The program includes that driver's source with
EKB_DRIVER_NO_MAIN: its runtime symbols (workspace, parallel launch on POSIX threads, error reporting) and
its file helpers, not its manifest reader.

    ./model [-r REPEAT] [-p PROFILE_RUNS] [-t THREADS] [-j STATS.json] WEIGHTS_DIR IN_0 ... OUT_0 ...

Every IN / OUT file holds one tensor's raw bytes (C order, the target's byte order: little-endian on the
profiles here), the weights directory one file per weight and constant, as manifest.json lists them.
The program runs the model once on the inputs; `-r N` runs it N more times, each timed, and prints the
percentiles on stderr (a board's figures; under an emulator they are not speed); `-p N` N more runs with
every kernel call timed (the per-kernel profile); `-j FILE` writes them as JSON: init_us (buffers allocated,
weights read), first_us (the first run), runs_us, steps (per kernel call: its microseconds in each profile
run), max_rss_kib (the process's peak resident memory), buffer_bytes (every tensor's buffer: this program
keeps each one; the Relax VM's plan shares them) and workspace_peak_bytes (the most workspace the kernels
held at once). Exit status as the driver's: 2 I/O, 4 a kernel raised an error, 5 a kernel returned non-zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import EKBError
from ..executor import GraphError, const_array, graph_steps


@dataclass
class CTensor:
    shape: tuple[int, ...]
    dtype: str
    role: str  # input | weight | const | temp
    file: str = ""  # weights and constants: the file's name in the weights directory


@dataclass
class ModelProgram:
    source: str
    kernels: list[str]
    constants: dict[str, np.ndarray] = field(default_factory=dict)  # file name -> data, for the weights dir
    calls: int = 0
    buffers: int = 0
    bytes: int = 0  # all buffers together


def dl_dtype(dtype: str) -> tuple[int, int, int]:
    import tvm_ffi

    d = tvm_ffi.dtype(dtype)
    return int(d.type_code), int(d.bits), int(d.lanes)


def nbytes(t: CTensor) -> int:
    _, bits, lanes = dl_dtype(t.dtype)
    return int(np.prod(t.shape, dtype=np.int64)) * ((bits * lanes + 7) // 8)


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def model_program(func, n_inputs: int, weight_files: list[str], title: str, threads: int) -> ModelProgram:
    """C source running Relax function `func` (its first `n_inputs` parameters are the model's inputs, the
    rest its weights, read from `weight_files` in order). Raises EKBError for a function that is not a
    static sequence of kernel calls."""
    from tvm import relax
    from tvm.ir.expr import Constant

    params = list(func.params)
    if len(params) != n_inputs + len(weight_files):
        raise EKBError(f"main takes {len(params)} arguments; {n_inputs} inputs + {len(weight_files)} weights")
    tensors: list[CTensor] = []
    env: dict = {}
    constants: dict[str, np.ndarray] = {}

    def add(t: CTensor) -> int:
        tensors.append(t)
        return len(tensors) - 1

    def shape_of(var) -> tuple[tuple[int, ...], str]:
        try:
            return tuple(int(d) for d in var.ty.shape.values), str(var.ty.dtype)
        except Exception as e:
            raise EKBError(f"'{var.name}' has no static shape: the C program needs static shapes") from e

    for i, p in enumerate(params):
        shape, dtype = shape_of(p)
        role, file = ("input", "") if i < n_inputs else ("weight", weight_files[i - n_inputs])
        env[p] = add(CTensor(shape, dtype, role, file))

    def constant(value: np.ndarray) -> int:
        name = f"const{len(constants)}.bin"
        value = np.asarray(value, order="C")
        constants[name] = value
        return add(CTensor(tuple(value.shape), str(value.dtype), "const", name))

    def value(expr):
        if isinstance(expr, Constant):
            return constant(const_array(expr))
        if isinstance(expr, relax.Tuple):
            return tuple(value(f) for f in expr.fields)
        if expr not in env:
            raise EKBError(f"unbound variable {expr} in main")
        return env[expr]

    try:
        steps = graph_steps(func)
    except GraphError as e:
        raise EKBError(f"main is not a static sequence of kernel calls: {e}") from e
    calls: list[tuple[str, list[int]]] = []
    for st in steps:
        if st.kind == "call_tir":
            ins = [value(a) for a in st.args]
            if any(isinstance(x, tuple) for x in ins):
                raise EKBError(f"kernel {st.func} takes a tuple argument: not supported in the C program")
            outs = [add(CTensor(shape, dtype, "temp")) for shape, dtype in st.outs]
            calls.append((st.func, [*ins, *outs]))
            env[st.var] = outs[0] if len(outs) == 1 else tuple(outs)
        elif st.kind == "tuple_get":
            env[st.var] = value(st.args[0])[st.index]
        elif st.kind == "tuple":
            env[st.var] = tuple(value(a) for a in st.args)
        elif st.kind == "alias":
            env[st.var] = value(st.args[0])
        else:
            env[st.var] = constant(st.value)
    result = value(func.body.body)
    outputs = list(result) if isinstance(result, tuple) else [result]
    if any(isinstance(o, tuple) for o in outputs):
        raise EKBError("main returns a nested tuple: not supported in the C program")
    inputs = [k for k, t in enumerate(tensors) if t.role == "input"]
    kernels = list(dict.fromkeys(name for name, _ in calls))
    source = _render(title, threads, tensors, inputs, outputs, calls, kernels)
    return ModelProgram(
        source,
        kernels,
        constants,
        calls=len(calls),
        buffers=len(tensors),
        bytes=sum(nbytes(t) for t in tensors),
    )


def _render(title, threads, tensors, inputs, outputs, calls, kernels) -> str:
    kid = {k: i for i, k in enumerate(kernels)}
    out = [
        f"/* {title}",
        " * Generated by edgekernelbench.deploy (`ekb deploy`); see the module docstring of",
        " * edgekernelbench/deploy/cprogram.py. Build: build.sh (cross gcc, static, -pthread).",
        " *",
        " *   ./model [-r REPEAT] [-t THREADS] WEIGHTS_DIR "
        + " ".join(f"IN_{i}" for i in range(len(inputs)))
        + " "
        + " ".join(f"OUT_{i}" for i in range(len(outputs))),
        " */",
        "#define EKB_DRIVER_NO_MAIN",
        '#include "ekb_driver.c" /* runtime symbols for TVM kernels; ekb_arg, read_file, write_file */',
        "#include <math.h>",
        "#include <sys/resource.h>",
        "#include <time.h>",
        "",
        "/* the kernels (kernels.o), by their TVM packed-ABI symbols */",
    ]
    for i, k in enumerate(kernels):
        out.append(f"int32_t ekb_k{i}(void*, void*, int32_t, void*) __asm__({_c_string('__tvm_ffi_' + k)});")
    out += [
        "",
        f"#define EKB_NT {len(tensors)}",
        f"#define EKB_NIN {len(inputs)}",
        f"#define EKB_NOUT {len(outputs)}",
        f"#define EKB_DEFAULT_THREADS {max(1, int(threads))}",
        "typedef struct {",
        "  uint8_t code, bits;",
        "  uint16_t lanes;",
        "  int ndim;",
        "  int64_t shape[EKB_MAX_DIMS];",
        "  const char* file; /* weights and constants: a file in WEIGHTS_DIR */",
        "} ekb_tensor_spec;",
        "",
        "/* every tensor: inputs, weights, constants and intermediate buffers */",
        "static const ekb_tensor_spec SPEC[EKB_NT] = {",
    ]
    for k, t in enumerate(tensors):
        code, bits, lanes = dl_dtype(t.dtype)
        if len(t.shape) > 16:
            raise EKBError(f"a tensor of rank {len(t.shape)}: the C program supports rank 16 at most")
        dims = ", ".join(str(d) for d in t.shape) or "0"
        file = _c_string(t.file) if t.file else "NULL"
        out.append(
            f"  {{{code}, {bits}, {lanes}, {len(t.shape)}, {{{dims}}}, {file}}}, /* {k}: {t.role} {t.dtype}"
            f"{list(t.shape)} */"
        )
    out += ["};", f"static const int INPUTS[EKB_NIN] = {{{', '.join(map(str, inputs))}}};"]
    out += [f"static const int OUTPUTS[EKB_NOUT] = {{{', '.join(map(str, outputs))}}};", ""]
    for c, (_, args) in enumerate(calls):
        out.append(f"static const int ARGS{c}[] = {{{', '.join(map(str, args))}}};")
    out += [
        "typedef struct {",
        "  ekb_kernel_fn fn;",
        "  const char* name;",
        "  int nargs;",
        "  const int* args;",
        "} ekb_step;",
        f"#define EKB_NSTEPS {len(calls)}",
        "static const ekb_step STEPS[EKB_NSTEPS] = {",
    ]
    for c, (name, args) in enumerate(calls):
        out.append(f"  {{ekb_k{kid[name]}, {_c_string(name)}, {len(args)}, ARGS{c}}},")
    out += ["};", "", _BODY]
    return "\n".join(out) + "\n"


_BODY = r"""static ekb_arg T[EKB_NT];

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* Runs every kernel call of the model; `step_us` (EKB_NSTEPS entries, or NULL) gets each call's time. */
static void run_model(double* step_us) {
  TVMFFIAny args[EKB_MAX_ARGS], ret;
  for (int s = 0; s < EKB_NSTEPS; ++s) {
    const ekb_step* st = &STEPS[s];
    memset(args, 0, sizeof(TVMFFIAny) * (size_t)st->nargs);
    memset(&ret, 0, sizeof(ret));
    for (int i = 0; i < st->nargs; ++i) {
      args[i].type_index = kTVMFFIDLTensorPtr;
      args[i].v_ptr = &T[st->args[i]].t;
    }
    double t0 = step_us ? now_us() : 0.0;
    int rc = st->fn(NULL, args, st->nargs, &ret);
    if (step_us) step_us[s] = now_us() - t0;
    if (rc != 0) die(5, "kernel %s returned non-zero", st->name);
  }
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* The nearest-rank percentile `p` (0-100] of n sorted values. */
static double percentile(const double* sorted, int n, double p) {
  int k = (int)ceil(p / 100.0 * n);
  return sorted[k < 1 ? 0 : (k > n ? n - 1 : k - 1)];
}

/* The process's peak resident memory in KiB: VmHWM of /proc/self/status (Linux), else getrusage's ru_maxrss
 * (which Linux keeps across execve: it can be the parent's before the exec). */
static long peak_rss_kib(void) {
  long kib = -1;
  char line[256];
  FILE* f = fopen("/proc/self/status", "r");
  if (f) {
    while (fgets(line, sizeof(line), f))
      if (sscanf(line, "VmHWM: %ld", &kib) == 1) break;
    fclose(f);
  }
  if (kib < 0) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    kib = (long)ru.ru_maxrss;
  }
  return kib;
}

static void json_array(FILE* f, const double* v, int n) {
  fputc('[', f);
  for (int i = 0; i < n; ++i) fprintf(f, "%s%.3f", i ? "," : "", v[i]);
  fputc(']', f);
}

static void usage(void) {
  die(2, "%s",
      "usage: model [-r REPEAT] [-p PROFILE_RUNS] [-t THREADS] [-j STATS.json] WEIGHTS_DIR IN... OUT... "
      "(see model.c)");
}

int main(int argc, char** argv) {
  double t_start = now_us();
  int repeat = 0, profile = 0, a = 1;
  const char* stats = NULL;
  g_threads = EKB_DEFAULT_THREADS;
  while (a < argc && argv[a][0] == '-' && argv[a][1] != '\0') {
    if (a + 1 >= argc) usage();
    if (strcmp(argv[a], "-r") == 0) repeat = atoi(argv[a + 1]);
    else if (strcmp(argv[a], "-p") == 0) profile = atoi(argv[a + 1]);
    else if (strcmp(argv[a], "-t") == 0) g_threads = atoi(argv[a + 1]);
    else if (strcmp(argv[a], "-j") == 0) stats = argv[a + 1];
    else usage();
    a += 2;
  }
  if (argc - a != 1 + EKB_NIN + EKB_NOUT || g_threads < 1 || repeat < 0 || profile < 0) usage();
  const char* wdir = argv[a];
  size_t buffer_bytes = 0;
  for (int k = 0; k < EKB_NT; ++k) {
    const ekb_tensor_spec* s = &SPEC[k];
    ekb_arg* x = &T[k];
    size_t count = 1;
    for (int d = 0; d < s->ndim; ++d) x->shape[d] = s->shape[d], count *= (size_t)s->shape[d];
    x->nbytes = count * (((size_t)s->bits * s->lanes + 7) / 8);
    buffer_bytes += x->nbytes;
    void* data = NULL;
    if (posix_memalign(&data, EKB_ALIGN, x->nbytes ? x->nbytes : EKB_ALIGN) != 0)
      die(2, "%s", "out of memory");
    memset(data, 0, x->nbytes);
    x->t.data = data;
    x->t.device.device_type = kDLCPU;
    x->t.device.device_id = 0;
    x->t.ndim = s->ndim;
    x->t.dtype.code = s->code;
    x->t.dtype.bits = s->bits;
    x->t.dtype.lanes = s->lanes;
    x->t.shape = x->shape;
    x->t.strides = NULL;
    x->t.byte_offset = 0;
    if (s->file) {
      if (snprintf(x->file, sizeof(x->file), "%s/%s", wdir, s->file) >= (int)sizeof(x->file))
        die(2, "path too long: %s", s->file);
      read_file(x);
    }
  }
  double init_us = now_us() - t_start; /* buffers allocated, weights and constants read */
  for (int i = 0; i < EKB_NIN; ++i) {
    ekb_arg* x = &T[INPUTS[i]];
    snprintf(x->file, sizeof(x->file), "%s", argv[a + 1 + i]);
    read_file(x);
  }
  double t0 = now_us();
  run_model(NULL);
  double first_us = now_us() - t0;
  double* runs = calloc((size_t)(repeat > 0 ? repeat : 1), sizeof(double));
  double* steps = calloc((size_t)(profile > 0 ? profile : 1) * EKB_NSTEPS, sizeof(double));
  if (!runs || !steps) die(2, "%s", "out of memory");
  for (int r = 0; r < repeat; ++r) {
    t0 = now_us();
    run_model(NULL);
    runs[r] = now_us() - t0;
  }
  for (int r = 0; r < profile; ++r) run_model(steps + (size_t)r * EKB_NSTEPS);
  if (repeat > 0) {
    double* sorted = malloc(sizeof(double) * (size_t)repeat);
    if (!sorted) die(2, "%s", "out of memory");
    memcpy(sorted, runs, sizeof(double) * (size_t)repeat);
    qsort(sorted, (size_t)repeat, sizeof(double), cmp_double);
    fprintf(stderr,
            "model: %d runs, p50 %.1f us, p90 %.1f us, p99 %.1f us (init %.1f us, first run %.1f us)\n",
            repeat, percentile(sorted, repeat, 50), percentile(sorted, repeat, 90),
            percentile(sorted, repeat, 99), init_us, first_us);
    free(sorted);
  }
  for (int i = 0; i < EKB_NOUT; ++i) {
    ekb_arg* x = &T[OUTPUTS[i]];
    snprintf(x->file, sizeof(x->file), "%s", argv[a + 1 + EKB_NIN + i]);
    write_file(x);
  }
  if (stats) {
    FILE* f = fopen(stats, "w");
    if (!f) die(2, "cannot write %s", stats);
    fprintf(f, "{\"threads\": %d, \"init_us\": %.3f, \"first_us\": %.3f, \"max_rss_kib\": %ld, ", g_threads,
            init_us, first_us, peak_rss_kib());
    fprintf(f, "\"buffer_bytes\": %zu, \"workspace_peak_bytes\": %zu, \"runs_us\": ", buffer_bytes,
            g_ws_peak);
    json_array(f, runs, repeat);
    fprintf(f, ", \"steps\": [");
    double* one = malloc(sizeof(double) * (size_t)(profile > 0 ? profile : 1));
    if (!one) die(2, "%s", "out of memory");
    for (int s = 0; s < EKB_NSTEPS && profile > 0; ++s) {
      for (int r = 0; r < profile; ++r) one[r] = steps[(size_t)r * EKB_NSTEPS + s];
      fprintf(f, "%s{\"kernel\": \"%s\", \"us\": ", s ? ", " : "", STEPS[s].name);
      json_array(f, one, profile);
      fputc('}', f);
    }
    fprintf(f, "]}\n");
    free(one);
    if (fclose(f) != 0) die(2, "cannot write %s", stats);
  }
  free(runs);
  free(steps);
  return 0;
}
"""
