"""hadron_find_nodes (keyword, vector, hybrid, regex, survey) and hadron_search (entities by id, URN or name).

Order of work for a node search: decide the memories (the search ladder, ``ScopeService``), build the
structural filter (memories, objectType, isRunnable, parentRel subtree, ``where``), let the mode rank
the survivors inside the query (so ``limit`` is honest), then apply ``minScore``, ``expand`` and
``granularity``. Every answer carries the scope line, even an empty one.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from triptych.core.regex import LinearPattern, RegexRefused
from triptych.core.search import Vector, keyword_terms, rrf
from triptych.hadron.access import AccessPolicy, require_identity
from triptych.hadron.domain.loc import is_id, node_urn
from triptych.hadron.domain.model import Memory, NodeRecord
from triptych.hadron.domain.urn import has_scheme_prefix
from triptych.hadron.domain.where import compile_where
from triptych.hadron.errors import BadInput
from triptych.hadron.identity import HadronCaller
from triptych.hadron.search_store import NodeFilter, SearchStore
from triptych.hadron.services.agents import AgentService
from triptych.hadron.services.embedding import NodeEmbedder
from triptych.hadron.services.nodes import NodeService
from triptych.hadron.services.scopes import ScopeService, SearchScope
from triptych.hadron.services.selection import SessionState
from triptych.hadron.store import TenancyStore

MODES = ("keyword", "vector", "hybrid", "regex")
MAX_REGEX = 500
# hadron_search's query, in characters: room for the longest node URN (32 loc atoms of 64), far below
# what an engine refuses (SQLite's LIKE takes patterns of at most 50,000 bytes).
MAX_SEARCH_QUERY = 4096
PASSAGE_CHARS = 600
ENTITY_TYPES = ("organization", "memory", "node", "agent", "app", "aiServiceConfig", "user")
SEARCH_FIELDS = ("urn", "name", "description", "pk", "content")
ENTITY_CAP = 200  # candidates per entity type before ranking


@dataclass(frozen=True, slots=True)
class FindQuery:
    query: str
    mode: str = "keyword"
    scope: str | None = None
    parent_rel: str | None = None
    memory_urn: str | None = None
    memory_urns: tuple[str, ...] | None = None
    all_memories: bool = False
    object_type: str | None = None
    where: Any = None
    is_runnable: bool | None = None
    brief: bool = False
    limit: int = 20
    min_score: float | None = None
    expand: int = 0
    granularity: str = "node"


@dataclass
class Hit:
    memory: Memory
    node: NodeRecord
    score: float | None
    keyword_score: float | None = None
    vector_score: float | None = None
    expanded_from: str | None = None
    passage: dict[str, Any] | None = None


@dataclass
class FindResult:
    view: SearchScope
    mode: str
    survey: bool
    hits: list[Hit]
    degraded: list[str] = field(default_factory=list)


class SearchService:
    def __init__(
        self,
        tenancy: TenancyStore,
        access: AccessPolicy,
        nodes: NodeService,
        scopes: ScopeService,
        store: SearchStore,
        embedder: NodeEmbedder,
        agents: AgentService,
    ) -> None:
        self.agents = agents
        self.tenancy = tenancy
        self.access = access
        self.nodes = nodes
        self.scopes = scopes
        self.store = store
        self.embedder = embedder
        # A hybrid search embeds its query while the keyword side runs (onnxruntime releases the GIL).
        self._query_embedding = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hadron-query-embed")

    def close(self) -> None:
        """Stop the query-embedding threads, joined (an embedding in flight finishes first)."""
        self._query_embedding.shutdown(wait=True, cancel_futures=True)

    # ── which memories ──────────────────────────────────────────────────

    def _explicit(
        self, caller: HadronCaller, q: FindQuery
    ) -> tuple[SearchScope | None, tuple[str, str] | None]:
        subtree: tuple[str, str] | None = None
        if q.parent_rel:
            ref = self.nodes.parse_ref(q.parent_rel)
            if ref.memory is not None:
                memory = self.access.read_memory(caller, ref.memory)[0]
            elif q.memory_urn:
                memory = self.access.read_memory(caller, q.memory_urn)[0]
            else:
                raise BadInput(
                    "parentRel without a memory: pass a full node URN or memoryUrn (search never uses the "
                    "active memory)",
                    details={"field": "parentRel"},
                )
            subtree = (memory.id, ref.loc)
            label = f"parentRel {node_urn(memory.root, memory.slug, ref.loc)} (its subtree)"
            return SearchScope("parentRel", label, [memory]), subtree
        if q.memory_urn or q.memory_urns:
            memories: list[Memory] = []
            dropped = 0
            if q.memory_urn:
                memories.append(self.access.read_memory(caller, q.memory_urn)[0])
            for memory_ref in q.memory_urns or ():
                found = self.access.find_memory(memory_ref)
                if found is not None and self.access.memory_level(caller, found) is not None:
                    if found.id not in {m.id for m in memories}:
                        memories.append(found)
                else:
                    dropped += 1
            rung = "memoryUrn" if q.memory_urn and not q.memory_urns else "memoryUrns"
            return SearchScope(rung, f"{rung} (named in the call)", memories, dropped), None
        if q.all_memories:
            readable = [m for m, _ in self.access.readable(caller)]
            return SearchScope("allMemories", "allMemories (every memory you can read)", readable), None
        return None, None

    def search_scope(
        self, caller: HadronCaller, state: SessionState, q: FindQuery
    ) -> tuple[SearchScope, tuple[str, str] | None]:
        require_identity(caller)
        explicit, subtree = self._explicit(caller, q)
        if q.scope is not None and q.scope.strip():
            named = self.scopes.named(caller, state, q.scope.strip())
            if explicit is None:
                return named, None
            allowed = {m.id for m in named.memories}
            kept = [m for m in explicit.memories if m.id in allowed]
            outside = len(explicit.memories) - len(kept)
            view = SearchScope(
                explicit.rung,
                f"{explicit.label} ∩ {named.label}",
                kept,
                explicit.dropped + named.dropped,
                [f"{outside} named memor{'y' if outside == 1 else 'ies'} outside the scope"]
                if outside
                else [],
            )
            return view, subtree
        if explicit is not None:
            return explicit, subtree
        return self.scopes.ladder(caller, state), None

    # ── find_nodes ──────────────────────────────────────────────────────

    def edge_summaries(self, caller: HadronCaller, hits: Sequence[Hit]) -> dict[str, list[dict[str, Any]]]:
        """Each hit's outgoing edges as (id, loc, name, target urn), read in one query for the whole page."""
        edges = self.nodes.graph.edges_from([h.node.id for h in hits])
        out: dict[str, list[dict[str, Any]]] = {}
        for node_id, records in edges.items():
            views = [self.nodes.edge_view(caller, edge) for edge in records]
            out[node_id] = [
                {
                    "id": v["id"],  # what hadron_update_edge and hadron_delete_edge take
                    "loc": v["loc"],
                    "name": v["name"],
                    "target": v["target"].get("urn") if v["target"] else None,
                }
                for v in views
            ]
        return out

    def find_nodes(self, caller: HadronCaller, state: SessionState, q: FindQuery) -> FindResult:
        if q.mode not in MODES:
            raise BadInput(f"mode must be one of {', '.join(MODES)}", details={"field": "mode"})
        predicate = compile_where(q.where) if q.where is not None else None
        pattern = self._regex(q.query) if q.mode == "regex" and q.query.strip() not in ("", "*") else None
        view, subtree = self.search_scope(caller, state, q)
        survey = q.query.strip() in ("", "*")
        result = FindResult(view, q.mode, survey, [])
        memories = {m.id: m for m in view.memories}
        if not memories:
            return result
        f = NodeFilter(tuple(memories), q.object_type, q.is_runnable, subtree, predicate)
        scored: list[tuple[int, float | None, float | None, float | None]]  # rowid, score, keyword, vector
        if survey:
            scored = [(r, None, None, None) for r in self.store.survey(f, q.limit)]
        elif q.mode == "regex":
            assert pattern is not None
            scored = [(r, s, None, None) for r, s in self.store.regex(f, pattern, q.limit)]
        elif q.mode == "keyword":
            scored = [(r, s, s, None) for r, s in self._keyword(f, q.query, q.limit, result)]
        elif q.mode == "vector":
            scored = [(r, s, None, s) for r, s in self._vector(f, q.query, q.limit, result)]
        else:
            scored = self._hybrid(f, q.query, q.limit, result)
        if q.min_score is not None and not survey:
            scored = [x for x in scored if x[1] is not None and x[1] >= q.min_score]
        rows = self.store.nodes_by_rowid([x[0] for x in scored])
        for rowid, score, kw, vec in scored:
            node = rows.get(rowid)
            if node is not None:
                result.hits.append(Hit(memories[node.memory_id], node, score, kw, vec))
        if q.expand:
            result.hits += self._expand(caller, result.hits, memories, q.expand)
        if q.granularity == "chunk":
            terms = keyword_terms(q.query) if not survey else []
            for hit in result.hits:
                hit.passage = _passage(hit.node.content or "", terms, pattern)
        return result

    @staticmethod
    def _regex(text: str) -> LinearPattern:
        if len(text) > MAX_REGEX:
            raise BadInput(f"a regex is at most {MAX_REGEX} characters", details={"field": "query"})
        try:
            return LinearPattern(text)
        except RegexRefused as exc:
            raise BadInput(
                f"invalid regex: {exc} (RE2 syntax: no backreferences or lookaround)",
                details={"field": "query", "reason": "invalid-regex"},
            ) from exc

    def _keyword(self, f: NodeFilter, query: str, limit: int, result: FindResult) -> list[tuple[int, float]]:
        if not keyword_terms(query):
            result.degraded.append("no_terms")
            return []
        return [(r, round(s, 4)) for r, s in self.store.keyword(f, query, limit)]

    def _vector(
        self, f: NodeFilter, query: str, k: int, result: FindResult, pending: Future[Vector] | None = None
    ) -> list[tuple[int, float]]:
        if not self.embedder.available:
            result.degraded.append("embedding_unavailable")
            return []
        indexed = [m for m in f.memory_ids if self.store.vector_count(m) > 0]
        if len(indexed) < len(f.memory_ids):
            result.degraded.append("no_vector_index")
        if not indexed:
            return []
        qvec = pending.result() if pending is not None else self.embedder.query_vector(query)
        hits: list[tuple[int, float]] = []
        for memory_id in indexed:
            one = NodeFilter((memory_id,), f.object_type, f.runnable, f.subtree, f.where)
            if f.subtree is not None and f.subtree[0] != memory_id:
                continue
            if not one.structural:
                hits += self.store.vector(memory_id, qvec, k)
                continue
            # Filters first: the best-ranked survivors among the top candidates are the best survivors
            # overall whenever k of them survive; otherwise rank the exact survivor set.
            width = max(k * 10, 200)
            candidates = self.store.vector(memory_id, qvec, width)
            keep = self.store.filter_rowids(one, [r for r, _ in candidates])
            found = [(r, s) for r, s in candidates if r in keep][:k]
            if len(found) < k and len(candidates) >= width:
                found = self.store.vector_subset(memory_id, qvec, self.store.all_rowids(one, memory_id), k)
            hits += found
        hits.sort(key=lambda x: -x[1])
        return [(r, round(s, 4)) for r, s in hits[:k]]

    def _hybrid(
        self, f: NodeFilter, query: str, limit: int, result: FindResult
    ) -> list[tuple[int, float | None, float | None, float | None]]:
        width = max(50, 3 * limit)
        pending = (
            self._query_embedding.submit(self.embedder.query_vector, query)
            if self.embedder.available
            else None
        )
        keyword = self._keyword(f, query, width, result)
        vector = self._vector(f, query, width, result, pending)
        kw, vec = dict(keyword), dict(vector)
        fused = rrf([[r for r, _ in keyword], [r for r, _ in vector]])
        ranked = sorted(fused.items(), key=lambda x: -x[1])[:limit]
        return [(r, round(s, 4), kw.get(r), vec.get(r)) for r, s in ranked]

    def _expand(
        self, caller: HadronCaller, hits: list[Hit], memories: dict[str, Memory], hops: int
    ) -> list[Hit]:
        """Neighbours along outgoing edges, ``hops`` deep, inside the searched memories; never score-trimmed."""
        seen = {h.node.id for h in hits}
        frontier = [(h.node, h.memory) for h in hits]
        out: list[Hit] = []
        for _ in range(hops):
            edges = self.nodes.graph.edges_from([n.id for n, _ in frontier])
            nxt: list[tuple[NodeRecord, Memory]] = []
            for source, memory in frontier:
                for edge in edges.get(source.id, []):
                    target = self.nodes.graph.node_by_id(edge.target_id) if edge.target_id else None
                    if target is None and edge.target_memory_id and edge.target_loc:
                        target = self.nodes.graph.node_by_loc(edge.target_memory_id, edge.target_loc)
                    if target is None or target.id in seen or target.memory_id not in memories:
                        continue
                    seen.add(target.id)
                    origin = node_urn(memory.root, memory.slug, source.loc)
                    out.append(Hit(memories[target.memory_id], target, None, expanded_from=origin))
                    nxt.append((target, memories[target.memory_id]))
            frontier = nxt
        return out

    # ── hadron_search ───────────────────────────────────────────────────

    def entities(
        self,
        caller: HadronCaller,
        state: SessionState,
        query: str,
        entity_types: Sequence[str] | None,
        fields: Sequence[str] | None,
        scope: str | None,
        limit: int,
    ) -> tuple[list[dict[str, Any]], list[str], SearchScope | None]:
        require_identity(caller)
        needle = query.strip()
        if not needle:
            raise BadInput("query must not be empty", details={"field": "query"})
        if len(needle) > MAX_SEARCH_QUERY:
            raise BadInput(
                f"query is {len(needle)} characters; hadron_search takes at most {MAX_SEARCH_QUERY} "
                "(an id, URN or name)",
                details={"field": "query", "max": MAX_SEARCH_QUERY},
            )
        kinds = list(entity_types or ENTITY_TYPES)
        for kind in kinds:
            if kind not in ENTITY_TYPES:
                raise BadInput(f"entityTypes: {kind!r} is not one of {', '.join(ENTITY_TYPES)}")
        if fields:
            for name in fields:
                if name not in SEARCH_FIELDS:
                    raise BadInput(f"fields: {name!r} is not one of {', '.join(SEARCH_FIELDS)}")
            use = list(fields)
        elif is_id(needle):
            use = ["pk"]
        elif has_scheme_prefix(needle.lower()):
            use = ["urn"]
        else:
            use = ["name", "urn"]
        view: SearchScope | None = None
        if scope and scope.strip():
            view = self.scopes.named(caller, state, scope.strip())
        elif state.scope_id:
            ladder = self.scopes.ladder(caller, state)
            view = ladder if ladder.rung == "active-scope" else None
        memories = view.memories if view is not None else [m for m, _ in self.access.readable(caller)]
        degraded: list[str] = []
        hits: list[dict[str, Any]] = []
        low = needle.lower()

        def consider(kind: str, entity_id: str, urn: str | None, name: str | None, description: str | None,
                     extra: dict[str, Any]) -> None:  # fmt: skip
            best: tuple[float, str] | None = None
            for name_ in use:
                if name_ == "pk":
                    value: str | None = entity_id
                    score = 1.0 if entity_id == needle else 0.0
                else:
                    value = {"urn": urn, "name": name, "description": description}.get(name_)
                    score = _substring_score(value, low)
                if score > 0 and (best is None or score > best[0]):
                    best = (score, name_)
            if best is not None:
                hits.append({"entityType": kind, "id": entity_id, "urn": urn, "name": name,
                             "description": description, "matchedField": best[1], "score": best[0], **extra})  # fmt: skip

        if "organization" in kinds:
            for org in self._orgs(caller):
                consider("organization", org.id, org.urn, org.name, None, {})
        if "memory" in kinds:
            for m in memories:
                consider("memory", m.id, m.urn, m.name, m.description or None, {"memoryId": m.id})
        apps = self.access.visible_apps(caller)
        if "app" in kinds:
            for app, _ in apps:
                consider("app", app.id, app.urn, app.name, None, {"organizationId": app.org_id})
        # Agents and AI service configs live in Apps: visible where their App is.
        app_ids = [app.id for app, _ in apps]
        if "agent" in kinds and app_ids:
            for agent in self.agents.team.agents(app_ids):
                consider("agent", agent.id, agent.urn, agent.name, agent.persona_role,
                         {"appId": agent.app_id, "personaRole": agent.persona_role, "teamAgent": agent.is_team_agent})  # fmt: skip
        if "aiServiceConfig" in kinds:
            for config in self.agents.team.ai_configs(app_ids):
                consider("aiServiceConfig", config.id, config.urn, config.name, f"{config.provider} {config.model}",
                         {"appId": config.app_id, "provider": config.provider, "model": config.model})  # fmt: skip
        if "user" in kinds:
            for user in self._users(caller):
                consider("user", user.id, user.urn, user.name, None, {})
        if "node" in kinds:
            hits += self._node_hits(memories, needle, use, degraded)
        hits.sort(key=lambda h: (-h["score"], ENTITY_TYPES.index(h["entityType"]), h["name"] or ""))
        return hits[:limit], degraded, view

    def _node_hits(
        self, memories: Sequence[Memory], needle: str, use: Sequence[str], degraded: list[str]
    ) -> list[dict[str, Any]]:
        low = needle.lower()
        out: list[dict[str, Any]] = []
        skipped = 0
        for memory in memories:
            prefix = node_urn(memory.root, memory.slug, "").replace("'", "''")
            columns = []
            for name in use:
                if name == "urn":
                    columns.append(f"('{prefix}' || loc)")
                elif name in ("name", "description"):
                    columns.append(name)
                elif name == "content":
                    if memory.encrypted:
                        skipped += 1
                    else:
                        columns.append("content")
            found = self.store.nodes_matching([memory.id], columns, needle, "pk" in use, ENTITY_CAP)
            for node in found:
                urn = node_urn(memory.root, memory.slug, node.loc)
                values = {
                    "urn": urn,
                    "name": node.name,
                    "description": node.description,
                    "content": node.content,
                }
                best = (1.0, "pk") if node.id == needle and "pk" in use else None
                for name in use:
                    if name == "pk" or (name == "content" and memory.encrypted):
                        continue
                    score = _substring_score(values.get(name), low) * (0.9 if name == "content" else 1.0)
                    if score > 0 and (best is None or score > best[0]):
                        best = (score, name)
                if best is not None:
                    out.append({"entityType": "node", "id": node.id, "urn": urn, "name": node.name,
                                "description": node.description, "matchedField": best[1], "score": round(best[0], 3),
                                "memoryId": memory.id, "memoryUrn": memory.urn})  # fmt: skip
        if skipped:
            degraded.append(
                f"content search skipped on {skipped} encrypted memor{'y' if skipped == 1 else 'ies'}"
            )
        return out

    def _orgs(self, caller: HadronCaller) -> list[Any]:
        if caller.kind == "app" and caller.app is not None:
            org = self.tenancy.org(caller.app.org_id) if caller.app.org_id else None
            return [org] if org else []
        if caller.user is None:
            return []
        return [org for org, _ in self.tenancy.org_memberships(caller.user.id)]

    def _users(self, caller: HadronCaller) -> list[Any]:
        """Yourself and the people you share an organization with (an app key: its org's members)."""
        orgs = {o.id for o in self._orgs(caller)}
        found = self.tenancy.users_in_orgs(list(orgs)) if orgs else []
        if caller.user is not None and caller.user.id not in {u.id for u in found}:
            found.append(caller.user)
        return found


def _substring_score(value: str | None, needle: str) -> float:
    if not value:
        return 0.0
    text = value.lower()
    if text == needle:
        return 1.0
    if text.startswith(needle):
        return 0.8
    return 0.5 if needle in text else 0.0


def _passage(content: str, terms: Sequence[str], pattern: LinearPattern | None) -> dict[str, Any] | None:
    """The content window that best matches the query: chunk granularity with offsets into the content."""
    if not content:
        return None
    windows = []
    start = 0
    while start < len(content):
        end = min(len(content), start + PASSAGE_CHARS)
        if end < len(content):
            cut = content.rfind("\n\n", start + PASSAGE_CHARS // 2, end)
            end = cut if cut > start else end
        windows.append((start, end))
        start = end

    def score(window: tuple[int, int]) -> int:
        text = content[window[0] : window[1]]
        if pattern is not None:
            return pattern.count(text)
        low = text.lower()
        return sum(low.count(t[:5]) for t in terms)

    best_index = max(range(len(windows)), key=lambda i: (score(windows[i]), -i))
    s, e = windows[best_index]
    return {"chunkIndex": best_index, "charStart": s, "charEnd": e, "text": content[s:e]}
