"""The Metergraph app pages in a real headless Chromium against a real `triptych serve`: signing in with a
key, the usage overview showing what ``metergraph_get_usage_aggregates`` returns (through the official MCP
client) with its charts drawn, escaping, roles, environments and workspace isolation."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from browser import chromium
from harness import TRIPTYCH, ServerProcess, mcp_session, open_metergraph

from triptych.metergraph.pages.render import count, millis, money, percent
from triptych.metergraph.report_store import SqliteReportStore

sys.path.insert(0, str(Path(__file__).parent.parent / "metergraph"))
sys.path.insert(0, str(Path(__file__).parent.parent))
from provider_server import ProviderServer  # noqa: E402
from report_support import LONG_TEXT, artifact, raw  # noqa: E402

NASTY = ["", " ", "\x00", "a\x00b", "\u202eevil", "🙂" * 50, "' OR 1=1 --", "%s%n%x", "{{7*7}}", "../../etc/passwd",
         "<script>alert(1)</script>", "\\", "x" * 2500, "NaN", "-1", "1e309", "%2F"]  # fmt: skip
INJECTED_MODEL = '"><img src=x onerror="window.__pwned=1">'
INJECTED_ROUTE = "</script><script>window.__pwned=2</script>"


class Site:
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.url = server.url

    def mint(self, workspace: str, role: str = "metadata", environments: list[str] | None = None) -> str:
        mg = open_metergraph(self.server)
        try:
            if role == "app":
                return mg.keys.create_app_token(workspace)[1]
            return mg.keys.create_agent_key(workspace, role, environments)[1]
        finally:
            mg.close()

    def ingest(self, workspace: str, rows: list[dict[str, Any]]) -> None:
        response = httpx.post(self.url + "/v1/ingest", json={"schema_version": 1, "rows": rows},
                              headers={"Authorization": f"Bearer {self.mint(workspace, 'app')}"}, timeout=30)  # fmt: skip
        assert response.status_code == 202, response.text

    def tool(self, key: str, name: str, **arguments: Any) -> dict[str, Any]:
        """One tool call through the official MCP client (in its own thread: the browser owns this one)."""
        out: dict[str, Any] = {}

        async def call() -> None:
            async with mcp_session(self.url + "/v1/agent/mcp", {"Authorization": f"Bearer {key}"}) as mcp:
                result = await mcp.call(name, **arguments)
            assert not result.is_error, result.data
            out.update(result.data)

        thread = threading.Thread(target=lambda: asyncio.run(call()))
        thread.start()
        thread.join(60)
        assert out, f"{name} returned nothing"
        return out


def call(day: int, **fields: Any) -> dict[str, Any]:
    now = datetime.now(UTC)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    ts = midnight - timedelta(days=day) + timedelta(hours=12)  # noon of that day
    if ts > now:  # today before noon: noon is still to come, and reads end now
        ts = midnight + (now - midnight) / 2
    base = {"ts": ts.isoformat(), "route": "support", "provider": "openai", "model": "gpt-4o",
            "input_tokens": 1000, "output_tokens": 200, "latency_ms": 400, "trace_id": uuid.uuid4().hex}  # fmt: skip
    return {**base, **fields}


@pytest.fixture(scope="module")
def metergraph_engine() -> dict[str, str]:
    """The embedded engine only. The pages render what the services answer (``usage.aggregates`` and
    ``usage.grouped``, reports, runs and webhooks from the metadata store); that ClickHouse answers every
    usage and trace read exactly as the embedded engine does is tests/metergraph/test_engines_agree.py's,
    and the same reads over MCP and REST on a ClickHouse server are the shared-server modules' (usage,
    conformance, analysis, incidents). A second browser pass on ClickHouse ran the same page code on
    the same answers (docs/decisions/0380)."""
    return {}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, metergraph_engine: dict[str, str]) -> Iterator[Site]:
    with ProviderServer() as provider:  # analysis runs replay on it through the real OpenAI client
        env = {"MG_AGENT_RATE_PER_MINUTE": "0", "MG_REPLAY_OPENAI_BASE_URL": provider.openai_url,
               "MG_REPLAY_OPENAI_API_KEY": "sk-test", **metergraph_engine}  # fmt: skip
        server = ServerProcess(tmp_path_factory.mktemp("pages") / "data", env).start()
        yield Site(server)
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as context:
        yield context


@pytest.fixture
def tab(browser: Any) -> Iterator[Any]:
    browser.clear_cookies()
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.dialogs = dialogs
    yield page
    page.close()


def sign_in(tab: Any, site: Site, key: str, path: str) -> None:
    tab.goto(site.url + path)
    assert "/app/sign-in" in tab.url  # not signed in: the page asks for a key first
    tab.fill("#key", key)
    tab.click("#sign-in")
    tab.wait_for_load_state()


def populated(site: Site) -> tuple[str, str]:
    workspace = "pages-" + uuid.uuid4().hex[:6]
    rows = []
    for day in range(5):
        rows += [call(day, latency_ms=300 + 40 * i) for i in range(3 + day)]
        rows += [call(day, provider="anthropic", model="claude-3-5-haiku-latest", route="triage",
                      latency_ms=900, output_tokens=50) for _ in range(2)]  # fmt: skip
        rows.append(call(day, model="gpt-4o-mini", status="error", latency_ms=2500))
    rows.append(call(1, model=INJECTED_MODEL, route=INJECTED_ROUTE, provider="openai"))
    site.ingest(workspace, rows)
    return workspace, site.mint(workspace, "metadata")


def test_usage_overview_shows_the_tool_figures_and_draws_every_chart(site: Site, tab: Any) -> None:
    workspace, key = populated(site)
    tool = site.tool(key, "metergraph_get_usage_aggregates", group_by=["model"], days=7)
    sign_in(tab, site, key, f"/app/w/{workspace}/usage?by=model")
    assert tab.url.endswith(f"/app/w/{workspace}/usage?by=model"), (
        tab.content()
    )  # back where the link pointed

    assert tab.text_content("#total-calls") == count(tool["totals"]["calls"])
    assert tab.text_content("#total-cost") == money(tool["totals"]["cost_usd"])
    assert tab.text_content("#total-errors") == count(tool["totals"]["errors"]) == "5"
    assert tab.text_content("#total-p95") == millis(tool["totals"]["p95_latency_ms"])
    rows = tab.locator("#groups tbody tr")
    assert rows.count() == len(tool["items"]) == 4
    for i, item in enumerate(tool["items"]):  # same groups, same order, same numbers
        row = rows.nth(i)
        assert row.locator(".name").text_content() == item["model"]
        assert row.locator(".calls").text_content() == count(item["calls"])
        assert row.locator(".cost").text_content() == money(item["cost_usd"])
        assert row.locator(".errors").text_content() == count(item["errors"])
        assert row.locator(".p95").text_content() == millis(item["p95_latency_ms"])

    tab.wait_for_selector("figure.chart[data-drawn=true] canvas")
    tab.wait_for_function("document.querySelectorAll('figure.chart[data-drawn=true]').length === 4")
    painted = tab.evaluate(
        """() => [...document.querySelectorAll('figure.chart canvas')].map(c => {
               const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
               let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n; })"""
    )
    assert len(painted) == 4 and all(n > 500 for n in painted), painted
    legend = tab.locator("figure[data-metric=calls] .u-legend").text_content() or ""
    assert "gpt-4o" in legend and "claude-3-5-haiku-latest" in legend
    # The calls series add up to the tool's totals, day by day.
    series = tab.evaluate("JSON.parse(document.getElementById('usage-data').textContent)")
    assert sum(sum(s["calls"]) for s in series["series"]) == tool["totals"]["calls"]


def test_pages_show_hostile_names_as_text(site: Site, tab: Any) -> None:
    workspace, key = populated(site)
    sign_in(tab, site, key, f"/app/w/{workspace}/usage?by=model")
    names = tab.locator("#groups td.name").all_text_contents()
    assert INJECTED_MODEL in names
    tab.goto(site.url + f"/app/w/{workspace}/usage?by=route")
    assert INJECTED_ROUTE in tab.locator("#groups td.name").all_text_contents()
    tab.wait_for_function("document.querySelectorAll('figure.chart[data-drawn=true]').length === 4")
    assert tab.evaluate("window.__pwned === undefined") and tab.dialogs == []
    assert tab.locator("img").count() == 0
    html = tab.content()
    assert "<script>window.__pwned" not in html


def test_a_link_of_another_workspace_says_so_and_shows_none_of_its_data(site: Site, tab: Any) -> None:
    mine, key = populated(site)
    theirs = "other-" + uuid.uuid4().hex[:6]
    site.ingest(theirs, [call(0, model="their-secret-model")])
    sign_in(tab, site, key, f"/app/w/{mine}/usage")
    response = tab.goto(site.url + f"/app/w/{theirs}/usage?by=model")
    assert response.status == 403
    assert "belongs to another workspace" in tab.text_content("h1")
    assert "their-secret-model" not in tab.content()


def test_an_environment_restricted_key_sees_only_its_environments(site: Site, tab: Any) -> None:
    workspace = "envs-" + uuid.uuid4().hex[:6]
    site.ingest(workspace, [call(0, environment="prod", model="prod-model"),
                            call(0, environment="staging", model="staging-model")])  # fmt: skip
    key = site.mint(workspace, "metadata", ["prod"])
    sign_in(tab, site, key, f"/app/w/{workspace}/usage?by=model")
    assert tab.locator("#groups td.name").all_text_contents() == ["prod-model"]
    assert "prod" in tab.text_content("#who")


def test_sign_in_refuses_a_wrong_key_and_keeps_the_key_out_of_urls(site: Site, tab: Any) -> None:
    workspace, key = populated(site)
    requested: list[str] = []
    tab.on("request", lambda r: requested.append(r.url))
    sign_in(tab, site, "mgagent_not-a-real-key", f"/app/w/{workspace}/usage")
    assert "not accepted" in tab.text_content("#error")
    tab.fill("#key", key)
    tab.click("#sign-in")
    tab.wait_for_load_state()
    assert tab.url.endswith(f"/app/w/{workspace}/usage")
    assert not any(key in url for url in requested)
    cookie = next(c for c in tab.context.cookies() if c["name"] == "mg_app_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and key not in cookie["value"]
    tab.click("text=Sign out")
    tab.wait_for_load_state()
    assert "/app/sign-in" in tab.url
    tab.goto(site.url + f"/app/w/{workspace}/usage")
    assert "/app/sign-in" in tab.url


def test_sign_in_from_another_origin_and_forged_cookies_are_refused(site: Site) -> None:
    workspace, key = populated(site)
    refused = httpx.post(site.url + "/app/sign-in", data={"key": key},
                         headers={"Origin": "http://evil.example"}, follow_redirects=False)  # fmt: skip
    assert refused.status_code == 403 and "set-cookie" not in refused.headers
    ok = httpx.post(site.url + "/app/sign-in", data={"key": key}, follow_redirects=False)
    assert ok.status_code == 303
    cookie = ok.cookies["mg_app_session"]
    page = httpx.get(site.url + f"/app/w/{workspace}/usage", cookies={"mg_app_session": cookie})
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"
    forged = cookie[:-3] + ("AAA" if not cookie.endswith("AAA") else "BBB")
    bounced = httpx.get(site.url + f"/app/w/{workspace}/usage", cookies={"mg_app_session": forged},
                        follow_redirects=False)  # fmt: skip
    assert bounced.status_code == 303 and bounced.headers["location"].startswith("/app/sign-in?next=")
    # An open redirect after sign-in is never followed.
    outward = httpx.post(site.url + "/app/sign-in", data={"key": key, "next": "//evil.example/app/x"},
                         follow_redirects=False)  # fmt: skip
    assert outward.headers["location"] == f"/app/w/{workspace}/usage"
    bad = httpx.get(site.url + f"/app/w/{workspace}/usage?days=365", cookies={"mg_app_session": cookie})
    assert bad.status_code == 422 and "days must be" in bad.text
    crowded = httpx.post(site.url + "/app/sign-in", content="&".join(f"f{i}=1" for i in range(9)),
                         headers={"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
    assert crowded.status_code == 400 and "unexpected fields" in crowded.text
    huge = httpx.post(site.url + "/app/sign-in", data={"key": "k" * 20_000})
    assert huge.status_code == 413
    missing = httpx.get(site.url + "/app/no-such-page", cookies={"mg_app_session": cookie})
    assert missing.status_code == 404 and "text/html" in missing.headers["content-type"]


def test_revoking_the_key_signs_its_browsers_out(site: Site) -> None:
    workspace = "revoke-" + uuid.uuid4().hex[:6]
    mg = open_metergraph(site.server)
    try:
        key_id, key = mg.keys.create_agent_key(workspace, "metadata", None)
    finally:
        mg.close()
    cookie = httpx.post(site.url + "/app/sign-in", data={"key": key}).cookies.get("mg_app_session")
    usage = site.url + f"/app/w/{workspace}/usage"
    assert httpx.get(usage, cookies={"mg_app_session": cookie}).status_code == 200
    revoked = subprocess.run([TRIPTYCH, "metergraph", "key", "revoke", key_id, "--data-dir",
                              str(site.server.data_dir)], capture_output=True, text=True)  # fmt: skip
    assert revoked.returncode == 0, revoked.stderr
    after = httpx.get(usage, cookies={"mg_app_session": cookie}, follow_redirects=False)
    assert after.status_code == 303 and after.headers["location"].startswith("/app/sign-in")


# -- the report pages: every link a tool returns opens a page showing what the tool returned -----------

INJECTED_TITLE = "<b>bold</b> & <script>window.__pwned=3</script>"


def reported(site: Site, tmp: Path) -> tuple[str, dict[str, str]]:
    """A workspace with two imported reports (via the CLI) and two analysis runs; its keys by role."""
    workspace = "reports-" + uuid.uuid4().hex[:6]
    old = artifact("an-old")
    new = artifact("an-new")
    new["title"] = INJECTED_TITLE
    withheld = new["workloads"][0]["opportunities"][0] | {
        "opportunity_id": "c2-swap", "candidate_ids": ["c2"], "recommendation_status": "withheld",
        "evaluation_gate": {"suite_id": "triptych-default", "suite_revision": 1, "effect": "withheld",
                            "reasons": [{"code": "check_below_threshold", "message": "semantic similarity 40% < 50%",
                                         "checks": ["semantic_similarity"]}],
                            "cases": {"eligible": 3, "scored": 3, "passed": 1, "failed": 2, "errored": 0}},
    }  # fmt: skip
    candidate = new["workloads"][0]["candidates"][0]
    new["workloads"][0]["candidates"].append(
        candidate | {"candidate_id": "c2", "model": "tiny-model", "outcome": "rejected", "cost_ratio": 0.01}
    )
    new["workloads"][0]["opportunities"].append(withheld)
    new["workloads"][0]["evidence"][0]["candidate_response"] = "<img src=x onerror=window.__pwned=4>"
    for document in (old, new):
        path = tmp / f"{document['analysis_id']}.json"
        path.write_bytes(raw(document))
        done = subprocess.run([TRIPTYCH, "metergraph", "report", "import", str(path), "--workspace", workspace,
                               "--data-dir", str(site.server.data_dir)], capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
    # Runs as the analysis service records them: one finished with the new report, one still replaying.
    store = SqliteReportStore(site.server.data_dir / "metergraph-analysis.db")
    try:
        now = datetime.now(UTC).isoformat()
        progress = {"phase": "replaying", "workloads_total": 3, "workloads_done": 1, "replays_total": 300,
                    "replays_done": 120, "replays_failed": 0}  # fmt: skip
        for run_id, status, analysis_id in (
            (str(uuid.uuid4()), "succeeded", "an-new"),
            (str(uuid.uuid4()), "running", "an-next"),
        ):
            store.insert_run(workspace, {"run_id": run_id, "kind": "analysis", "analysis_id": analysis_id,
                                         "status": status, "created_at": now, "progress": progress})  # fmt: skip
            if status == "succeeded":
                store.update_run(workspace, run_id, finished_at=now, started_at=now)
        failed = str(uuid.uuid4())
        store.insert_run(workspace, {"run_id": failed, "kind": "analysis", "analysis_id": "an-failed",
                                     "status": "queued", "created_at": now})  # fmt: skip
        store.update_run(workspace, failed, status="failed", finished_at=now, error_code="provider_error",
                         error_message="<i>the provider</i> answered 500")  # fmt: skip
    finally:
        store.close()
    keys = {role: site.mint(workspace, role) for role in ("metadata", "debug")}
    return workspace, keys


@pytest.fixture(scope="module")
def reports(site: Site, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    return reported(site, tmp_path_factory.mktemp("artifacts"))


def test_run_and_report_list_links_open_the_analysis_page(site: Site, tab: Any, reports: Any) -> None:
    workspace, keys = reports
    runs = site.tool(keys["metadata"], "metergraph_list_analysis_runs")
    listed = site.tool(keys["metadata"], "metergraph_list_reports")
    assert runs["runs"] and all(r["app_url"] == listed["app_url"] for r in runs["runs"])
    sign_in(tab, site, keys["metadata"], listed["app_url"].removeprefix(site.url))
    assert tab.url == listed["app_url"]
    for run in runs["runs"]:
        row = tab.locator(f"#runs tr[data-run='{run['run_id']}']")
        assert row.locator(".status").text_content().startswith(run["status"])
    failed = next(r for r in runs["runs"] if r["status"] == "failed")
    assert tab.locator(f"tr[data-run='{failed['run_id']}'] .error").text_content() == (
        f"{failed['error_code']}: {failed['error_message']}"
    )
    running = next(r for r in runs["runs"] if r["status"] == "running")
    assert (
        "1/3 workloads, 120/300 replays"
        in tab.locator(f"tr[data-run='{running['run_id']}'] .progress").text_content()
    )
    assert tab.locator("meta[http-equiv=refresh]").count() == 1  # progress refreshes while a run is active
    shown = tab.locator("#reports tbody tr").evaluate_all("rows => rows.map(r => r.dataset.analysis)")
    assert shown == [r["analysis_id"] for r in listed["reports"]] == ["an-new", "an-old"]
    assert tab.locator("#latest").get_attribute("data-analysis") == "an-new"
    assert INJECTED_TITLE in tab.locator("#latest").text_content()
    # run.report.app_url opens that run's report; metergraph_get_analysis_run links the same pages.
    done = next(r for r in runs["runs"] if r["status"] == "succeeded")
    one = site.tool(keys["metadata"], "metergraph_get_analysis_run", run_id=done["run_id"])["run"]
    assert (one["app_url"], one["report"]["app_url"]) == (done["app_url"], done["report"]["app_url"])
    tab.goto(done["report"]["app_url"])
    assert tab.text_content("#analysis-id") == "an-new"
    assert tab.text_content("#report-title") == INJECTED_TITLE
    assert tab.evaluate("window.__pwned === undefined") and tab.dialogs == []


def test_report_links_open_the_comparison_workload_suite_and_evidence_pages(
    site: Site, tab: Any, reports: Any
) -> None:
    workspace, keys = reports
    report = site.tool(keys["debug"], "metergraph_get_report", analysis_id="an-new")
    sign_in(tab, site, keys["debug"], report["app_url"].removeprefix(site.url))
    assert tab.locator("#latest").get_attribute("data-analysis") == report["analysis_id"]

    support, digest = report["workloads"]
    tab.goto(support["app_url"])  # a model comparison: the report holds candidates for it
    assert support["app_url"].endswith("/comparison")
    for cid, model, outcome in (("c1", "gpt-4o-mini", "accepted"), ("c2", "tiny-model", "rejected")):
        row = tab.locator(f"#candidates tr[data-candidate={cid}]")
        assert row.locator(".model").text_content() == model
        assert row.locator(".outcome").text_content() == outcome
    tab.goto(digest["app_url"])  # no comparison: the workload's page
    assert tab.text_content("#workload-name") == "digest"
    assert tab.text_content("#workload-state") == digest["state"] == "ineligible"

    allowed, withheld = support["opportunities"]
    tab.goto(allowed["app_url"])
    evidence = site.tool(keys["debug"], "metergraph_get_report_evidence", analysis_id="an-new",
                         workload_id=support["workload_id"])  # fmt: skip
    for case in evidence["evidence"]:
        article = tab.locator(f"article[data-case='{case['case_id']}']")
        assert article.locator("pre.candidate").text_content() == case["candidate_response"]["text"]
        assert article.locator("pre.question").text_content() == case["question"]["text"]
    assert len(evidence["evidence"][-1]["question"]["text"].encode()) < len(LONG_TEXT.encode())
    assert tab.locator("text=Cut at 16 KiB.").count() == 1
    assert tab.locator("img").count() == 0 and tab.evaluate("window.__pwned === undefined")

    tab.goto(withheld["app_url"])  # withheld by the acceptance policy: the suite results explain it
    suite = site.tool(keys["debug"], "metergraph_get_suite_results", analysis_id="an-new",
                      workload_id=support["workload_id"])  # fmt: skip
    assert withheld["app_url"] == suite["app_url"] and tab.url == suite["app_url"]
    assert "semantic similarity 40% < 50%" in tab.text_content(".withheld")
    check = suite["candidates"][0]["checks"][0]
    row = tab.locator(f"section[data-candidate=c1] tr[data-check='{check['check_id']}']")
    assert row.locator(".pass-rate").text_content() == percent(check["pass_rate"])
    assert row.locator(".cases").text_content() == ", ".join(check["representative_case_ids"])
    tab.click(f"section[data-candidate=c1] .cases a >> text={check['representative_case_ids'][0]}")
    tab.wait_for_load_state()
    assert tab.url == allowed["app_url"] + f"#case-{check['representative_case_ids'][0]}"

    tab.goto(evidence["metergraph_links"]["workload"])
    assert tab.text_content("#workload-name") == support["workload_name"]
    assert "7 days: 70 calls" in tab.text_content("#workload-usage")


def test_evidence_needs_a_key_that_may_read_content(site: Site, tab: Any, reports: Any) -> None:
    workspace, keys = reports
    report = site.tool(keys["metadata"], "metergraph_get_report", analysis_id="an-new")
    link = report["workloads"][0]["opportunities"][0]["app_url"]
    sign_in(tab, site, keys["metadata"], link.removeprefix(site.url))
    assert "cannot read this page" in tab.text_content("h1")
    assert tab.locator("pre").count() == 0
    tab.goto(site.url + link.removeprefix(site.url).replace("/opportunities/c1-swap", "/suite"))
    assert tab.locator("text=Case text needs a Debug or Replay key.").count() == 1
    tab.goto(report["workloads"][0]["app_url"])  # the comparison names the evidence without linking a 403
    assert tab.locator("#candidates a:text('evidence')").count() == 0
    assert tab.locator("text=evidence needs a Debug key").count() == 1


def test_report_pages_of_an_unknown_report_or_workload_say_not_found(
    site: Site, tab: Any, reports: Any
) -> None:
    workspace, keys = reports
    sign_in(tab, site, keys["debug"], f"/app/w/{workspace}/reports/an-missing")
    assert tab.text_content("#message") == "no report with that analysis_id in this workspace"
    response = tab.goto(site.url + f"/app/w/{workspace}/reports/an-new/workloads/route:nope/comparison")
    assert response.status == 404
    response = tab.goto(site.url + f"/app/w/{workspace}/reports/an-new/workloads/route:digest/comparison")
    assert response.status == 404 and "open the workload's page" in tab.text_content("#message")
    response = tab.goto(
        site.url
        + f"/app/w/{workspace}/reports/an-new/workloads/route:support/opportunities/c1-swap?cursor=%3Cx%3E"
    )
    assert (
        response.status == 422 and tab.text_content("#message") == "cursor is not a cursor this server issued"
    )


def test_hostile_query_parameters_and_paths_at_every_page_never_earn_a_500(site: Site, reports: Any) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    workspace, keys = reports
    cookie = httpx.post(site.url + "/app/sign-in", data={"key": keys["debug"]}).cookies["mg_app_session"]
    base = f"/app/w/{workspace}/reports/an-new/workloads/route:support"
    doors = [f"/app/w/{workspace}/usage", f"/app/w/{workspace}/analysis", f"/app/w/{workspace}/reports/an-new",
             base, base + "/comparison", base + "/suite", base + "/opportunities/c1-swap", "/app/sign-in"]  # fmt: skip
    values = st.one_of(st.sampled_from(NASTY), st.text(max_size=20),
                       st.sampled_from(["1", "90", "91", "²", "route", "model", "//evil.example", "/app/x"]))  # fmt: skip
    params = st.lists(st.tuples(st.sampled_from(["days", "by", "cursor", "next", "x"]), values), max_size=4)
    segments = st.sampled_from(["an-new", "route:support", "c1-swap", "%00", "..", "%2F", "<b>", "x" * 300])
    failures: list[str] = []
    with httpx.Client(base_url=site.url, cookies={"mg_app_session": cookie}, timeout=60.0) as http:

        @settings(max_examples=40, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(door=st.sampled_from(doors), query=params, segment=segments)
        def attack(door: str, query: list[tuple[str, str]], segment: str) -> None:
            for path in (door, door.replace("an-new", segment).replace("c1-swap", segment)):
                try:
                    response = http.get(path, params=query)
                except httpx.InvalidURL:
                    continue
                if response.status_code >= 500 or "text/html" not in response.headers.get("content-type", ""):
                    failures.append(f"{path} {query!r:.200} -> {response.status_code} {response.text[:200]}")
                elif "<script>alert" in response.text or "<b>bold" in response.text:
                    failures.append(f"{path} {query!r:.200} echoed markup unescaped")

        attack()
    assert not failures, "\n".join(failures[:10])


def test_a_real_analysis_run_opens_from_its_links_with_its_progress_report_and_evidence(
    site: Site, tab: Any
) -> None:
    workspace = "run-" + uuid.uuid4().hex[:6]
    mg = open_metergraph(site.server)
    try:
        mg.metadata.set_retain_content(workspace, True, datetime.now(UTC).isoformat())
    finally:
        mg.close()
    questions = [f"support question {i}: when does the <b>store</b> open?" for i in range(6)]
    site.ingest(workspace, [call(0, request_json={"messages": [{"role": "user", "content": q}]},
                                 response_text=f"replayed: {q}", input_tokens=300, output_tokens=40)
                            for q in questions])  # fmt: skip
    key = site.mint(workspace, "debug")
    classified = site.tool(key, "metergraph_start_classification")["run"]
    started = site.tool(key, "metergraph_start_analysis", candidates=["gpt-4o-mini"], samples_per_workload=6,
                        min_samples=5)  # fmt: skip
    run_id = started["run"]["run_id"]
    deadline = time.monotonic() + 180
    while True:
        run = site.tool(key, "metergraph_get_analysis_run", run_id=run_id)["run"]
        if run["status"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert run["status"] == "succeeded", run

    sign_in(tab, site, key, started["run"]["app_url"].removeprefix(site.url))
    row = tab.locator(f"#runs tr[data-run='{run_id}']")
    assert row.locator(".status").text_content() == "succeeded"
    progress = run["progress"]
    expected = (
        f"{progress['workloads_done']}/{progress['workloads_total']} workloads, {progress['replays_done']}/"
    )
    assert expected in row.locator(".progress").text_content()
    assert tab.locator("meta[http-equiv=refresh]").count() == 0  # nothing active: no refreshing
    assert classified["app_url"] == started["run"]["app_url"]  # one Analysis page for both kinds
    classification = site.tool(key, "metergraph_get_analysis_run", run_id=classified["run_id"])["run"]
    row = tab.locator(f"#runs tr[data-run='{classified['run_id']}']")
    assert row.locator(".status").text_content() == classification["status"]
    assert f"→ {classification['progress']['workloads']} workloads" in row.locator(".progress").text_content()

    tab.goto(run["report"]["app_url"])
    report = site.tool(key, "metergraph_get_report", analysis_id=run["report"]["analysis_id"])
    assert tab.text_content("#analysis-id") == report["analysis_id"]
    workload = report["workloads"][0]
    opportunity = workload["opportunities"][0]
    shown = tab.locator(
        f"section[data-workload='{workload['workload_id']}'] tr[data-opportunity='{opportunity['opportunity_id']}']"
    )
    assert shown.locator(".status").text_content() == opportunity["recommendation_status"]
    assert shown.locator(".savings").text_content() == money(opportunity["savings_usd"])

    tab.goto(workload["app_url"])
    assert tab.locator("#candidates tr .model").all_text_contents() == ["gpt-4o-mini"]
    tab.goto(opportunity["app_url"])
    evidence = site.tool(key, "metergraph_get_report_evidence", analysis_id=report["analysis_id"],
                         workload_id=workload["workload_id"])  # fmt: skip
    assert evidence["evidence"]
    for case in evidence["evidence"]:
        article = tab.locator(f"article[data-case='{case['case_id']}']")
        assert article.locator("pre.candidate").text_content() == case["candidate_response"]["text"]
        assert "<b>store</b>" in article.locator("pre.question").text_content()  # shown as text
    assert tab.locator("b:text('store')").count() == 0


# -- the usage charts as drawn: axes, UTC days in any browser time zone, unpriced days ----------------

UNPRICED_MODEL = "no-such-model-xyz"  # not in any price table: its calls are unpriced, never $0
CHART_DAYS = (0, 3, 20)  # days ago with calls: today, inside 7 days, inside 30 days


@pytest.fixture(scope="module")
def charted(site: Site) -> tuple[str, str]:
    workspace = "charts-" + uuid.uuid4().hex[:6]
    rows = []
    for day in CHART_DAYS:
        rows += [call(day, latency_ms=500 + 100 * i) for i in range(4)]
        rows.append(call(day, status="error", latency_ms=3000))
        rows += [call(day, model=UNPRICED_MODEL) for _ in range(2)]  # the only calls of its series
    site.ingest(workspace, rows)
    return workspace, site.mint(workspace, "metadata")


def in_time_zone(tab: Any, zone: str) -> None:
    """Chromium's own time-zone emulation (what a Playwright context's ``timezone_id`` sets), per tab."""
    tab.context.new_cdp_session(tab).send("Emulation.setTimezoneOverride", {"timezoneId": zone})


def hover(tab: Any, metric: str, x: int) -> dict[str, str]:
    """Moves the real mouse onto day ``x``'s point of one chart and reads its legend, series by series."""
    figure = tab.locator(f"figure[data-metric={metric}]")
    lo, hi = json_attr(figure, "data-x-range")
    figure.scroll_into_view_if_needed()
    box = figure.locator(".u-over").bounding_box()
    tab.mouse.move(box["x"] + box["width"] * (x - lo) / (hi - lo), box["y"] + box["height"] / 2)
    rows = figure.locator(".u-legend tr.u-series")
    return {
        (rows.nth(i).locator("th").text_content() or "").strip(): rows.nth(i)
        .locator(".u-value")
        .text_content()
        or ""
        for i in range(rows.count())
    }


