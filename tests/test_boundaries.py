"""The house's import rules, tested rather than only drawn (ARCHITECTURE.md, section 2): surfaces never import
each other, ``core`` imports no surface (nor the app or CLI that compose them), the MCP and REST adapters
reach the stores only through the services, and no modules import each other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "triptych"
SURFACES = ("metronix", "hadron", "metergraph")
# Modules above the surfaces: they compose them, so nothing below may import them.
COMPOSERS = ("triptych.app", "triptych.cli", "triptych.supervisor", "triptych.peers", "triptych.__main__")


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every ``triptych`` module a file imports, at any depth (imports inside functions and under
    ``TYPE_CHECKING`` count); ``from package import module`` names the module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("triptych"):
                found.add(node.module)
                found.update(
                    f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in PATHS
                )
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("triptych"))
    return found


PATHS = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}
MODULES = {name: imports(path) for name, path in PATHS.items()}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_walk_found_every_layer() -> None:
    assert {layer(m) for m in MODULES} >= {"core", *SURFACES}


@pytest.mark.parametrize("surface", SURFACES)
def test_a_surface_never_imports_another(surface: str) -> None:
    crossings = [
        f"{module} imports {target}"
        for module, targets in MODULES.items()
        if layer(module) == surface
        for target in targets
        if layer(target) in SURFACES and layer(target) != surface
    ]
    assert not crossings, crossings


def test_core_imports_no_surface_and_nothing_above_it() -> None:
    upward = [
        f"{module} imports {target}"
        for module, targets in MODULES.items()
        if layer(module) == "core"
        for target in targets
        if target != "triptych" and layer(target) != "core"
    ]
    assert not upward, upward


def test_nothing_below_the_composers_imports_them() -> None:
    upward = [
        f"{module} imports {target}"
        for module, targets in MODULES.items()
        if module not in COMPOSERS
        for target in targets
        if target in COMPOSERS
    ]
    assert not upward, upward


def test_adapters_reach_stores_only_through_services() -> None:
    """A tool or REST module that imports a store module holds persistence, and so rules, of its own."""
    adapters = {m for m in MODULES if m.split(".")[-1] in {"tools", "rest", "memory_tools"} or ".tools." in m}
    assert len(adapters) >= 10
    leaks = [
        f"{module} imports {target}"
        for module in sorted(adapters)
        for target in MODULES[module]
        if target.split(".")[-1].endswith("store") and layer(target) != "core"
    ]
    assert not leaks, leaks


# The handles that rewrote SQLite's spellings into psycopg's as each statement ran, gone with 0290.
REWRITING_HANDLES = {"PortableDatabase", "PortableConnection"}
# What a store's statements reach PostgreSQL through, sent as written.
NATIVE_HANDLES = {"NativeDatabase", "NativeConnection"}


def rewrites(node: ast.AST) -> str | None:
    """What in ``node`` would put a rewriting handle between a store's SQL and psycopg, if anything."""
    names = {a.name for a in node.names} if isinstance(node, ast.ImportFrom) else set()
    if isinstance(node, ast.ClassDef):
        names.add(node.name)
        bases = {
            b.id if isinstance(b, ast.Name) else b.attr
            for b in node.bases
            if isinstance(b, ast.Name | ast.Attribute)
        }
        if bases & NATIVE_HANDLES:
            return f"class {node.name} subclasses {sorted(bases & NATIVE_HANDLES)}"
    if isinstance(node, ast.Name | ast.Attribute):
        names.add(node.id if isinstance(node, ast.Name) else node.attr)
    if names & REWRITING_HANDLES:
        return f"names {sorted(names & REWRITING_HANDLES)}"
    if (  # a placeholder rewrite by hand: ``sql.replace("?", "%s")``
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "replace"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "?"
    ):
        return 'calls .replace("?", ...)'
    return None


def test_no_store_s_sql_is_rewritten_on_its_way_to_postgresql() -> None:
    """Every store spells its SQL for each engine through a dialect (``core.dialect`` and the surfaces'
    extensions of it) and sends it as written through ``core.pg.NativeDatabase`` (docs/decisions/0220,
    0240 and 0290): no rewriting handle (``PortableDatabase``, ``PortableConnection``) comes back, no class
    wraps the native handle to rewrite on the way, and no module turns ``?`` into ``%s`` by hand."""
    found = sorted(
        f"{module}:{node.lineno}: {what}"
        for module, path in PATHS.items()
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if (what := rewrites(node)) is not None and hasattr(node, "lineno")
    )
    assert not found, found


# No circle is left (the last, webhooks <-> webhook_delivery, went with webhook_http.py); none may come back.
KNOWN_CIRCLES: list[set[str]] = []


def import_circles() -> list[set[str]]:
    """The strongly connected groups of two or more modules (Tarjan), a package's own modules excluded
    from its ``__init__``'s edges."""
    graph = {m: {t for t in targets if t in MODULES and t != m and not m.startswith(t + ".")}
             for m, targets in MODULES.items()}  # fmt: skip
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def test_no_modules_import_each_other_in_a_circle() -> None:
    new = [sorted(c) for c in import_circles() if c not in KNOWN_CIRCLES]
    assert not new, new


# -- adapters hold no rules (issue 29, item 5; docs/decisions/0141-tools-declared-at-module-level.md) ------

