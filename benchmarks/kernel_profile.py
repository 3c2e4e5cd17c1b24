"""Why a compute-bound kernel misses the peak: a profile of each one, timed side by side.

    .venv/bin/python benchmarks/kernel_profile.py RUN_DIR [--method leka] [--ids L3/a ...] [--all] [--rounds 25]

The kernels are peak_fraction.py's (the method's best correct candidate per problem, decisions replayed on
the problem's reference, compute-bound kernel calls with at least --min-share of their problem's time);
by default only those under its bar (60% of the peak side by side), with --all every one. This machine's
hardware counters are not reachable (a virtual machine: `perf stat` reports cycles as not supported), so
the profile is built from what can be measured and read instead, per kernel:

- "side by side": the kernel's fraction of the peak FLOP/s micro-kernel timed in the same rounds
  (peak_fraction.py's figure);
- "bytes": a traffic micro-kernel timed in those same rounds -- it reads as many bytes as the kernel's
  inputs and writes as many as its output, from buffers of the same sizes, called back to back like the
  kernel (so they sit in the cache level the kernel's own buffers sit in) -- as a share of the kernel's
  time: what moving its compulsory bytes alone costs, with no arithmetic;
- "FMA lanes": the float32 lanes of the vector FMAs in its machine code (16: zmm, 8: ymm, 4: xmm, 1:
  scalar); against the peak micro-kernel's own (read from its build the same way: 16 with AVX-512, 8 with
  AVX2), a kernel whose FMAs are half as wide reaches at most half;
- "hot loop": the innermost loop of its machine code that holds the most FMAs (the register tile's
  body), its instructions per iteration: FMAs, other vector arithmetic (on the FMA ports for 512-bit
  operands: max/min, add/mul of an epilogue, conversions, shuffles), loads, stores; and the fraction of
  the peak that issue alone allows: its FMA lanes over the peak micro-kernel's (two FMAs of its width per
  cycle) in the least cycles its uops need -- two loads and one store per cycle; two FMAs per cycle; other
  vector arithmetic sharing those two ports where the loop uses 512-bit registers (port 1's vector unit is
  then fused into port 0's), with a third port beside them where it uses none. A model of an Intel core
  with two 512-bit FMA units (the peak micro-kernel shows whether the core has them), not a simulation:
  it leaves out latencies, dependences and the loop's branch.

With --samples, where each shown kernel's time goes, sampled: its library exported, the kernel called by
TVM's time evaluator for SAMPLE_SECONDS in a child process under `perf record -e cpu-clock` (a software
clock: sampling needs no hardware counter, and works on this virtual machine), its samples grouped by the
innermost loop of its machine code (a backward jump) that holds them: each loop's share of the kernel's
samples, its length, its FMAs and the instructions that drew the most samples (on a virtual machine the
sample lands a few instructions after the one that stalled); besides, the share of the samples in functions
the kernel calls (memset, memcpy: a buffer filled or copied whole). Needs Linux perf (the Debian package
linux-perf; `make test` installs it as root); without it each kernel's line says so.

The "why" names the smallest of the three ceilings (lanes, issue, bytes) where it is under the bar; else,
where the arithmetic at the peak rate plus the bytes' time make up most (SERIAL) of the kernel's time, that
the two run one after the other instead of overlapping (a kernel near the ridge point: the loads and
stores of a working set outside L1 stall the FMAs); a kernel under every ceiling by far is bound by
something this profile does not see (dependences, loop overhead outside the hot loop).
"""

from __future__ import annotations

import collections
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np
from peak_fraction import (
    BAR,
    measure,
    open_run,
    run_arguments,
    spec_target,
)  # benchmarks/peak_fraction.py, beside this script
from stability import cpu_model

from edgekernelbench.harness.timing import TimingConfig
from edgekernelbench.problems import get_problem
from edgekernelbench.tvm_env import compile as tvm_compile