def json_attr(locator: Any, name: str) -> Any:
    return json.loads(locator.get_attribute(name))


@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles"])
@pytest.mark.parametrize("days", [1, 7, 30])
def test_usage_charts_draw_utc_days_a_data_scaled_axis_and_unpriced_days_as_gaps(
    site: Site, tab: Any, charted: tuple[str, str], days: int, zone: str
) -> None:
    workspace, key = charted
    in_time_zone(tab, zone)
    sign_in(tab, site, key, f"/app/w/{workspace}/usage?by=model&days={days}")
    offset = 0 if zone == "UTC" else 420  # minutes behind UTC (PDT) or 480 (PST): either way not UTC
    assert tab.evaluate("Intl.DateTimeFormat().resolvedOptions().timeZone") == zone
    assert (tab.evaluate("new Date().getTimezoneOffset()") == 0) == (offset == 0)
    tab.wait_for_function("document.querySelectorAll('figure.chart[data-drawn=true]').length === 4")
    tool = site.tool(key, "metergraph_get_usage_aggregates", group_by=["model"], days=days)

    # The x axis: one point per UTC day of the window, each centred in a one-day slot (at 1 day: a
    # one-day window around today, not years), labelled with its UTC date in any browser time zone.
    first = datetime.fromisoformat(tool["window"]["since"]).astimezone(UTC).date()
    dates = [first + timedelta(days=i) for i in range(days)]
    data = tab.evaluate("JSON.parse(document.getElementById('usage-data').textContent)")
    midnights = [int(datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()) for d in dates]
    assert data["x"] == midnights and data["days"] == [d.isoformat() for d in dates]
    labels = [f"{d:%b} {d.day}" for d in dates]
    for metric in ("cost_usd", "calls", "errors", "p95_latency_ms"):
        figure = tab.locator(f"figure[data-metric={metric}]")
        assert json_attr(figure, "data-x-range") == [midnights[0] - 43_200, midnights[-1] + 43_200]
        drawn = json_attr(figure, "data-x-labels")
        assert drawn and drawn[0] == labels[0] and set(drawn) <= set(labels), drawn
        assert [labels.index(label) for label in drawn] == sorted(labels.index(label) for label in drawn)
        assert drawn == labels if days == 1 else len(drawn) <= 10
    # The errors axis: counts from zero to just above the busiest day, not 0-100.
    errors = [v for s in data["series"] for v in s["errors"]]
    low, high = json_attr(tab.locator("figure[data-metric=errors]"), "data-y-range")
    assert low == 0 and max(errors) <= high <= max(errors) * 1.1 + 1 and high < 100, (low, high)

    # Unpriced days: the unpriced model's cost is a gap, never $0, and the note counts its calls.
    shown = [d for d in CHART_DAYS if d < days]
    unpriced = next(s for s in data["series"] if s["name"] == UNPRICED_MODEL)
    priced = next(s for s in data["series"] if s["name"] == "gpt-4o")
    for ago in shown:
        i = days - 1 - ago
        assert unpriced["cost_usd"][i] is None and unpriced["calls"][i] == 2 and unpriced["unpriced"][i] == 2
        assert priced["cost_usd"][i] > 0
    note = tab.text_content("#unpriced-note") or ""
    n = len(shown)
    assert f"{2 * n} calls on {n} day{'s' if n != 1 else ''} had no price" in note, note

    # Hovers: the UTC day and every series' value, never blank (a gap says why, an empty day says so).
    for ago in sorted({*shown, days - 1}):
        i = days - 1 - ago
        legend = hover(tab, "cost_usd", midnights[i])
        assert legend["Day (UTC)"] == dates[i].isoformat(), legend
        if ago in shown:
            assert legend[UNPRICED_MODEL] == "no price (2 unpriced calls)", legend
            assert legend["gpt-4o"] == f"${priced['cost_usd'][i]:,.4f}", legend
        else:
            assert legend[UNPRICED_MODEL] == "$0.0000" and legend["gpt-4o"] == "$0.0000", legend
        assert all(value.strip() for value in legend.values()), legend
        latency = hover(tab, "p95_latency_ms", midnights[i])
        assert latency["Day (UTC)"] == dates[i].isoformat()
        assert latency["gpt-4o"].endswith(" ms") if ago in shown else latency["gpt-4o"] == "no calls"