# The MCP tool modules of the three surfaces.
TOOL_MODULES = sorted(
    m
    for m in MODULES
    if m in {"triptych.metronix.tools", "triptych.metronix.memory_tools", "triptych.metergraph.tools"}
    or m.startswith("triptych.hadron.tools.")
)
# What a tool module may import: the tool layer and the argument bounds, its surface's services, its argument
# declarations and errors, the module that declares its handlers' context, the domain's values (URNs, records)
# and the other tool modules. Anything else (a store, an engine, the database, the access policy, the
# settings) is a rule or a resource that belongs behind a service.
TOOL_IMPORTS = {
    "metronix": (
        "triptych.metronix.knowledge", "triptych.metronix.memory", "triptych.metronix.sync",  # services
        "triptych.metronix.arguments", "triptych.metronix.errors",
        "triptych.metronix.access",  # Caller and the X-Agent-Id rule the handlers apply
        "triptych.metronix.tools",
    ),
    "hadron": (
        "triptych.hadron.services.", "triptych.hadron.errors", "triptych.hadron.identity",
        "triptych.hadron.domain.", "triptych.hadron.tools", "triptych.hadron.tools.",
    ),
    "metergraph": (
        "triptych.metergraph.analysis", "triptych.metergraph.incidents", "triptych.metergraph.replay",
        "triptych.metergraph.reports", "triptych.metergraph.traces", "triptych.metergraph.usage",
        "triptych.metergraph.workloads", "triptych.metergraph.workspace",  # services
        "triptych.metergraph.analysis_runner",  # RunSettings, the value start_analysis hands its service
        "triptych.metergraph.contract", "triptych.metergraph.errors",
        "triptych.metergraph.keys",  # AgentPrincipal, the handlers' context
    ),
}  # fmt: skip
SHARED_TOOL_IMPORTS = ("triptych.core.mcp", "triptych.core.bounds")


def allowed_in_a_tool_module(surface: str, target: str) -> bool:
    if target == "triptych" or target in SHARED_TOOL_IMPORTS:  # the package root: __version__
        return True
    return any(
        target == prefix or (prefix.endswith(".") and target.startswith(prefix))
        for prefix in TOOL_IMPORTS[surface]
    )


def test_tool_modules_import_only_services_arguments_and_errors() -> None:
    assert len(TOOL_MODULES) >= 20, TOOL_MODULES
    leaks = [
        f"{module} imports {target}"
        for module in TOOL_MODULES
        for target in sorted(MODULES[module])
        if not allowed_in_a_tool_module(layer(module), target)
    ]
    assert not leaks, leaks


def test_a_tool_module_nests_no_function_so_every_handler_is_a_module_level_name() -> None:
    nested = []
    for module in TOOL_MODULES:
        path = SRC.parent / (module.replace(".", "/") + ".py")
        if not path.exists():
            path = path.with_suffix("") / "__init__.py"
        for top in ast.parse(path.read_text()).body:
            if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = [
                    n
                    for n in ast.walk(top)
                    if n is not top and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                ]
                nested += [f"{module}.{top.name} defines a function at line {n.lineno}" for n in inner]
    assert not nested, nested


def declared(modules: list[Any]) -> dict[str, tuple[Any, str]]:
    """Every ``DeclaredTool`` a module-level name of ``modules`` holds, alone or in a list: tool name ->
    (tool, where)."""
    from triptych.core.mcp import DeclaredTool

    found: dict[str, tuple[Any, str]] = {}
    for module in modules:
        for attr, value in vars(module).items():
            for item in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(item, DeclaredTool) and item.name not in found:
                    found[item.name] = (item, f"{module.__name__}.{attr}")
    return found


def test_every_registered_tool_is_a_module_level_declaration_with_its_handler_beside_it() -> None:
    """Walked without building a surface: each tool the surfaces register is a name in its tool module,
    and so is its handler."""
    import importlib

    from triptych.hadron.tools import TOOLS as HADRON_TOOLS
    from triptych.hadron.tools.catalog import DECLARED
    from triptych.metergraph.contract import TOOLS_BY_NAME
    from triptych.metergraph.tools import TOOLS as METERGRAPH_TOOLS
    from triptych.metronix.memory_tools import MEMORY_TOOLS
    from triptych.metronix.tools import KNOWLEDGE_TOOLS, SYNC_TOOLS

    modules = [importlib.import_module(m) for m in TOOL_MODULES]
    walked = declared(modules)
    metronix = [*KNOWLEDGE_TOOLS, *SYNC_TOOLS, *MEMORY_TOOLS]
    for registered in (metronix, DECLARED, METERGRAPH_TOOLS):
        names = [tool.name for tool in registered]
        assert len(names) == len(set(names)), names
        for tool in registered:
            assert tool.name in walked, f"{tool.name} is not a module-level name of a tool module"
            handler = tool.handler
            home = importlib.import_module(handler.__module__)
            assert getattr(home, handler.__name__) is handler, (
                f"{tool.name}: handler {handler.__qualname__} is nested"
            )
    assert sorted(t.name for t in DECLARED) == sorted(HADRON_TOOLS)
    assert [t.name for t in METERGRAPH_TOOLS] == list(TOOLS_BY_NAME)
    assert set(walked) == {t.name for t in metronix} | set(HADRON_TOOLS) | set(TOOLS_BY_NAME)
