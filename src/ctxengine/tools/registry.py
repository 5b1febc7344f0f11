"""Every agent tool in one ``ToolExecutor``: read, grep, glob, retrieve, expand, search,
open_files, close_files and instructions, bound to one workspace (and one session's store for
retrieve, expand and search).

``default_executor(root)`` is what the MCP server and an embedding agent loop use. ``build_tools``
returns the same executor plus the stateful parts an engine needs to reach:

- ``read_state``: the read dedup cache; call ``read_state.reset()`` after a compaction (the
  content the stubs point at may be gone from the context);
- ``working_set``: the open-files block; attach it as ``working_set`` documents
  (``ws.changed`` / ``ws.block_message(newest_user_turn)``), call ``ws.invalidate()`` after a
  compaction;
- ``search_index()``: the search index, built at the first search (the index file is only
  created in ``<root>/.ctxengine/`` when search is used, unless ``index_path`` says elsewhere).

A ``read`` of an open file counts as an access in the working set (LRU), as a grep hit does in
Letta; it never changes the rendered block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxengine.store.base import SessionStore
from ctxengine.store.sqlite import SQLiteStore
from ctxengine.tokens.counter import TokenCounter
from ctxengine.tools import bootstrap as bootstrap_tools
from ctxengine.tools import expand as expand_tools
from ctxengine.tools import grep as grep_tools
from ctxengine.tools import read as read_tools
from ctxengine.tools import retrieve as retrieve_tools
from ctxengine.tools import search as search_tools
from ctxengine.tools import working_set as ws_tools
from ctxengine.tools.base import ToolExecutor, ToolSpec
from ctxengine.tools.read import ReadState
from ctxengine.tools.search import Embedder, SearchIndex
from ctxengine.tools.working_set import FileLimits, WorkingSet
from ctxengine.tools.workspace import Workspace

DEFAULT_SESSION = "default"


@dataclass
class Toolbox:
    """The executor and the tools' shared state."""

    executor: ToolExecutor
    workspace: Workspace
    store: SessionStore
    session: str
    read_state: ReadState
    working_set: WorkingSet
    index_path: str | Path | None = None
    embedder: Embedder | None = None
    _index: SearchIndex | None = field(default=None, repr=False)

    def search_index(self) -> SearchIndex:
        """The search index (opened at the first call)."""
        if self._index is None:
            self._index = SearchIndex(
                self.workspace,
                self.index_path,
                store=self.store,
                session=self.session,
                embedder=self.embedder,
            )
        return self._index

    def close(self) -> None:
        """Close the search index (the store belongs to the caller)."""
        if self._index is not None:
            self._index.close()
            self._index = None


def _touching(spec: ToolSpec, ws: WorkingSet) -> ToolSpec:
    """``spec`` (read) whose calls also count as an access to the file in ``ws``."""
    run = spec.run

    def touched(**arguments: Any) -> str:
        out = run(**arguments)
        path = arguments.get("path")
        if isinstance(path, str):
            ws.touch(path)
        return out

    return ToolSpec(spec.name, spec.description, spec.parameters, touched)


def build_tools(
    workspace_root: str | Path | Workspace,
    store: SessionStore | None = None,
    session: str | None = None,
    *,
    window: int | None = None,
    file_limits: FileLimits | None = None,
    index_path: str | Path | None = None,
    embedder: Embedder | None = None,
    counter: TokenCounter | None = None,
    read_state: ReadState | None = None,
) -> Toolbox:
    """All of ctxengine's agent tools, confined to one workspace.

    The tools: read, grep, retrieve, search, the working set's and the bootstrap files'.

    Args:
        workspace_root: the directory the tools are confined to (or its ``Workspace``).
        store: where retrieve finds offloaded results (None: an empty in-memory ``SQLiteStore``,
            so retrieve finds nothing).
        session: the session's id in ``store`` (None: ``"default"``).
        window: the model's window, tokens; sets the working-set limits (Letta's table).
        file_limits: the working set's limits, instead of the window's.
        index_path: the search index file (None: ``<root>/.ctxengine/search.sqlite``;
            ``":memory:"`` keeps it off the disk).
        embedder: enables semantic search, when given.
        counter: the token counter of the read and retrieve tools' limits.
        read_state: what was read already, shared with another toolbox (None: a new one).

    Returns:
        The ``Toolbox``: its executor with every tool registered, the workspace, the store and
        the working set.

    Raises:
        ToolError: when ``workspace_root`` is not a directory.
    """
    ws_root = workspace_root if isinstance(workspace_root, Workspace) else Workspace(workspace_root)
    the_store: SessionStore = store if store is not None else SQLiteStore(":memory:")
    sid = session or DEFAULT_SESSION
    state = read_state if read_state is not None else ReadState()
    working = WorkingSet(ws_root, window=window, limits=file_limits)
    executor = ToolExecutor()
    box = Toolbox(executor, ws_root, the_store, sid, state, working, index_path, embedder)
    for spec in read_tools.specs(ws_root, state, counter):
        executor.register(_touching(spec, working))
    for spec in grep_tools.specs(ws_root):
        executor.register(spec)
    for spec in retrieve_tools.specs(the_store, sid, counter):
        executor.register(spec)
    for spec in expand_tools.specs(the_store, sid):
        executor.register(spec)
    for spec in search_tools.specs(box.search_index, artifacts=True, semantic=embedder is not None):
        executor.register(spec)
    for spec in ws_tools.specs(working):
        executor.register(spec)
    for spec in bootstrap_tools.specs(ws_root):
        executor.register(spec)
    return box


def default_executor(
    workspace_root: str | Path, store: SessionStore | None = None, session: str | None = None
) -> ToolExecutor:
    """A ``ToolExecutor`` with every tool (read, grep, glob, retrieve, search, open_files,
    close_files, instructions) on ``workspace_root`` and ``session``'s artifacts in ``store``."""
    return build_tools(workspace_root, store, session).executor
