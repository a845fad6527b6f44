"""App links: the ``app_url`` / ``metergraph_links`` fields of analysis-run and report responses.

Every link is built from the deployment's public address (``MG_PUBLIC_URL`` or ``TRIPTYCH_PUBLIC_URL``, else the server's own
``http://host:port`` when it listens on a concrete address) and names its workspace, so a page opened
while signed in to another workspace says so instead of showing that workspace's data. Without a usable
public address every link is null, as the contract says. The pages these paths open are served by
``pages/routes.py``; the paths are declared here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

APP_PREFIX = "/app"
_WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}


def _seg(value: str) -> str:
    # Every identifier is one path segment: a slash or a dot-dot in an id cannot walk to another page.
    return quote(value, safe="")


def public_base(public_url: str | None, host: str, port: int) -> str | None:
    """The public address links start with, or None when the deployment has no usable one."""
    if public_url:
        return public_url.rstrip("/")
    if host in _WILDCARD_HOSTS:
        return None  # listening everywhere: which of the machine's names a person can reach is unknown
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}"


def workspace_path(workspace: str) -> str:
    return f"{APP_PREFIX}/w/{_seg(workspace)}"


def usage_path(workspace: str) -> str:
    return workspace_path(workspace) + "/usage"


def webhooks_path(workspace: str) -> str:
    return workspace_path(workspace) + "/webhooks"


def analysis_path(workspace: str) -> str:
    return workspace_path(workspace) + "/analysis"


def report_path(workspace: str, analysis_id: str) -> str:
    return f"{workspace_path(workspace)}/reports/{_seg(analysis_id)}"


def workload_path(workspace: str, analysis_id: str, workload_id: str) -> str:
    return f"{report_path(workspace, analysis_id)}/workloads/{_seg(workload_id)}"


def comparison_path(workspace: str, analysis_id: str, workload_id: str) -> str:
    return workload_path(workspace, analysis_id, workload_id) + "/comparison"


def suite_path(workspace: str, analysis_id: str, workload_id: str) -> str:
    return workload_path(workspace, analysis_id, workload_id) + "/suite"


def evidence_path(workspace: str, analysis_id: str, workload_id: str, opportunity_id: str) -> str:
    return f"{workload_path(workspace, analysis_id, workload_id)}/opportunities/{_seg(opportunity_id)}"


@dataclass(frozen=True, slots=True)
class AppLinks:
    """Absolute app links for one deployment; every method answers None without a public address."""

    base: str | None

    def _url(self, path: str) -> str | None:
        return None if self.base is None else self.base + path

    def usage(self, workspace: str) -> str | None:
        return self._url(usage_path(workspace))

    def analysis(self, workspace: str) -> str | None:
        """``run.app_url`` and the report list's / report's ``app_url``: the Analysis page."""
        return self._url(analysis_path(workspace))

    def report(self, workspace: str, analysis_id: str) -> str | None:
        """``run.report.app_url``: that run's report."""
        return self._url(report_path(workspace, analysis_id))

    def workload(self, workspace: str, analysis_id: str, workload_id: str) -> str | None:
        """``metergraph_links.workload``, and ``workloads[].app_url`` without a model comparison."""
        return self._url(workload_path(workspace, analysis_id, workload_id))

    def comparison(self, workspace: str, analysis_id: str, workload_id: str) -> str | None:
        """``workloads[].app_url`` when the report holds a model comparison for the workload."""
        return self._url(comparison_path(workspace, analysis_id, workload_id))

    def suite(self, workspace: str, analysis_id: str, workload_id: str) -> str | None:
        """``metergraph_get_suite_results.app_url``, and a switch the acceptance policy withheld."""
        return self._url(suite_path(workspace, analysis_id, workload_id))

    def evidence(self, workspace: str, analysis_id: str, workload_id: str, opportunity_id: str) -> str | None:
        """``workloads[].opportunities[].app_url``: the opportunity's evidence."""
        return self._url(evidence_path(workspace, analysis_id, workload_id, opportunity_id))
