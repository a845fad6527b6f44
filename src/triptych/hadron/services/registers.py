"""Registers: who is declared to take part in which Channel. A declaration grants nothing: what an
attendee may read or post is the host memory's decision, so an entry naming someone who cannot
read the Channel is a legitimate statement whose precondition is unmet. Omitting the attendee
declares every attendee in the owner's context (the owner is the Channel's host App)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from triptych.hadron.access import AccessPolicy, require_identity
from triptych.hadron.domain.loc import strip_urn_prefix, urn_type
from triptych.hadron.domain.team import RegisterEntry
from triptych.hadron.errors import BadInput, NotFound
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.channels import ChannelService
from triptych.hadron.services.selection import SelectionService, SessionState
from triptych.hadron.store import TenancyStore, new_id, utcnow
from triptych.hadron.team_store import TeamStore


class RegisterService:
    def __init__(
        self,
        tenancy: TenancyStore,
        team: TeamStore,
        access: AccessPolicy,
        selections: SelectionService,
        channels: ChannelService,
        clock: Callable[[], str] = utcnow,
    ) -> None:
        self.tenancy = tenancy
        self.team = team
        self.access = access
        self.selections = selections
        self.channels = channels
        self.clock = clock

    def _attendee(self, app_id: str, ref: str) -> str:
        """``w:<worker id>`` or ``u:<user id>``: a worker of the owner App, or a person."""
        token = ref.strip()
        worker = self.team.worker(token)
        if worker is None and urn_type(token) == "worker":
            worker = next((w for w in self.team.all_workers(app_id) if w.urn == token), None)
        if worker is None and not token.startswith("@") and urn_type(token) != "user":
            worker = self.team.worker_named(app_id, token)
        if worker is not None and worker.app_id == app_id:
            return f"w:{worker.id}"
        user = self.tenancy.user_by_handle(strip_urn_prefix(token, "user").lstrip("@"))
        if user is not None:
            return f"u:{user.id}"
        raise BadInput(
            f"attendee {ref!r} is neither a worker of the Channel's App nor a user",
            details={"field": "attendee"},
        )

    def add(
        self,
        caller: HadronCaller,
        channel_ref: str,
        attendee: str | None,
        role: str | None,
        mention_only: bool,
    ) -> RegisterEntry:
        channel, memory = self.channels.resolve(caller, channel_ref)
        self.access.write_memory(caller, memory)  # declaring is an edit of the Channel's cast
        if channel.app_id is None:
            raise BadInput("this Channel's host memory belongs to no App: a register needs an owner App")
        entry = RegisterEntry(
            id=new_id(), owner_app_id=channel.app_id, channel_id=channel.id,
            attendee=self._attendee(channel.app_id, attendee) if attendee else None,
            role=role.strip() if role and role.strip() else None, mention_only=mention_only, created_at=self.clock(),
        )  # fmt: skip
        self.team.add_register(entry, caller.actor)
        return entry

    def list(
        self, caller: HadronCaller, state: SessionState, owner: str | None, channel_ref: str | None,
        attendee: str | None,
    ) -> list[RegisterEntry]:  # fmt: skip
        require_identity(caller)
        channel_id: str | None = None
        if channel_ref:
            channel, _ = self.channels.resolve(caller, channel_ref)
            channel_id = channel.id
            owners = [channel.app_id] if channel.app_id else []
        else:
            app = (
                self.selections.resolve_app(caller, owner)[0]
                if owner
                else self.selections.active_app(caller, state)
            )
            owners = [app.id]
        if owner and channel_ref:
            owners = [o for o in owners if o == self.selections.resolve_app(caller, owner)[0].id]
        entries = self.team.registers(owners, channel_id)
        if attendee:
            wanted = self._attendee(owners[0], attendee) if owners else None
            entries = [e for e in entries if e.attendee in (wanted, None)]
        readable: dict[str, bool] = {}
        out = []
        for entry in entries:
            if entry.channel_id not in readable:
                try:
                    self.channels.resolve(caller, entry.channel_id)
                    readable[entry.channel_id] = True
                except NotFound:
                    readable[entry.channel_id] = False
            if readable[entry.channel_id]:
                out.append(entry)
        return out

    def remove(self, caller: HadronCaller, entry_id: str) -> RegisterEntry:
        require_identity(caller)
        entry = self.team.register_entry(entry_id.strip())
        if entry is None:
            raise NotFound("register_entry", entry_id, hint="hadron_register_list prints entry ids")
        try:
            _, memory = self.channels.resolve(caller, entry.channel_id)
        except NotFound:
            raise NotFound("register_entry", entry_id) from None
        self.access.write_memory(caller, memory)
        self.team.remove_register(entry.id)
        return entry

    def view(self, entry: RegisterEntry) -> dict[str, Any]:
        attendee: dict[str, Any] | None = None
        if entry.attendee and entry.attendee.startswith("w:"):
            worker = self.team.worker(entry.attendee[2:])
            attendee = {"kind": "worker", "id": entry.attendee[2:], "name": worker.name if worker else None}
        elif entry.attendee:
            user = self.tenancy.user(entry.attendee[2:])
            attendee = {"kind": "user", "id": entry.attendee[2:], "handle": user.handle if user else None}
        channel = self.team.channel(entry.channel_id)
        app = self.tenancy.app(entry.owner_app_id)
        return {
            "id": entry.id,
            "owner": app.urn if app else entry.owner_app_id,
            "channelId": entry.channel_id,
            "channel": self.channels.address(channel) if channel else None,
            "attendee": attendee,  # null: every attendee in the owner's context
            "role": entry.role,
            "mentionOnly": entry.mention_only,
            "createdAt": entry.created_at,
        }
