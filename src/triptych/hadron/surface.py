"""Assembles the Hadron surface: its database, access policy, services, tools and the endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server import Server
from starlette.routing import Route

from triptych.core.config import Settings
from triptych.core.db import Database
from triptych.core.embed import Embedder
from triptych.core.lastresort import jsonrpc_internal_error
from triptych.core.mcp import register
from triptych.core.mcp_sources import sources_path
from triptych.core.pg import NativeDatabase
from triptych.core.surface import Mounted, Shared
from triptych.hadron import gitrepo
from triptych.hadron.access import AccessPolicy
from triptych.hadron.domain.action import ACTION_TYPE
from triptych.hadron.domain.model import NodeRecord
from triptych.hadron.engines import Stores, open_stores
from triptych.hadron.errors import render_error
from triptych.hadron.identity import authenticator
from triptych.hadron.pg_listen import PgChatListener
from triptych.hadron.sealing import KeyConfigError, NodeSealer, ServerKey, check_key, load_key
from triptych.hadron.server import HadronEndpoint, build_server
from triptych.hadron.services.abstracts import AbstractService, LlmSummarizer
from triptych.hadron.services.actions import ActionService
from triptych.hadron.services.agents import AgentService
from triptych.hadron.services.channels import ChannelService
from triptych.hadron.services.edges import EdgeService
from triptych.hadron.services.embedding import NodeEmbedder
from triptych.hadron.services.gitsync import GitSyncService
from triptych.hadron.services.locks import LockService
from triptych.hadron.services.mcp_calls import McpToolCaller
from triptych.hadron.services.node_reads import NodeReadService
from triptych.hadron.services.nodes import NodeService
from triptych.hadron.services.objects import ObjectService
from triptych.hadron.services.push import PushService
from triptych.hadron.services.registers import RegisterService
from triptych.hadron.services.replace import ReplaceService
from triptych.hadron.services.scopes import ScopeService
from triptych.hadron.services.search import SearchService
from triptych.hadron.services.selection import SelectionService, SessionState
from triptych.hadron.services.sessions import SessionService
from triptych.hadron.services.tenancy import TenancyAdmin
from triptych.hadron.services.validate import ValidateService
from triptych.hadron.services.workers import WorkerService
from triptych.hadron.services.worklog import WorklogService
from triptych.hadron.store import GraphStore, TenancyStore
from triptych.hadron.team_store import TeamSql
from triptych.hadron.tools.base import Ctx, Services, Tool
from triptych.hadron.tools.catalog import DECLARED

__all__ = ["Hadron", "mount", "render_error"]

INSTRUCTIONS = (
    "Hadron graph memory. Call hadron_list_memories to see where you can read and write, bind one with "
    "hadron_set_active_memory, then read and write nodes by loc. hadron_find_nodes searches under the search "
    "ladder and says what it searched in its first line. Send a stable X-Hadron-Client-Id header "
    "to keep selections across reconnects; hadron_server_info says what this build can do."
)


def database_path(settings: Settings) -> Path:
    return settings.data_dir / "hadron.db"


@dataclass
class Hadron:
    stores: Stores
    tenancy: TenancyStore
    graph: GraphStore
    access: AccessPolicy
    selections: SelectionService
    nodes: NodeService
    objects: ObjectService
    validator: ValidateService
    scopes: ScopeService
    search: SearchService
    embedder: NodeEmbedder
    team: Team
    derived: Derived
    gitsync: GitSyncService
    live: LiveServer
    push: PushService
    key: ServerKey | None = None
    listener: PgChatListener | None = None

    @classmethod
    def open(
        cls,
        path: Path,
        embedder: Embedder | None = None,
        settings: Settings | None = None,
        key: ServerKey | None = None,
        database_url: str | None = None,
    ) -> Hadron:
        """The surface over ``hadron.db``, or over the PostgreSQL database ``database_url`` (default:
        ``settings.database_url``); without an embedder nodes are not embedded (admin, tests).
        ``settings`` configures what reaches outside: MCP tool actions and LLM abstracts (off without);
        without ``key`` an encrypted memory's nodes are refused (``ENCRYPTION_KEY_MISSING``)."""
        url = database_url or (settings.database_url if settings is not None else None)
        stores = open_stores(
            path, url, embedder.dim if embedder else None, embedder.name if embedder else None
        )
        tenancy = stores.tenancy
        access = AccessPolicy(tenancy, stores.locks)
        graph = stores.graph
        sealer = NodeSealer(key, lambda memory_id: bool((m := tenancy.memory(memory_id)) and m.encrypted))
        graph.codec = sealer
        selections = SelectionService(tenancy, access)
        nodes = NodeService(tenancy, graph, access, selections)
        store = stores.search
        store.codec = graph.codec
        node_embedder = NodeEmbedder(store, embedder)
        nodes.embedder = node_embedder
        team = Team.build(stores.team, tenancy, graph, access, selections, nodes)
        team.store.codec = sealer  # Channel message bodies of encrypted memories
        scopes = ScopeService(tenancy, access, selections, store, team.agents)
        validator = ValidateService(tenancy, graph, access)
        derived = Derived.build(stores, tenancy, graph, access, nodes, validator, settings)
        gitsync = GitSyncService(
            graph,
            access,
            selections,
            stores.git,
            path.parent / "hadron-git",
            nodes.embedded,
            nodes.guard,
        )
        nodes.moved = gitsync.mirror_move
        push = PushService(tenancy, team.store, access, team.channels)
        if not isinstance(stores.db, NativeDatabase):
            team.channels.posted.append(push.publish)  # one process: server mode hears NOTIFY instead
        return cls(
            stores,
            tenancy,
            graph,
            access,
            selections,
            nodes,
            ObjectService(graph, access, nodes),
            validator,
            scopes,
            SearchService(tenancy, access, nodes, scopes, store, node_embedder, team.agents),
            node_embedder,
            team,
            derived,
            gitsync,
            LiveServer.build(nodes, selections, stores),
            push,
            key,
        )

    def admin(self) -> TenancyAdmin:
        return TenancyAdmin(self.tenancy)

    def tools(self) -> list[Tool[Ctx]]:
        return register(DECLARED, self.services())

    def services(self) -> Services:
        """What Hadron's tools call, handed to every tool declaration when the surface registers it."""
        return Services(
            selections=self.selections,
            nodes=self.nodes,
            edges=self.live.edges,
            reads=self.live.reads,
            replace=self.live.replace,
            locks=self.live.locks,
            objects=self.objects,
            validator=self.validator,
            search=self.search,
            scopes=self.scopes,
            sessions=self.team.sessions,
            workers=self.team.workers,
            channels=self.team.channels,
            registers=self.team.registers,
            worklog=self.team.worklog,
            actions=self.derived.actions,
            gitsync=self.gitsync,
            abstracts=self.derived.abstracts.views,
            capabilities=[*self.derived.capabilities(), *self.capabilities()],
        )

    def capabilities(self) -> list[str]:
        """The tokens of issue 18's and 32's features, each advertised only when it works on this deployment."""
        tokens = ["chat-push"]  # resources/subscribe on a chat's address (issue 32), on every engine
        if gitrepo.available():
            tokens.append("git-sync")  # hadron_sync_graph and mirrored moves need the git binary
        if self.key is not None:
            tokens.append("encryption-at-rest")  # without a key an encrypted memory is refused
        return tokens

    def mcp_server(self) -> Server[Any]:
        return build_server(self.tools(), self.selections, INSTRUCTIONS, self.push)

    def start_push(self) -> None:
        """Deliver chat push (a server does; the CLI does not): the dispatcher, and in server mode the
        ``LISTEN`` that hears every worker's posts."""
        self.push.start()
        if isinstance(self.stores.db, NativeDatabase) and self.listener is None:
            self.listener = PgChatListener(self.stores.db.pg.url, self.push.publish)
            self.listener.start()

    def close(self) -> None:
        if self.listener is not None:
            self.listener.stop()
        self.push.stop()
        self.search.close()
        if self.derived.abstracts.llm is not None:
            self.derived.abstracts.llm.close()
        self.stores.close()  # stops the search index's graph builds, then closes the database

    @property
    def db(self) -> Database | NativeDatabase:
        """The database every store of this surface writes through (``hadron.db`` or PostgreSQL)."""
        return self.stores.db


