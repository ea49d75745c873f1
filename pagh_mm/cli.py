"""The ``pagh-mm`` command."""
from __future__ import annotations

import click

from . import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pagh-mm")
def main() -> None:
    """Compressed matrix multiplication: estimate A @ B and find its large entries."""


@main.command()
def info() -> None:
    """Versions, CuPy and GPU status."""
    import numpy as np

    from fwht_gpu.cuda import launch
    click.echo(f"pagh_mm {__version__}, numpy {np.__version__}")
    click.echo(f"GPU: {launch.status()}")
