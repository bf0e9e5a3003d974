"""The `relevo` command line: one module per command group, on top of everything else."""

from worker.cli.main import main

__all__ = ["main"]
