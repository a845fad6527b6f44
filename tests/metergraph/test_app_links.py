"""App links and the app's sign-in cookie: the rules under the pages (service level)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from triptych.metergraph.links import AppLinks, public_base
from triptych.metergraph.pages.render import json_block
from triptych.metergraph.pages.session import CookieSigner, load_secret
from triptych.metergraph.settings import load_metergraph_settings


def test_links_start_at_the_public_address_and_keep_each_id_in_one_segment() -> None:
    links = AppLinks(public_base("https://mg.example.com/base/", "0.0.0.0", 8000))
    assert links.analysis("ws 1") == "https://mg.example.com/base/app/w/ws%201/analysis"
    assert links.evidence("ws", "../a", "w/1", "o?1") == (
        "https://mg.example.com/base/app/w/ws/reports/..%2Fa/workloads/w%2F1/opportunities/o%3F1"
    )
    assert AppLinks(public_base(None, "127.0.0.1", 8123)).usage("w") == "http://127.0.0.1:8123/app/w/w/usage"
    assert (
        AppLinks(public_base(None, "::1", 80)).suite("w", "a", "b")
        == "http://[::1]:80/app/w/w/reports/a/workloads/b/suite"
    )


def test_a_server_listening_everywhere_without_a_public_url_has_null_links() -> None:
    links = AppLinks(public_base(None, "0.0.0.0", 8000))
    assert (
        links.analysis("w") is None
        and links.report("w", "a") is None
        and links.workload("w", "a", "b") is None
    )


@pytest.mark.parametrize("bad", ["ftp://x", "https://x/?q=1", "https://u:p@x", "/relative", "https://x/#f"])
def test_a_public_url_that_is_not_a_plain_http_address_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="MG_PUBLIC_URL"):
        load_metergraph_settings(public_url=bad)


def test_the_sign_in_cookie_is_refused_when_tampered_expired_or_signed_elsewhere(tmp_path: Path) -> None:
    secret = load_secret(None, tmp_path)
    assert load_secret(None, tmp_path) == secret  # created once, then read by every worker
    assert (tmp_path / "metergraph.web-secret").stat().st_mode & 0o077 == 0
    signer = CookieSigner(secret, 60)
    value = signer.issue("a" * 64, 1000)
    assert signer.read(value, 1030) == "a" * 64
    assert signer.read(value, 1061) is None  # expired
    assert signer.read(value.replace("a" * 64, "b" * 64), 1030) is None  # another key's hash
    assert signer.read(value.replace(".1060.", ".9999."), 1030) is None  # a longer life
    assert CookieSigner(b"other", 60).read(value, 1030) is None
    assert (
        signer.read(None, 0) is None and signer.read("x" * 500, 0) is None and signer.read("a.b", 0) is None
    )
    assert signer.read(f"{'a' * 64}.soon.{value.split('.')[2]}", 0) is None
    assert load_secret("configured-secret", tmp_path / "elsewhere") == b"configured-secret"
    assert not (tmp_path / "elsewhere").exists()  # a configured secret writes nothing


def test_chart_data_cannot_close_its_script_block() -> None:
    text = str(json_block({"name": "</script><script>alert(1)</script>&"}))
    assert "<" not in text and ">" not in text and "&" not in text
