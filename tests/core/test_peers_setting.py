"""``TRIPTYCH_PEERS`` (decision 0200): the other machines' base URLs, comma-separated, trailing slashes
dropped; anything but an http(s) URL is refused when the settings load, naming the variable."""

from __future__ import annotations

import pytest

from triptych.core.config import Settings


def test_peers_are_read_as_a_comma_separated_list_of_base_urls() -> None:
    settings = Settings(peers="http://10.0.0.12:8000/, https://b.example.test ")  # type: ignore[arg-type]
    assert settings.peers == ["http://10.0.0.12:8000", "https://b.example.test"]
    assert Settings().peers == []


@pytest.mark.parametrize("value", ["10.0.0.12:8000", "ftp://b.example.test", "http://"])
def test_a_peer_that_is_no_http_url_is_refused_by_name(value: str) -> None:
    with pytest.raises(ValueError, match="TRIPTYCH_PEERS must list http:// or https:// base URLs"):
        Settings(peers=value)  # type: ignore[arg-type]
