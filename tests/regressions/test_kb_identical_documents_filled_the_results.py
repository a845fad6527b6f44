"""Issue 21, item 4: five copies of one file took the whole top 5 of `metronix_search_fast`.

Fixed in metronix/knowledge.py (one result per distinct text; the other labels in `duplicate_labels`).
"""

from __future__ import annotations

import uuid

from harness import ServerProcess, mcp_session


def ws() -> str:
    return "ws-" + uuid.uuid4().hex[:8]


async def test_identical_documents_take_one_place_in_the_results_and_name_the_others(
    open_server: ServerProcess,
) -> None:
    workspace = ws()
    text = "The harbour ferry leaves at seven and returns at noon on weekdays."
    async with mcp_session(open_server.url + "/mcp") as mcp:
        for copy in range(5):
            await mcp.call("metronix_store", content=text, doc_label=f"copy-{copy}", workspace_id=workspace)
        await mcp.call(
            "metronix_store",
            content="The harbour ferry does not run on public holidays.",
            doc_label="holidays",
            workspace_id=workspace,
        )
        await mcp.call(
            "metronix_store",
            content="Ferry tickets are sold at the harbour kiosk.",
            doc_label="tickets",
            workspace_id=workspace,
        )
        found = await mcp.call("metronix_search_fast", query="harbour ferry", workspace_id=workspace, top_k=3)

    results = found.data["results"]
    assert found.data["count"] == 3
    labels = [r["doc_label"] for r in results]
    assert set(labels) - {"copy-0", "copy-1", "copy-2", "copy-3", "copy-4"} == {"holidays", "tickets"}
    (copy,) = [r for r in results if r["doc_label"].startswith("copy-")]
    assert sorted([copy["doc_label"], *copy["duplicate_labels"]]) == [f"copy-{i}" for i in range(5)]
    assert all(r["duplicate_labels"] == [] for r in results if r is not copy)
