"""The serving node the fetch-client modules drive: ``modelreg fetch``, ``verify`` and ``cache`` against a real
registry behind the manifest stand-in (``tests/support/fetch_node.py``).

The version is made by the real pipeline and approved (the approvals stand-in); its bytes come from the
registry's own presigned blob URLs (Range included). ``tests/support/manifest_standin.py`` answers the manifest
and trust-root endpoints by the contract, with releases the test signs with its own key and root, and proxies
the blob URLs so the test sees every GET. Each refusal leaves DEST as it was and exits with its own code and
one stderr line. Each module starts from ``build_node_world`` (``pytest.mark.seeded``), built once per worker
and database whichever module asks first.
"""

from __future__ import annotations

import pytest

from api.app import create_app
from tests.support.fetch_node import Node
from tests.support.live_app import serve_in_thread
from tests.support.manifest_standin import Standin


@pytest.fixture
def node(container, tmp_path, signing_key_pem, seeded):
    with serve_in_thread(create_app(container)) as url, Standin(url) as standin:
        yield Node(container, tmp_path, standin, signing_key_pem)
