"""The tenants a Hadron write locks in server mode, by name (docs/decisions/0180).

On PostgreSQL every Hadron write transaction takes the advisory lock ``engines.WRITE_LOCK`` at one of
two levels (``core.pg.NativeDatabase.lock_statement``): the store's key shared plus the key of each
tenant it writes to, or the store's key exclusively for the few writes that span the store. A tenant is
what the data it writes needs serialized:

- ``memory``: a memory's nodes, edges, revisions, embeddings, abstracts, action runs, git mirror, lock,
  settings and grants, and the Channels it hosts (their messages and receipts). Its ``node_text_changes``
  entries must be numbered in its commit order (the BM25 follows each memory by its own last entry) and
  its vector generation must move only by the writer that reads it before and after.
- ``team``: an App's team (agents, AI configs, workers, sessions and their events, worklog items,
  registers, attached memories): names unique per App, one live session per worker, the next position
  among the App's memories are read-then-write steps within one App.
- ``root``: an organization's or user's namespace (the memories and Apps created under it): a slug is
  checked free under the root, then taken.
- ``org``: an organization's members.
- ``scopes``: the scopes of one owner (organization, App or agent): a live name is unique per owner.

- ``ROWS``: no tenant. A single statement whose outcome is decided by its own ``WHERE`` on the rows it
  changes, under their row locks (PostgreSQL re-checks an ``UPDATE``'s condition on the newest row after
  a wait), reading no other row and feeding no log or counter a follower reads: a heartbeat, a session's
  end or expiry, a worker's hold, a read receipt, a client selection. It holds the store's key shared only,
  so it waits for nothing but a store-wide write.

Two tenants of different kinds never share a name (the prefix), so a write to an App's team and one to
a memory never queue unless they collide in the hash.
"""

from __future__ import annotations

# Not a tenant: the write holds the store's key shared and no tenant's (see above).
ROWS = ""


def memory(memory_id: str) -> str:
    return f"memory:{memory_id}"


def team(app_id: str) -> str:
    return f"team:{app_id}"


def root(name: str) -> str:
    return f"root:{name}"


def org(org_id: str) -> str:
    return f"org:{org_id}"


def scopes(owner_type: str, owner_id: str) -> str:
    return f"scopes:{owner_type}:{owner_id}"