ROW = 64  # float32 per row of the traffic kernel's buffers (one vectorized loop)
LANES = {"zmm": 16, "ymm": 8, "xmm": 4}
FMAS_PER_CYCLE = 2  # the peak micro-kernel's rate: two FMAs of its width per cycle
FMA = re.compile(r"^v(fn?m(add|sub)(132|213|231)|fmaddsub|fmsubadd)")
MOVE = re.compile(r"^(v?mov|vbroadcast|vpbroadcast|vinsert[fi]|vextract|vzeroupper|prefetch|lea|nop)")
JUMP = re.compile(r"^j[a-z]+$")
SAMPLE_SECONDS = 1.5  # the kernel called in a loop under perf this long
ANNOTATED = re.compile(r"^\s*([0-9.]+)\s*:\s*([0-9a-f]+):\s*(\S+)\s*(.*)$")  # perf annotate --stdio
CHILD = """
import sys
import numpy as np
import tvm
lib = tvm.runtime.load_module(sys.argv[1])
data = np.load(sys.argv[3])
args = [tvm.runtime.tensor(data[f"a{i}"], tvm.cpu(0)) for i in range(len(data.files))]
ms = int(float(sys.argv[4]) * 1000)
lib.time_evaluator(sys.argv[2], tvm.cpu(0), number=1, repeat=1, min_repeat_ms=ms)(*args)
"""


@dataclass
class HotLoop:
    fmas: int
    fma_lanes: int  # float32 lanes summed over the loop's FMAs
    other_vector: collections.Counter  # vector arithmetic besides the FMAs (the FMA ports' other work)
    loads: int
    stores: int
    instructions: int
    wide: bool  # a 512-bit register in the loop: its vector arithmetic has two ports, else three

    @property
    def cycles(self) -> float:
        """Least cycles per iteration its uops need (see the module docstring)."""
        alu = (self.fmas + self.others) / (2 if self.wide else 3)
        return max(self.fmas / 2, alu, self.loads / 2, self.stores / 1, 1.0)

    @property
    def others(self) -> int:
        return sum(self.other_vector.values())

    def issue_cap(self, native: int) -> float:
        """The fraction of the peak issue allows, the peak being two `native`-lane FMAs per cycle."""
        return self.fma_lanes / (FMAS_PER_CYCLE * native * self.cycles)


def _operands(line: str) -> tuple[str, list[str]]:
    parts = line.split(None, 1)
    ops = re.split(r",(?![^(]*\))", parts[1]) if len(parts) > 1 else []
    return parts[0], [o.strip() for o in ops]


def _zero_idiom(mnemonic: str, operands: list[str]) -> bool:
    """x = x ^ x (vxorps / vpxor with one register thrice): zeroed at rename, on no execution port."""
    return mnemonic.startswith(("vxorp", "vpxor")) and len(set(operands)) == 1


def _lanes(mnemonic: str, operands: list[str]) -> int:
    if mnemonic.endswith(("ss", "sd")):
        return 1
    return max((LANES.get(m) for o in operands for m in re.findall(r"%(zmm|ymm|xmm)", o)), default=1)


def kernel_asm(source: str, name: str) -> list[str]:
    """The instructions of kernel `name` in a library's assembly `source` (its parallel body `name_compute_`
    where it has one), labels kept."""
    for sym in (f"{name}_compute_:", f"{name}:"):
        if (i := source.find(f"\n{sym}")) >= 0:
            body = source[i + 1 : source.find(".Lfunc_end", i)]
            return [
                ln.strip()
                for ln in body.splitlines()
                if ln.strip() and not ln.strip().startswith((".loc", ".cfi", ".p2align", "#", ".Ltmp"))
            ]
    return []


def hot_loop(lines: list[str]) -> HotLoop | None:
    """The innermost backward-jump loop holding the most FMAs (None: no FMA in any loop)."""
    where = {ln[:-1]: i for i, ln in enumerate(lines) if ln.endswith(":")}
    loops = []
    for j, ln in enumerate(lines):
        mnemonic, ops = _operands(ln)
        if JUMP.match(mnemonic) and ops and where.get(ops[0], j + 1) < j:
            loops.append((where[ops[0]], j))
    # innermost: no other loop strictly inside
    inner = [(a, b) for a, b in loops if not any(a <= c < d <= b and (c, d) != (a, b) for c, d in loops)]
    best = None
    for a, b in inner:
        body = [_operands(ln) for ln in lines[a + 1 : b + 1] if not ln.endswith(":")]
        fmas = [(m, o) for m, o in body if FMA.match(m)]
        if not fmas:
            continue
        memory = [(m, o) for m, o in body if not m.startswith(("lea", "nop"))]  # address arithmetic, padding
        loop = HotLoop(
            fmas=len(fmas),
            fma_lanes=sum(_lanes(m, o) for m, o in fmas),
            other_vector=collections.Counter(
                m
                for m, o in body
                if m.startswith("v") and not FMA.match(m) and not MOVE.match(m) and not _zero_idiom(m, o)
            ),
            loads=sum(1 for m, o in memory if any("(" in x for x in o[:-1]) or (len(o) == 1 and "(" in o[0])),
            stores=sum(1 for m, o in memory if o and "(" in o[-1] and len(o) > 1 and not m.startswith("cmp")),
            instructions=len(body),
            wide=any("%zmm" in x for m, o in body for x in o),
        )
        if best is None or loop.fmas > best.fmas:
            best = loop
    return best


