"""The version page follows a running version by itself (console.js), with no reload by the test.

``modelreg serve`` runs with no worker threads, so a submitted version waits; the page shows its
progress. Then a ``modelreg worker`` beside it runs the pipeline, and the page, polling its progress
URL, reloads itself once the version stops moving and shows it awaiting approval.
"""

from __future__ import annotations

import os
import signal
import subprocess

from registry.client.api import RegistryApi
from tests.support.server import MODELREG, start_server
from tests.support.tiny_model import tiny_model_files
from tests.support.uploads import submit_upload


def test_a_running_versions_page_refreshes_itself_until_it_stops(browser, tmp_path, shots):
    server = start_server(tmp_path / "data", workers=0)
    worker = None
    try:
        admin = RegistryApi(server.url, server.admin_token)
        admin.create_tenant("team")
        number = submit_upload(admin, "team", "moving", tiny_model_files(11), "moving")
        context = browser.new_context(base_url=server.url)
        page = context.new_page()
        page.goto("/ui/sign-in")
        page.get_by_label("API token").fill(server.admin_token)
        page.get_by_role("button", name="Sign in").click()
        page.goto(f"/ui/models/team/moving/versions/{number}")
        before = page.locator("#state").inner_text()
        assert before not in ("awaiting_approval", "approved", "failed"), before
        assert "files stored" in page.locator("#progress").inner_text()
        page.screenshot(path=shots / "version-running.png", full_page=True)
        env = {**server.env(), "HF_HUB_DISABLE_TELEMETRY": "1"}
        with (tmp_path / "worker.log").open("wb") as log:
            worker = subprocess.Popen([MODELREG, "worker"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        # The script reloads the page when the version stops: the progress line is gone, the policy's verdict shown.
        page.locator("#progress").wait_for(state="detached", timeout=120_000)
        assert page.locator("#state").inner_text() == "awaiting_approval"
        assert "needs an approval by security" in page.inner_text("main")
        context.close()
    finally:
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=30)
        server.stop()
