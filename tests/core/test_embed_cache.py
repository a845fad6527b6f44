"""Where the quantized copy of the bundled model is derived and found."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from triptych.core.embed import LocalEmbedder, quantized_model


def test_an_unusable_cache_folder_falls_back_to_the_temp_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, _ = LocalEmbedder.files()
    derived = quantized_model(source)  # the normal cache (derived once per machine)
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder should be")
    temp = tmp_path / "tmp"
    (temp / "triptych-models").mkdir(parents=True)
    shutil.copy(derived, temp / "triptych-models" / derived.name)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))

    found = quantized_model(source, blocked / "models")

    assert found == temp / "triptych-models" / derived.name
    assert blocked.read_text().startswith("a file")


def test_the_derived_model_embeds_like_the_packaged_one() -> None:
    embedder = LocalEmbedder(threads=1)
    vectors = embedder.embed(["The ferry leaves at noon", "The ferry departs at midday", "Tax forms are due"])
    assert vectors.shape == (3, 384)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])
