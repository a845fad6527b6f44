"""Webhook signing secrets at rest: sealed (AES-256-GCM) with a key kept apart from the database, so a copy
of the database alone (a backup, a support bundle) does not give away the secrets: ``MG_WEBHOOK_KEY``
when set (server mode on several machines sets the same one everywhere, decision record 0161), else a
key file in the data directory (``metergraph-webhooks.key``, mode 0600). The secret must be recoverable
to sign, so it cannot be stored hashed as agent keys are. Decision record 0076.
"""

from __future__ import annotations

import base64
import os
import secrets
import time
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_FILE = "metergraph-webhooks.key"
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def valid_key(text: str) -> bool:
    """Whether ``text`` is the base64 of a 256-bit key."""
    try:
        return len(base64.b64decode(text, validate=True)) == 32
    except ValueError:
        return False


class SecretBox:
    """Seals and opens endpoint secrets; the associated data binds a sealed secret to its endpoint id."""

    def __init__(self, data_dir: Path, configured: str | None = None) -> None:
        self.path = data_dir / KEY_FILE
        self._configured = configured
        self._cipher: AESGCM | None = None

    def _aead(self) -> AESGCM:
        if self._cipher is None:
            self._cipher = AESGCM(self._key())
        return self._cipher

    def _key(self) -> bytes:
        if self._configured is not None:
            return base64.b64decode(self._configured)
        # O_EXCL: two processes creating the key at once agree on the one that won.
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            text = self.path.read_bytes().strip()
            for _ in range(100):  # another process created it a moment ago and is still writing it
                if text:
                    break
                time.sleep(0.01)
                text = self.path.read_bytes().strip()
            key = base64.b64decode(text)
            if len(key) != 32:
                raise ValueError(f"{self.path} does not hold a 256-bit key") from None
            return key
        key = AESGCM.generate_key(bit_length=256)
        with os.fdopen(fd, "wb") as out:
            out.write(base64.b64encode(key) + b"\n")
            out.flush()
            os.fsync(out.fileno())
        return key

    def seal(self, endpoint_id: str, secret: str) -> str:
        nonce = os.urandom(12)
        sealed = self._aead().encrypt(nonce, secret.encode(), endpoint_id.encode())
        return base64.b64encode(nonce + sealed).decode()

    def open(self, endpoint_id: str, sealed: str) -> str:
        raw = base64.b64decode(sealed)
        return self._aead().decrypt(raw[:12], raw[12:], endpoint_id.encode()).decode()