def fma_lanes(lines: list[str]) -> int | None:
    """The widest float32 FMA of the kernel (None: no FMA)."""
    widths = [_lanes(m, o) for m, o in map(_operands, lines) if FMA.match(m)]
    return max(widths) if widths else None


def native_lanes(target) -> int:
    """The FMA width of the peak micro-kernel (backends/peak.py) as TVM builds it for `target`."""
    import tvm

    from edgekernelbench.backends.peak import CHAINS, _fma_kernel

    func = _fma_kernel(CHAINS, 16, 10).with_attr("global_symbol", "main")
    lib = tvm_compile(tvm.IRModule({"main": func}), target)
    return fma_lanes(kernel_asm(lib.mod.inspect_source("asm"), "main")) or 1


def _traffic_kernel():
    """Reads A (m rows, m even) into two vector accumulators, then writes every row of O from them: as
    many bytes read and written as a kernel's inputs and output, no other work."""
    from tvm.script import tirx as T

    @T.prim_func
    def traffic(a: T.handle, o: T.handle, c: T.handle):
        T.func_attr({"tirx.noalias": True})
        m = T.int32()
        n = T.int32()
        A = T.match_buffer(a, (m, ROW), "float32")
        O = T.match_buffer(o, (n, ROW), "float32")
        C = T.match_buffer(c, (2, ROW), "float32")
        for i in range(m // 2):
            for j in T.vectorized(ROW):
                C[0, j] = C[0, j] + A[2 * i, j]
            for j in T.vectorized(ROW):
                C[1, j] = C[1, j] + A[2 * i + 1, j]
        for i in range(n):
            for j in T.vectorized(ROW):
                O[i, j] = C[0, j] + C[1, j]

    return traffic


def traffic_contender(target):
    """A factory (input bytes, output bytes) -> a contender of harness.timing that moves those bytes."""
    import tvm

    from edgekernelbench.backends.host import evaluator_timer

    lib = tvm_compile(tvm.IRModule({"main": _traffic_kernel().with_attr("global_symbol", "main")}), target)
    dev = tvm.cpu(0)

    def rows(nbytes: float, even: bool) -> int:
        r = max(1, -(-int(nbytes) // (ROW * 4)))
        return r + (r % 2) if even else r

    def make(in_bytes: float, out_bytes: float):
        a = tvm.runtime.tensor(np.ones((rows(in_bytes, True), ROW), "float32"), dev)
        o = tvm.runtime.empty((rows(out_bytes, False), ROW), "float32", dev)
        c = tvm.runtime.tensor(np.zeros((2, ROW), "float32"), dev)
        return evaluator_timer(lib.mod, "main", dev, [a, o, c])

    return make


SERIAL = 0.75  # arithmetic at the peak rate plus the bytes' time covering this much of a kernel's time


@dataclass
class SampledLoop:
    first: int  # address of its first instruction
    last: int  # ... of its backward jump
    share: float  # of the kernel's samples
    instructions: int
    fmas: int
    top: list[tuple[str, float]]  # the mnemonics that drew the most samples, with their share


def sampled_loops(annotated: str) -> list[SampledLoop]:
    """The kernel's samples (`perf annotate --stdio` of its symbol: "percent : address: instruction") by the
    innermost loop holding them, largest share first; the samples outside every loop as one entry with
    first = last = -1."""
    ins = []
    for line in annotated.splitlines():
        if m := ANNOTATED.match(line):
            ins.append((float(m.group(1)), int(m.group(2), 16), m.group(3), m.group(4)))
    loops = []
    for _, addr, mnemonic, ops in ins:
        if JUMP.match(mnemonic) and (t := re.match(r"([0-9a-f]+)\b", ops)) and int(t.group(1), 16) <= addr:
            loops.append((int(t.group(1), 16), addr))
    groups: dict[tuple[int, int], list] = {}
    for pct, addr, mnemonic, _ in ins:
        holding = [(a, b) for a, b in loops if a <= addr <= b]
        key = min(holding, key=lambda r: r[1] - r[0]) if holding else (-1, -1)
        groups.setdefault(key, []).append((pct, mnemonic))
    total = sum(p for p, *_ in ins) or 1.0
    out = []
    for (a, b), body in groups.items():
        by = collections.Counter()
        for pct, mnemonic in body:
            by[mnemonic] += pct / total
        out.append(
            SampledLoop(
                a,
                b,
                sum(p for p, _ in body) / total,
                len(body),
                sum(1 for _, m in body if FMA.match(m)),
                [(m, v) for m, v in by.most_common(3)],
            )
        )
    return sorted(out, key=lambda r: -r.share)


def perf_samples(lib_mod, name: str, args, seconds: float = SAMPLE_SECONDS) -> dict | None:
    """The kernel sampled under perf (the module docstring; called by TVM's time evaluator, so no Python
    between calls): {"loops": sampled_loops of its body, "symbols": {function: share} of the samples in its
    library and in the functions it calls (memset, memcpy), "body": its body's symbol}; None without perf or
    when the run gave no samples."""
    perf = shutil.which("perf")
    if perf is None:
        return None
    with tempfile.TemporaryDirectory(prefix="ekb-perf-") as tmp:
        lib, data, rec = f"{tmp}/kernel.so", f"{tmp}/args.npz", f"{tmp}/perf.data"
        lib_mod.export_library(lib)
        np.savez(data, **{f"a{i}": a.numpy() for i, a in enumerate(args)})
        child = [sys.executable, "-c", CHILD, lib, name, data, str(seconds)]
        run = subprocess.run(
            [perf, "record", "-q", "-e", "cpu-clock", "-o", rec, "--", *child], capture_output=True, text=True
        )
        if run.returncode != 0:
            return None
        report = subprocess.run(
            [perf, "report", "-i", rec, "--stdio", "--sort", "dso,sym", "--percent-limit", "1"],
            capture_output=True,
            text=True,
        ).stdout
        symbols = {}
        for line in report.splitlines():
            if m := re.match(r"^\s*([0-9.]+)%\s+(\S+)\s+\[\.\]\s+(\S+)", line):
                dso, sym = m.group(2), m.group(3)
                if dso == "kernel.so" or sym.startswith(("__mem", "mem")):
                    symbols[sym] = symbols.get(sym, 0.0) + float(m.group(1))
        # shares of the kernel's own samples and those of the functions it calls (the child's start-up,
        # TVM's import, is left out)
        total = sum(symbols.values()) or 1.0
        symbols = {k: v / total for k, v in symbols.items()}
        body = next((s for s in (f"{name}_compute_", name) if s in symbols), None)
        if body is None:
            return None
        annotated = subprocess.run(
            [perf, "annotate", "-i", rec, "--stdio", "-s", body], capture_output=True, text=True
        ).stdout
    return {"loops": sampled_loops(annotated), "symbols": symbols, "body": body}


def samples_text(sampled: dict | None, perf_found: bool) -> str:
    """One kernel's line: the loops holding 5% of its body's samples or more, then its samples by function
    (its body and the functions it calls); "-" when perf gave nothing, a note when perf is missing."""
    if sampled is None:
        return "-" if perf_found else "no perf (linux-perf)"
    parts = []
    for loop in sampled["loops"]:
        if loop.share < 0.05:
            continue
        where = "outside loops" if loop.first < 0 else f"loop {loop.first:x}-{loop.last:x}"
        top = ", ".join(f"{m} {v:.0%}" for m, v in loop.top)
        parts.append(f"{where} {loop.share:.0%} ({loop.instructions} instructions, {loop.fmas} FMAs; {top})")
    calls = [f"{s} {v:.0%}" for s, v in sorted(sampled["symbols"].items(), key=lambda x: -x[1])]
    return "; ".join(parts) + (f" -- samples by function: {', '.join(calls)}" if calls else "")


def why(row: dict) -> str:
    """The smallest hard ceiling under the bar (FMA width, issue, bytes); else, where the arithmetic at the
    peak rate and the traffic kernel's time add up to most of the kernel's, the two not overlapping."""
    caps = [(row["lane_cap"], f"FMAs {row['lanes']} lanes wide")] if row["lanes"] else []
    if row["loop"] is not None:
        caps.append((row["loop"].issue_cap(row["native"]), "issue in the hot loop"))
    arith, moving = row["side_by_side"], row["bytes_share"]
    if moving:
        caps.append((arith / moving, "moving its bytes"))
    cap, reason = min(caps)
    if cap < BAR:
        return f"{reason} (at most {cap:.0%})"
    if arith + moving >= SERIAL:
        return (
            f"arithmetic and bytes one after the other: {arith:.0%} + {moving:.0%} of its time "
            f"(no overlap allows {arith / (arith + moving):.0%})"
        )
    return f"none of these (lowest ceiling {cap:.0%}: {reason})"


def main(argv: list[str]) -> int:
    ap = run_arguments(__doc__.split("\n")[0])
    ap.add_argument(
        "--all", action="store_true", help="every compute-bound kernel, not only those under the bar"
    )
    ap.add_argument("--samples", action="store_true", help="where each shown kernel's time goes (perf)")
    args = ap.parse_args(argv)
    if (opened := open_run(args)) is None:
        return 2
    peak, ids, specs = opened
    t0 = time.perf_counter()
    cfg = TimingConfig(rounds=args.rounds)
    rows, skipped = [], []
    built: dict[tuple[str, str], tuple] = {}  # (problem, kernel) -> (runtime module, arguments)
    for pid in ids:
        spec, skip = specs[pid]
        if spec is None:
            skipped.append(f"{pid}: {skip}")
            continue
        target = spec_target(spec)
        traffic = traffic_contender(target)
        native = native_lanes(target)
        code: dict[str, list[str]] = {}
        sources: dict[int, str] = {}  # a library's assembly, generated once (every kernel of main shares it)

        def extra(
            name, lib_mod, in_bytes, out_bytes, args, pid=pid, traffic=traffic, code=code, sources=sources
        ):
            built[(pid, name)] = (lib_mod, args)
            if id(lib_mod) not in sources:
                sources[id(lib_mod)] = lib_mod.inspect_source("asm")
            code[name] = kernel_asm(sources[id(lib_mod)], name)
            return {"bytes": traffic(in_bytes, out_bytes)}

        for r in measure(get_problem(pid), spec, peak, cfg, args.min_share, extra=extra):
            if r["bound"] != "compute":
                continue
            lines = code.get(r["kernel"], [])
            r["lanes"] = fma_lanes(lines)
            r["native"] = native
            r["lane_cap"] = min(1.0, (r["lanes"] or native) / native)
            r["loop"] = hot_loop(lines)
            r["bytes_share"] = statistics.median(
                b / k for b, k in zip(r["times"]["bytes"].samples, r["times"]["kernel"].samples, strict=True)
            )
            rows.append(r)
    shown = [r for r in rows if args.all or r["side_by_side"] < BAR]
    perf_found = shutil.which("perf") is not None
    if args.samples and perf_found:
        for r in shown:  # after every timing: the sampling runs beside nothing else
            lib_mod, call_args = built[(r["problem"], r["kernel"])]
            r["samples"] = perf_samples(lib_mod, r["kernel"], call_args)
    print(
        f"Profiles of compute-bound kernels, {time.strftime('%Y-%m-%d')}, {cpu_model()}, 1 thread, "
        f"{args.method}'s best candidates of {args.run_dir}, {args.rounds} interleaved rounds; "
        f"{'all' if args.all else 'those under ' + format(BAR, '.0%') + ' of the peak'}: {len(shown)} of {len(rows)}\n"
    )
    print(
        "| problem | kernel | side by side | bytes: share of its time | FMA lanes | hot loop: FMA / other vector "
        "/ loads / stores per iteration | issue allows | why |"
    )
    print("|---|---|---:|---:|---:|---|---:|---|")
    for r in shown:
        loop = r["loop"]
        if loop is not None:
            top = ", ".join(f"{m} {n}" for m, n in loop.other_vector.most_common(3))
            body = f"{loop.fmas} / {loop.others}{f' ({top})' if top else ''} / {loop.loads} / {loop.stores}"
        else:
            body = "no FMA loop"
        issue = f"{loop.issue_cap(r['native']):.0%}" if loop is not None else "-"
        print(
            f"| {r['problem']} | {r['kernel']} | {r['side_by_side']:.0%} | {r['bytes_share']:.0%} | "
            f"{r['lanes'] or '-'} | {body} | {issue} | {why(r)} |"
        )
    if shown:
        print(
            f"\nmedian share of time moving bytes: {statistics.median(r['bytes_share'] for r in shown):.0%}"
        )
    if args.samples and shown:
        print(f"\nWhere the time goes, sampled ({SAMPLE_SECONDS} s each under perf's cpu-clock):\n")
        for r in shown:
            print(f"- {r['problem']} {r['kernel']}: {samples_text(r.get('samples'), perf_found)}")
    for line in skipped:
        print(f"skipped {line}")
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
