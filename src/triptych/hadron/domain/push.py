"""A chat message landed: what push (``services/push.py``) tells subscribers about, and what PostgreSQL
``NOTIFY`` carries between the workers of one server (``pg_listen.py``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# The PostgreSQL NOTIFY channel every worker LISTENs on.
NOTIFY_CHANNEL = "triptych_hadron_chat"
# NOTIFY payloads are limited to 8000 bytes: past this the mention refs are left out, and the receiver
# reads them from the message itself.
MAX_PAYLOAD = 7000


@dataclass(frozen=True, slots=True)
class ChatEvent:
    """Where a message landed (the Channel's host memory and loc), its seq, and whom it mentions
    (``w:<worker id>`` / ``u:<user id>``; None: not carried, read them from the message)."""

    memory_id: str
    loc: str
    channel_id: str
    seq: int
    refs: tuple[str, ...] | None

    def payload(self) -> str:
        body: dict[str, Any] = {"m": self.memory_id, "l": self.loc, "c": self.channel_id, "s": self.seq}
        text = json.dumps({**body, "r": list(self.refs or ())}, separators=(",", ":"))
        return text if len(text.encode()) <= MAX_PAYLOAD else json.dumps(body, separators=(",", ":"))

    @classmethod
    def parse(cls, payload: str) -> ChatEvent:
        data = json.loads(payload)
        refs = data.get("r")
        return cls(
            str(data["m"]), str(data["l"]), str(data["c"]), int(data["s"]),
            tuple(str(r) for r in refs) if refs is not None else None,
        )  # fmt: skip