@dataclass
class LiveServer:
    """The live server's tools beyond the contract (docs/hadron.md): first-class edges, batch and uniform
    node reads, text replacement and memory locks."""

    edges: EdgeService
    reads: NodeReadService
    replace: ReplaceService
    locks: LockService

    @classmethod
    def build(cls, nodes: NodeService, selections: SelectionService, stores: Stores) -> LiveServer:
        return cls(
            EdgeService(nodes),
            NodeReadService(nodes),
            ReplaceService(nodes),
            LockService(nodes.access, selections, stores.locks),
        )


@dataclass
class Derived:
    """Action runs and node abstracts (issue 18), hooked into the node service and hadron_validate."""

    actions: ActionService
    abstracts: AbstractService

    @classmethod
    def build(
        cls,
        stores: Stores,
        tenancy: TenancyStore,
        graph: GraphStore,
        access: AccessPolicy,
        nodes: NodeService,
        validator: ValidateService,
        settings: Settings | None,
    ) -> Derived:
        calls = None
        llm = None
        if settings is not None:
            registry = sources_path(settings.data_dir, settings.mcp_sources)
            calls = McpToolCaller(registry, settings.hadron_action_sources, settings.sync_timeout)
            if settings.llm_url:
                # Abstracts are written on the request path: bound the wait well below the answer endpoint's.
                timeout = min(settings.llm_timeout, 20.0)
                llm = LlmSummarizer(
                    settings.llm_url, settings.llm_model or "default", settings.llm_api_key, timeout
                )
        abstracts = AbstractService(stores.abstracts, llm)
        actions = ActionService(tenancy, graph, access, nodes, stores.actions, calls)
        nodes.derived.append(abstracts.on_write)
        nodes.extras.append(lambda node: {"abstract": abstracts.views([node]).get(node.id)})
        nodes.extras.append(
            lambda node: {"runs": actions.history(node.id)} if node.node_type == ACTION_TYPE else {}
        )
        validator.stale_abstracts = abstracts.stale
        return cls(actions, abstracts)

    def capabilities(self) -> list[str]:
        """Tokens for what works with this configuration: MCP tool actions only when a source is enabled."""
        tokens = ["run-action", "action-templates", "node-abstracts"]
        if self.actions.mcp_tools_enabled:
            tokens.append("action-mcp-tools")
        if self.abstracts.llm is not None:
            tokens.append("llm-abstracts")
        return tokens


