"""Links into the Metergraph app pages, built from the deployment's public address.

The contract: a link is built from the configured public address (``TRIPTYCH_PUBLIC_URL``) and names its
workspace; without a usable address every link is null. Tools return these as they are; nothing else
builds a page URL from an id.
"""

from __future__ import annotations

import os
from urllib.parse import quote, urlsplit

PUBLIC_URL_ENV = "TRIPTYCH_PUBLIC_URL"


def _usable(base: str | None) -> str | None:
    if not base:
        return None
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        return None
    return base.rstrip("/")


class AppLinks:
    def __init__(self, base_url: str | None) -> None:
        self.base = _usable(base_url)

    @classmethod
    def from_env(cls) -> AppLinks:
        return cls(os.environ.get(PUBLIC_URL_ENV))

    def _link(self, workspace: str, *parts: str, query: str = "") -> str | None:
        if self.base is None:
            return None
        path = "/".join(quote(p, safe="") for p in ("app", "metergraph", workspace, *parts))
        return f"{self.base}/{path}{query}"

    def analysis(self, workspace: str) -> str | None:
        """The Analysis page: runs, their progress and the latest report."""
        return self._link(workspace, "analysis")

    def report(self, workspace: str, analysis_id: str) -> str | None:
        return self._link(workspace, "reports", analysis_id)

    def workload(self, workspace: str, analysis_id: str, workload_id: str) -> str | None:
        return self._link(workspace, "reports", analysis_id, "workloads", workload_id)

    def comparison(self, workspace: str, analysis_id: str, workload_id: str) -> str | None:
        return self._link(workspace, "reports", analysis_id, "workloads", workload_id, "comparison")

    def suite(self, workspace: str, analysis_id: str, workload_id: str) -> str | None:
        return self._link(workspace, "reports", analysis_id, "workloads", workload_id, "suite")

    def evidence(self, workspace: str, analysis_id: str, workload_id: str, opportunity_id: str) -> str | None:
        return self._link(
            workspace, "reports", analysis_id, "workloads", workload_id, "opportunities", opportunity_id
        )
