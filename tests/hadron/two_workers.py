"""Helpers shared by the tests that run two ``Hadron`` instances as two workers on one PostgreSQL database
(per-tenant write locks): each organization ``root`` has one owner, and a caller acting as that owner."""

from __future__ import annotations

from triptych.hadron.identity import HadronCaller
from triptych.hadron.surface import Hadron


def owner(root: str) -> str:
    return "owner-" + root.split(".")[0]


def caller(hadron: Hadron, root: str) -> HadronCaller:
    return HadronCaller("user", owner(root), user=hadron.tenancy.user_by_handle(owner(root)))
