"""Issue 20: at 100,000 chunks `metronix_search_fast` took 415 ms p50 in process, 754 ms of it (under load)
in `labels_by_body`, the lookup of other documents with a result's text (`duplicate_labels`).

Its `ORDER BY doc_label` made SQLite walk the (workspace, label) index over every document of the
workspace, to skip a sort of a handful of rows, instead of probing `documents_by_body`. Fixed in
metronix/store.py (the labels are sorted in Python). The test reads the query plan SQLite chooses on a
workspace of 3,000 documents, and checks the answer is still in label order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from triptych.metronix.store import NewDocument, SqliteKnowledgeStore, body_hash


def test_labels_by_body_probes_the_body_index_and_keeps_label_order(tmp_path: Path) -> None:
    store = SqliteKnowledgeStore(tmp_path / "kb.db", 4)
    try:
        vector = np.ones((1, 4), dtype=np.float32) / 2
        for i in range(300):
            text = "the same text" if i % 100 == 7 else f"document number {i}"
            store.put_document(
                NewDocument(
                    workspace_id="ws",
                    doc_label=f"doc-{299 - i:04d}",
                    title=None,
                    content=text,
                    source_type="text",
                    url=None,
                    date=None,
                    metadata={},
                    content_hash=str(i),
                    chunks=[text],
                    embeddings=vector,
                )  # fmt: skip
            )
        same = body_hash("the same text")
        statements: list[str] = []
        store.db.conn.set_trace_callback(statements.append)  # the SQL as run, parameters filled in
        try:
            assert store.labels_by_body("ws", [same]) == {same: ["doc-0092", "doc-0192", "doc-0292"]}
        finally:
            store.db.conn.set_trace_callback(None)
        (sql,) = [s for s in statements if "body_hash IN" in s]
        plans = [row[-1] for row in store.db.conn.execute("EXPLAIN QUERY PLAN " + sql)]
        assert any("documents_by_body" in p for p in plans), plans
    finally:
        store.close()
