"""End-to-end timing of a host artifact, in a fresh process (`python -m edgekernelbench.deploy.timing DIR`,
started by deploy/verification.py with TVM_NUM_THREADS = the artifact's threads): the deployed library
loaded as it is (tvm.runtime.load_module of model.so), tvm-default built here from the artifact's model as
the judge builds it (the model's own graph, TVM's stock `tvm.compile` for the profile's target, without the
artifact's target attributes), and ONNX Runtime (its native timer, else Python with I/O binding), all with
the harness's protocol (harness/timing.py: interleaved rounds, paired speedups with confidence intervals, the
timing thread pinned, the machine watched). Each contender runs `main` on the same inputs: the deployed
library with the artifact's weights (re-laid out for its graph), tvm-default with the model's own weights
after its main_transform_params, ONNX Runtime on the model with its weights inside. Prints one JSON line."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

DEPLOYED = "deployed"


def load_weights(folder: Path, manifest: dict) -> list[np.ndarray]:
    return [
        np.fromfile(folder / w["file"], dtype=w["dtype"]).reshape(w["shape"]) for w in manifest["weights"]
    ]


def time_artifact(folder: Path, quick: bool = False, seed: int = 0) -> dict:
    import tvm

    from ..backends.base import BackendProfile, Built
    from ..baselines.ort_isa import apply_pin, plan_pin
    from .artifact import read_manifest

    manifest = read_manifest(folder)
    profile = BackendProfile.from_dict(manifest["backend"]["profile"])
    pin, why = plan_pin(profile)  # ONNX Runtime held to a pinned profile's ISA, before it is loaded
    ort_isa = apply_pin(pin.to_dict() if pin else None, why)

    from ..backends.host import LocalBackend, LocalLoaded
    from ..baselines.onnxruntime import ort_contender
    from ..baselines.ort_native import resolve_library
    from ..baselines.tvm_default import tvm_default_module
    from ..harness.timing import MachineWatch, TimingConfig, paired_speedup, pin_thread, time_interleaved
    from ..reference import build_reference
    from .artifact import graph_module, transformed_weights
    from .model import artifact_problem

    problem = artifact_problem(folder, manifest)
    cfg = TimingConfig.quick() if quick else TimingConfig()
    dev = tvm.cpu(0)
    inputs = problem.sample_inputs(seed)
    args = [tvm.runtime.tensor(np.asarray(inputs[s["name"]], order="C"), dev) for s in manifest["inputs"]]

    lib = tvm.runtime.load_module(str(folder / manifest["library"]["file"]))
    deployed = LocalLoaded(Built(lib, None, 0.0), dev)
    reference = build_reference(problem)
    backend = LocalBackend(profile)
    default = backend.build(graph_module(tvm_default_module(reference.module, backend.target())), stock=True)
    default_args = args + [tvm.runtime.tensor(w, dev) for w in transformed_weights(reference)]
    contenders = {
        DEPLOYED: deployed.timer(
            "main", args + [tvm.runtime.tensor(w, dev) for w in load_weights(folder, manifest)]
        ),
        "tvm-default": LocalLoaded(default, dev).timer("main", default_args),
    }
    lib_path, unavailable = resolve_library()
    ort_run, ort_how = ort_contender(problem, inputs, profile.threads, lib_path, unavailable)
    contenders["onnxruntime"] = ort_run
    cpu = pin_thread() if profile.threads == 1 else None
    with MachineWatch() as watch:
        times = time_interleaved(contenders, cfg)
    speedups = {}
    for name in ("tvm-default", "onnxruntime"):
        s, lo, hi = paired_speedup(times[name], times[DEPLOYED])
        speedups[name] = {"speedup": s, "ci": [lo, hi]}
    return {
        "protocol": asdict(cfg),
        "threads": profile.threads,
        "pinned_cpu": cpu,
        "timings": {name: asdict(t) for name, t in times.items()},
        "speedups": speedups,
        "onnxruntime_timer": ort_how,
        "onnxruntime_isa": ort_isa,
        "timing_env": watch.summary(),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgekernelbench.deploy.timing")
    ap.add_argument("dir", type=Path)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    from ..errors import EKBError, last_line

    try:
        out = time_artifact(a.dir, a.quick, a.seed)
    except EKBError as e:
        print(json.dumps({"error": str(e)}))
        return 2
    except Exception as e:  # noqa: BLE001 -- reported to the parent in one line
        print(json.dumps({"error": last_line(e, 500)}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
