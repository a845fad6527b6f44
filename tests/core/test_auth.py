"""Workspace rules, roles, agent ids and bearer-token verification (HS256 and RS256)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from triptych.core.auth import Principal, TokenVerifier, bearer_token, mint_token
from triptych.core.config import Settings
from triptych.core.errors import AuthRequired

# 64 bytes or more: PyJWT warns (an error here) about HMAC keys shorter than the hash (HS512: 64).
SECRET = "test-secret-" + "0123456789abcdef" * 4
OTHER_SECRET = "other-secret-" + "fedcba9876543210" * 4


def _settings(**values: Any) -> Settings:
    # Explicit values win over any TRIPTYCH_* variable in the environment.
    base: dict[str, Any] = {
        "jwt_secret": None,
        "jwt_public_key": None,
        "jwt_jwks_url": None,
        "jwt_audience": None,
    }
    base.update(values)
    return Settings(**base)


def _claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": "alice",
        "role": "editor",
        "workspace_ids": ["team-a", "team-b"],
        "iat": now,
        "exp": now + 3600,
    }
    claims.update(overrides)
    return {key: value for key, value in claims.items() if value is not None}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _raw_token(header: dict[str, Any], claims: dict[str, Any], key: bytes | None) -> str:
    """A JWT assembled by hand, so tests can sign what a careful library would refuse to."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest() if key is not None else b""
    return f"{signing_input}.{_b64(signature)}"


@pytest.fixture(scope="module")
def rsa_keys() -> tuple[rsa.RSAPrivateKey, str]:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_pem = (
        private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public_pem


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.def.ghi", "abc.def.ghi"),
        ("bearer   abc ", "abc"),
        (None, None),
        ("", None),
        ("Bearer ", None),
        ("Basic dXNlcjpwYXNz", None),
        ("abc.def.ghi", None),
    ],
)
def test_bearer_token_is_taken_only_from_a_bearer_authorization(
    header: str | None, token: str | None
) -> None:
    assert bearer_token(header) == token


# -- TokenVerifier: HS256 ---------------------------------------------------------------


def test_verifier_without_any_key_refuses_to_start() -> None:
    with pytest.raises(ValueError, match="no key is configured"):
        TokenVerifier(_settings())


def test_valid_hs256_token_yields_its_principal() -> None:
    token = jwt.encode(_claims(), SECRET, algorithm="HS256")

    principal = TokenVerifier(_settings(jwt_secret=SECRET)).verify(token)

    assert principal == Principal(user="alice", role="editor", workspace_ids=("team-a", "team-b"))
    assert not principal.local
    assert principal.claims["sub"] == "alice"


def test_minted_token_round_trips_through_the_verifier() -> None:
    token = mint_token(SECRET, "bob", "viewer", ["ws1"])

    principal = TokenVerifier(_settings(jwt_secret=SECRET)).verify(token)

    assert (principal.user, principal.role, principal.workspace_ids) == ("bob", "viewer", ("ws1",))


def test_token_without_role_is_a_viewer() -> None:
    token = jwt.encode(_claims(role=None), SECRET, algorithm="HS256")

    principal = TokenVerifier(_settings(jwt_secret=SECRET)).verify(token)

    assert principal.role == "viewer"
    assert not principal.can_write


def test_expired_token_is_refused() -> None:
    token = mint_token(SECRET, "alice", "editor", ["a"], ttl_seconds=60, now=int(time.time()) - 3600)

    with pytest.raises(AuthRequired, match="expired"):
        TokenVerifier(_settings(jwt_secret=SECRET)).verify(token)


def test_token_signed_with_another_secret_is_refused() -> None:
    token = jwt.encode(_claims(), OTHER_SECRET, algorithm="HS256")

    with pytest.raises(AuthRequired, match="invalid token"):
        TokenVerifier(_settings(jwt_secret=SECRET)).verify(token)


def test_token_with_a_tampered_payload_is_refused() -> None:
    header, _, signature = jwt.encode(_claims(role="viewer"), SECRET, algorithm="HS256").split(".")
    forged_payload = _b64(json.dumps(_claims(role="admin", workspace_ids=[])).encode())

    with pytest.raises(AuthRequired):
        TokenVerifier(_settings(jwt_secret=SECRET)).verify(f"{header}.{forged_payload}.{signature}")


def test_unsigned_alg_none_token_is_refused() -> None:
    token = _raw_token({"alg": "none", "typ": "JWT"}, _claims(role="admin"), key=None)

    with pytest.raises(AuthRequired, match="'none' is not accepted"):
        TokenVerifier(_settings(jwt_secret=SECRET)).verify(token)


@pytest.mark.parametrize("algorithm", ["HS384", "HS512"])
def test_token_with_an_algorithm_not_configured_is_refused(algorithm: str) -> None:
    token = jwt.encode(_claims(), SECRET, algorithm=algorithm)

    with pytest.raises(AuthRequired, match="not accepted"):
        TokenVerifier(_settings(jwt_secret=SECRET)).verify(token)


def test_rs256_token_is_refused_when_only_a_secret_is_configured(
    rsa_keys: tuple[rsa.RSAPrivateKey, str],
) -> None:
    token = jwt.encode(_claims(), rsa_keys[0], algorithm="RS256")

    with pytest.raises(AuthRequired, match="not accepted"):
        TokenVerifier(_settings(jwt_secret=SECRET)).verify(token)


