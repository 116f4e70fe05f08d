"""``modelreg login``: sign in with the registry's identity provider and keep a short-lived registry token.

The CLI asks the registry which provider and public client to use (``GET /auth/oidc`` under the API), listens on
``127.0.0.1:<random port>/callback``, and sends the person's browser to the provider with PKCE (S256), a
``state`` and a ``nonce``. The provider's redirect brings the code back to the loopback listener, which checks
``state``; the registry then redeems the code itself and answers a registry token (its ``auth/oidc/token``).
The token is kept in ``<config dir>/logins.json`` (``$MODELREG_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/modelreg``,
else ``~/.config/modelreg``), mode 0600, written atomically, keyed by registry URL: later commands use it when
no ``--token`` (nor ``MODELREG_TOKEN``) is given, until it expires.
"""

from __future__ import annotations

import http.server
import secrets
import sys
import threading
import webbrowser
from typing import Any
from urllib.parse import parse_qs, urlsplit

import typer

from registry.cli._base import CliError, JsonOpt, UrlOpt, _client, _emit, _say, app
from registry.client.logins import store as _store


class _Callback(http.server.BaseHTTPRequestHandler):
    """Receives the provider's redirect: one GET of /callback with code and state (or error)."""

    server: "_CallbackServer"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        parts = urlsplit(self.path)
        if parts.path != "/callback" or len(self.path) > 8192:
            self.send_error(404)
            return
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if not secrets.compare_digest(query.get("state", "").encode(), self.server.state.encode()):
            self._answer(400, "This sign-in was not started by this modelreg login (wrong state). Close this tab.")
            return
        self.server.result = query
        ok = "code" in query
        self._answer(200 if ok else 400, "Signed in: you can close this tab and go back to the terminal." if ok
                     else f"The identity provider did not sign you in ({query.get('error', 'no code')}).")
        self.server.done.set()

    def _answer(self, status: int, text: str) -> None:
        body = f"<!doctype html><title>modelreg login</title><p>{text}</p>".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _CallbackServer(http.server.HTTPServer):
    def __init__(self, state: str) -> None:
        super().__init__(("127.0.0.1", 0), _Callback)
        self.state = state
        self.result: dict[str, str] | None = None
        self.done = threading.Event()


@app.command()
def login(url: str = UrlOpt, no_browser: bool = typer.Option(False, "--no-browser", help="Only print the URL."),
          wait: float = typer.Option(300.0, "--timeout", min=1, max=3600, help="Seconds to wait for the browser."),
          as_json: bool = JsonOpt) -> None:
    """Sign in with the registry's identity provider; keep a short-lived token for later commands."""
    import httpx
    from authlib.integrations.httpx_client import OAuth2Client

    with _client(url, None) as api:
        info = api.oidc_login_info()
    try:
        metadata = httpx.get(f"{info['issuer']}/.well-known/openid-configuration", timeout=10).json()
    except (httpx.HTTPError, ValueError) as exc:
        raise CliError(f"cannot read the identity provider's discovery document: {exc}") from None
    if (not isinstance(metadata, dict) or metadata.get("issuer") != info["issuer"]
            or not isinstance(metadata.get("authorization_endpoint"), str)):
        raise CliError("the identity provider's discovery document does not match the registry's issuer")
    state, nonce, verifier = secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48)
    server = _CallbackServer(state)
    redirect_uri = f"http://127.0.0.1:{server.server_address[1]}/callback"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with OAuth2Client(info["client_id"], scope=" ".join(info["scopes"]), redirect_uri=redirect_uri,
                          code_challenge_method="S256") as oauth:
            authorize_url, _ = oauth.create_authorization_url(metadata["authorization_endpoint"], state=state,
                                                              nonce=nonce, code_verifier=verifier)
        _say(f"Sign in with {info['provider_name']} at: {authorize_url}", err=True)
        sys.stderr.flush()
        if not no_browser:
            webbrowser.open(authorize_url)
        if not server.done.wait(wait):
            raise CliError(f"no sign-in came back within {wait:.0f} seconds")
    finally:
        server.shutdown()
        server.server_close()
    result = server.result or {}
    if "code" not in result:
        raise CliError(f"the identity provider did not sign you in ({result.get('error', 'no code')})")
    with _client(url, None) as api:
        issued = api.oidc_token(code=result["code"], code_verifier=verifier, redirect_uri=redirect_uri, nonce=nonce)
    path = _store(url, issued["token"], issued["principal"], issued["expires_at"])
    _emit({"principal": issued["principal"], "expires_at": issued["expires_at"], "stored_in": str(path)}, as_json,
          f"signed in as {issued['principal']} until {issued['expires_at']} (token kept in {path})")

