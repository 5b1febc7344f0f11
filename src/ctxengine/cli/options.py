"""The options ``replay`` and ``bench`` (and ``eval``) share, as typer annotations: ``--llm``,
``--llm-base-url``, ``--llm-timeout``, ``--models``, ``--model``. Apart from ``cli.common`` (which
still answers ``common.LlmOption`` and the others) so that what a command runs, ``common``
included, does not import typer: ``cli.launch_replay`` runs a plain ``replay`` without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, TypeAlias

import typer

__all__ = ["LlmBaseUrlOption", "LlmOption", "LlmTimeoutOption", "ModelOption", "ModelsOption"]

# the options both commands take (the default stays with each command: ``= None``, ``= 120.0``)
LlmOption: TypeAlias = Annotated[
    str | None, typer.Option(help="PROVIDER:MODEL for notes and summaries (anthropic or openai).")
]
LlmBaseUrlOption: TypeAlias = Annotated[
    str | None, typer.Option(help="Base URL of the LLM server (OpenAI-compatible servers too).")
]
LlmTimeoutOption: TypeAlias = Annotated[float, typer.Option(help="Seconds per LLM request.")]
ModelsOption: TypeAlias = Annotated[
    Path | None, typer.Option(help="TOML file overriding model prices/windows.")
]
ModelOption: TypeAlias = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Model of the sessions whose transcript names none (e.g. tau-bench and SWE-agent 0.x "
        "files: see their source); transcripts that name one keep it.",
    ),
]
