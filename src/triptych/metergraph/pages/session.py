"""The app's sign-in cookie: which agent key a browser signed in with, signed so it cannot be forged.

A person signs in by pasting an agent key into a form (POST, never a URL, so no access log or browser
history holds it). The cookie carries the key's SHA-256 hash (what the store already keys on, not the
key) and an expiry, with an HMAC over both: each request looks the key up again, so a revoked key signs
every browser out at once, and a role or environment change applies on the next page. The secret is
``MG_WEB_SECRET`` or a random one created once in the data directory, shared by every worker.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from pathlib import Path

COOKIE = "mg_app_session"
SECRET_FILE = "metergraph.web-secret"
_HASH = 64  # hex SHA-256


def load_secret(configured: str | None, data_dir: Path) -> bytes:
    """``MG_WEB_SECRET``, else the data directory's secret file, created (0600) when missing."""
    if configured:
        return configured.encode("utf-8")
    path = data_dir / SECRET_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = data_dir / f".{SECRET_FILE}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))
        try:
            os.link(tmp, path)  # atomic and never overwrites: the first worker's secret wins
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip().encode("utf-8")


class CookieSigner:
    def __init__(self, secret: bytes, ttl_seconds: int) -> None:
        self._secret = secret
        self.ttl = ttl_seconds

    def _mac(self, payload: str) -> str:
        digest = hmac.new(self._secret, payload.encode("ascii"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")

    def issue(self, key_hash: str, now: float) -> str:
        payload = f"{key_hash}.{int(now) + self.ttl}"
        return f"{payload}.{self._mac(payload)}"

    def read(self, value: str | None, now: float) -> str | None:
        """The key hash of a valid, unexpired cookie, else None."""
        if not value or len(value) > 200:
            return None
        parts = value.split(".")
        if len(parts) != 3:
            return None
        key_hash, expires, mac = parts
        if len(key_hash) != _HASH or not expires.isdigit():
            return None
        if not hmac.compare_digest(mac, self._mac(f"{key_hash}.{expires}")):
            return None
        if int(expires) < now:
            return None
        return key_hash
