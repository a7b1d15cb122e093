"""Command line entry point: ``glm-operator <subcommand>``.

Each subcommand lives in ``glm_operator.commands.<name>`` and exposes
``register(subparsers: argparse._SubParsersAction) -> None`` which adds its parser and sets
``func`` (``Callable[[argparse.Namespace], int]``) as default. Errors a user can fix are raised
as :class:`UserError` and printed as one line, never as a traceback. A command whose reader goes
away (``glm-operator plan ... | head``) ends quietly, as Unix tools do.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence

from glm_operator import __version__

COMMANDS = ("estimate", "plan", "run", "gateway", "loadtest")


class UserError(Exception):
    """An error caused by input the user can fix; printed as a single line."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="glm-operator",
        description="Plan and serve GLM-family models with vLLM on Kubernetes GPU clusters.",
    )
    parser.add_argument("--version", action="version", version=f"glm-operator {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"glm_operator.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"glm_operator.commands.{name}":
                continue  # subcommand not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(build_parser(), argv)


def dispatch(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Run the ``func`` of the subcommand ``argv`` names; the exit status, as ``main`` returns it.

    The developer tools' entry point (``python -m devtools``) runs its commands the same way.
    """
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        code = int(func(args))
        sys.stdout.flush()  # a reader that went away shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        # The reader went away (``| head``): end quietly with the status a shell gives a tool that
        # SIGPIPE ended; the exit's own flush of stdout would fail again, so stdout goes nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    # `python -m glm_operator.cli` runs this file as __main__: the commands raise the UserError of
    # glm_operator.cli, not this copy's, so run the package module's main (one line, not a traceback)
    from glm_operator.cli import main as package_main

    sys.exit(package_main())