@dataclass
class Team:
    """The team-coordination services (issue 14), over the same database."""

    store: TeamSql
    agents: AgentService
    sessions: SessionService
    workers: WorkerService
    channels: ChannelService
    registers: RegisterService
    worklog: WorklogService

    @classmethod
    def build(
        cls,
        store: TeamSql,
        tenancy: TenancyStore,
        graph: GraphStore,
        access: AccessPolicy,
        selections: SelectionService,
        nodes: NodeService,
    ) -> Team:
        agents = AgentService(tenancy, store)
        sessions = SessionService(tenancy, store, access, selections)
        workers = WorkerService(tenancy, store, access, selections, agents, sessions)
        channels = ChannelService(tenancy, graph, store, access, selections, agents, sessions, workers)

        def attribute(state: SessionState, node: NodeRecord) -> None:
            session = store.session(state.work_session_id) if state.work_session_id else None
            if session is not None and not session.ended:
                store.attribute_node(node.id, session.id, node.created_at)

        nodes.guard = lambda memory, loc, containing: channels.guard(memory, loc, containing=containing)
        nodes.attribute = attribute
        nodes.session_of = store.node_session
        return cls(
            store,
            agents,
            sessions,
            workers,
            channels,
            RegisterService(tenancy, store, access, selections, channels),
            WorklogService(tenancy, graph, store, access, selections, agents, sessions),
        )


def mount(shared: Shared) -> Mounted:
    settings = shared.settings
    key = load_key()
    hadron = Hadron.open(database_path(settings), shared.embedder, settings, key=key)
    try:
        check_key(hadron.db, key)  # a missing or wrong key stops the start, never serves garbage
    except KeyConfigError:
        hadron.close()
        raise
    authenticate = authenticator(settings, hadron.tenancy)
    hadron.push.authenticate = authenticate
    hadron.start_push()
    endpoint = HadronEndpoint(hadron.mcp_server(), settings, authenticate, hadron.selections, hadron.push)
    return Mounted(
        routes=[Route("/hadron/mcp", endpoint=endpoint)],
        endpoints=[endpoint],
        on_close=[hadron.close],
        error_shapes={"/hadron/mcp": jsonrpc_internal_error()},
        gauges=[
            (
                "triptych_hadron_push_subscriptions",
                "Chat subscriptions (resources/subscribe) held by the MCP sessions of this server",
                (),
                lambda: [((), float(hadron.push.count()))],
            )
        ],
    )