@pytest.mark.parametrize("role", ["owner", "ADMIN", "", 1])
def test_token_role_outside_admin_editor_viewer_is_refused(role: object) -> None:
    token = jwt.encode(_claims(role=role), SECRET, algorithm="HS256")

    with pytest.raises(AuthRequired, match="role"):
        TokenVerifier(_settings(jwt_secret=SECRET)).verify(token)


@pytest.mark.parametrize("workspaces", ["team-a", [1, 2], {"team-a": True}])
def test_token_workspace_ids_must_be_a_list_of_strings(workspaces: object) -> None:
    token = jwt.encode(_claims(workspace_ids=workspaces), SECRET, algorithm="HS256")

    with pytest.raises(AuthRequired, match="workspace_ids"):
        TokenVerifier(_settings(jwt_secret=SECRET)).verify(token)


@pytest.mark.parametrize("missing", ["sub", "exp"])
def test_token_without_sub_or_exp_is_refused(missing: str) -> None:
    token = jwt.encode(_claims(**{missing: None}), SECRET, algorithm="HS256")

    with pytest.raises(AuthRequired):
        TokenVerifier(_settings(jwt_secret=SECRET)).verify(token)


@pytest.mark.parametrize("token", ["", "garbage", "a.b.c", "...."])
def test_malformed_token_is_refused_as_auth_required(token: str) -> None:
    with pytest.raises(AuthRequired):
        TokenVerifier(_settings(jwt_secret=SECRET)).verify(token)


def test_configured_audience_must_be_in_the_token() -> None:
    verifier = TokenVerifier(_settings(jwt_secret=SECRET, jwt_audience="triptych"))

    assert verifier.verify(jwt.encode(_claims(aud="triptych"), SECRET, algorithm="HS256")).user == "alice"
    for claims in (_claims(), _claims(aud="someone-else")):
        with pytest.raises(AuthRequired):
            verifier.verify(jwt.encode(claims, SECRET, algorithm="HS256"))


# -- TokenVerifier: RS256 ---------------------------------------------------------------


def test_valid_rs256_token_is_accepted_with_an_inline_pem_public_key(
    rsa_keys: tuple[rsa.RSAPrivateKey, str],
) -> None:
    private, public_pem = rsa_keys
    token = jwt.encode(_claims(role="admin", workspace_ids=[]), private, algorithm="RS256")

    principal = TokenVerifier(_settings(jwt_public_key=public_pem)).verify(token)

    assert (principal.user, principal.role, principal.all_workspaces) == ("alice", "admin", True)


def test_rs256_public_key_may_be_given_as_a_file_path(
    rsa_keys: tuple[rsa.RSAPrivateKey, str], tmp_path: Path
) -> None:
    private, public_pem = rsa_keys
    key_file = tmp_path / "public.pem"
    key_file.write_text(public_pem)
    token = jwt.encode(_claims(), private, algorithm="RS256")

    assert TokenVerifier(_settings(jwt_public_key=str(key_file))).verify(token).user == "alice"


def test_rs256_token_signed_by_another_key_is_refused(rsa_keys: tuple[rsa.RSAPrivateKey, str]) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = jwt.encode(_claims(), stranger, algorithm="RS256")

    with pytest.raises(AuthRequired, match="invalid token"):
        TokenVerifier(_settings(jwt_public_key=rsa_keys[1])).verify(token)


def test_hs256_token_keyed_with_the_public_key_is_refused(rsa_keys: tuple[rsa.RSAPrivateKey, str]) -> None:
    # The classic algorithm-confusion attack: HMAC "signed" with the server's public key.
    public_pem = rsa_keys[1]
    token = _raw_token({"alg": "HS256", "typ": "JWT"}, _claims(role="admin"), key=public_pem.encode())

    with pytest.raises(AuthRequired, match="not accepted"):
        TokenVerifier(_settings(jwt_public_key=public_pem)).verify(token)


def test_verifier_with_both_keys_accepts_hs256_and_rs256(rsa_keys: tuple[rsa.RSAPrivateKey, str]) -> None:
    private, public_pem = rsa_keys
    verifier = TokenVerifier(_settings(jwt_secret=SECRET, jwt_public_key=public_pem))

    assert verifier.verify(jwt.encode(_claims(sub="h"), SECRET, algorithm="HS256")).user == "h"
    assert verifier.verify(jwt.encode(_claims(sub="r"), private, algorithm="RS256")).user == "r"


def test_rs256_token_is_verified_against_a_jwks_url(rsa_keys: tuple[rsa.RSAPrivateKey, str]) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    private, _ = rsa_keys
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    class Jwks(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        verifier = TokenVerifier(
            _settings(jwt_jwks_url=f"http://127.0.0.1:{server.server_address[1]}/jwks.json")
        )
        good = jwt.encode(_claims(sub="jw"), private, algorithm="RS256", headers={"kid": "k1"})
        assert verifier.verify(good).user == "jw"
        stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        forged = jwt.encode(_claims(), stranger, algorithm="RS256", headers={"kid": "k1"})
        with pytest.raises(AuthRequired):
            verifier.verify(forged)
    finally:
        server.shutdown()
        server.server_close()
