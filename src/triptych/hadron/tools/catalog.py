"""Every Hadron tool declaration, in the order ``tools/list`` shows them: walk it to see each tool's name,
schema and handler without building a surface (the surface registers it with its services)."""

from __future__ import annotations

from triptych.hadron.tools import (
    actions,
    apps,
    chat,
    edges,
    gitsync,
    locks,
    memories,
    node_reads,
    nodes,
    objects,
    registers,
    replace,
    scopes,
    search,
    server_info,
    sessions,
    validate,
    workers,
    worklog,
)
from triptych.hadron.tools.base import HadronTool

FAMILIES = (memories, apps, server_info, nodes, edges, node_reads, replace, locks, objects, validate, search,
            scopes, sessions, workers, chat, registers, worklog, actions, gitsync)  # fmt: skip
DECLARED: list[HadronTool] = [tool for family in FAMILIES for tool in family.TOOLS]
