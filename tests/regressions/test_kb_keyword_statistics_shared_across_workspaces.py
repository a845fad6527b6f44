"""Issue 21, item 5: knowledge-base BM25 statistics were shared by all workspaces.

An exact match in a small workspace scored `keyword_score: 0.0` and one tenant's documents shifted
another's scores. Fixed in metronix/store.py (an in-process BM25 index per workspace, smooth IDF).
"""

from __future__ import annotations

import uuid

from harness import ServerProcess, mcp_session


def ws() -> str:
    return "ws-" + uuid.uuid4().hex[:8]


async def test_keyword_scores_use_the_workspace_s_own_statistics(open_server: ServerProcess) -> None:
    small, big = ws(), ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        for doc_label, content in (
            ("z", "The zeppelin hangar opens at dawn."),
            ("b", "Bikes wait by the gate."),
        ):
            await mcp.call("metronix_store", content=content, doc_label=doc_label, workspace_id=small)
        before = await mcp.call("metronix_search_fast", query="zeppelin", workspace_id=small)
        for i in range(12):
            await mcp.call(
                "metronix_store",
                content=f"Zeppelin flight {i} carried zeppelin mail over the zeppelin field.",
                doc_label=f"flight-{i}",
                workspace_id=big,
            )
        after = await mcp.call("metronix_search_fast", query="zeppelin", workspace_id=small)

    top = before.data["results"][0]
    assert top["doc_label"] == "z"
    assert top["keyword_score"] is not None and top["keyword_score"] > 0.0  # an exact match counts
    # Another workspace's documents change nothing here.
    drop = ("latency_ms",)
    assert {k: v for k, v in after.data.items() if k not in drop} == {
        k: v for k, v in before.data.items() if k not in drop
    }
