"""`ekb`: the command line. Thin: parses arguments, calls the library, turns errors into one line."""

from __future__ import annotations

import logging
import os
import sys

import click

from ..errors import EKBError
from . import agent, backends, cluster, deploy, evaluate, farm, generate, problems, report
from .evaluate import demo


@click.group(invoke_without_command=True)
@click.option("-v", "--verbose", is_flag=True, help="Log what the library does.")
@click.pass_context
def cli(ctx, verbose):
    """EdgeKernelBench: judge kernels for edge devices -- compile, correctness against ONNX Runtime,
    speed against TVM and ONNX Runtime baselines.

    Without a command, runs the built-in demo: reference and rule-based candidates for the Level-1
    suite, evaluated on this machine's CPU (see `ekb demo --help`)."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    if ctx.invoked_subcommand is None:
        ctx.invoke(demo)


for _command in (
    problems.list_cmd,
    problems.show,
    problems.add_model_cmd,
    generate.generate,
    evaluate.eval_cmd,
    evaluate.run_cmd,
    evaluate.check,
    evaluate.baseline,
    report.report,
    backends.backends_cmd,
    backends.peak,
    evaluate.demo,
    farm.farm,
    cluster.cluster,
    agent.agent_cmd,
    agent.db,
    deploy.deploy_cmd,
):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="ekb", standalone_mode=False)
        return 0
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("ekb: aborted", err=True)
        return 130
    except EKBError as e:
        click.echo(f"ekb: error: {e}", err=True)
        return 2
    except KeyboardInterrupt:
        click.echo("ekb: interrupted; finished results are kept in the run store", err=True)
        return 130
    except SystemExit as e:
        return int(e.code or 0)
    except Exception as e:  # never a traceback for the user; EKB_DEBUG=1 shows it
        if os.environ.get("EKB_DEBUG"):
            raise
        click.echo(f"ekb: internal error: {type(e).__name__}: {e} (EKB_DEBUG=1 for a traceback)", err=True)
        return 1


def entry() -> None:
    sys.exit(main())
