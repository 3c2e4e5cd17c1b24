"""`ekb farm tracker|server|status`: a device farm over TVM RPC."""

from __future__ import annotations

import json
import sys

import click
from rich.table import Table
from rich.text import Text

from .common import _tracker_option, console


# ------------------------------------------------------------------------------------------ farm
@click.group()
def farm():
    """A device farm over TVM RPC: a tracker, and one server per device under its profile's rpc_key.
    `ekb eval RUN_DIR --backend rpi5 --tracker HOST:9190` then judges on the devices of key rpi5."""


@farm.command("tracker")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=9190, show_default=True)
def farm_tracker(host, port):
    """Run TVM's RPC tracker (python -m tvm.exec.rpc_tracker) until interrupted."""
    from ..backends.rpc import run_tracker

    try:
        run_tracker(host, port, echo=lambda m: click.echo(m, err=True))
    except KeyboardInterrupt:
        click.echo("ekb farm tracker: stopped", err=True)


@farm.command("server")
@click.option("--key", required=True, help="Device key: the rpc_key of the device's profile (e.g. rpi5).")
@_tracker_option
@click.option(
    "--host", help="Address to listen on (default: 127.0.0.1 with a loopback tracker, else 0.0.0.0)."
)
@click.option(
    "--port", type=click.IntRange(1, 65535), default=9090, show_default=True, help="First port tried."
)
@click.option(
    "--port-end", type=click.IntRange(1, 65535), default=9199, show_default=True, help="Last port + 1."
)
@click.option(
    "--threads",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="The runtime's threads (TVM_NUM_THREADS).",
)
def farm_server(key, tracker, host, port, port_end, threads):
    """Run TVM's RPC server for this machine under KEY, registered with the tracker; it keeps serving
    when a session's process dies (a crashing kernel), and times the onnxruntime baseline here when
    onnxruntime is installed (python -m edgekernelbench.backends.farm_server)."""
    import signal

    from ..backends.rpc import default_tracker, serve_device, server_host_for

    tracker = tracker or default_tracker()

    def _term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _term)
    try:
        rc = serve_device(
            key,
            tracker,
            host or server_host_for(tracker),
            port,
            max(port_end, port + 1),
            threads=threads,
        )
    except KeyboardInterrupt:
        click.echo(f"ekb farm server: stopped ({key})", err=True)
        rc = 0
    sys.exit(rc)


@farm.command("status")
@_tracker_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def farm_status_cmd(tracker, as_json):
    """The tracker's devices: per key, how many are registered, free and requested."""
    from ..backends.rpc import farm_status

    st = farm_status(tracker)
    if as_json:
        click.echo(json.dumps(st.to_dict(), indent=1))
        return
    data = st.to_dict()["keys"]
    t = Table(title=f"RPC tracker {st.tracker}: {len(st.servers)} device server(s)")
    for c in ("key", "devices", "free", "pending", "servers"):
        t.add_column(c, overflow="fold", justify="right" if c in ("devices", "free", "pending") else "left")
    for key, row in data.items():
        counts = [str(row[c]) for c in ("devices", "free", "pending")]
        t.add_row(Text(key), *counts, Text(" ".join(row["servers"])))
    console.print(t)
