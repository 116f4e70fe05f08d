"""No Docker engine runs here: check docker-compose.yml against the real settings and CLI instead."""

from pathlib import Path

import pytest
import typer.main
import yaml

from registry.cli import app
from registry.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _modelreg_services(compose):
    return {name: svc for name, svc in compose["services"].items()
            if isinstance(svc.get("command"), list) and svc["command"][0] == "modelreg"}


def test_every_modelreg_variable_is_a_setting(compose):
    fields = {f"MODELREG_{name.upper()}" for name in Settings.model_fields}
    seen = set()
    for svc in _modelreg_services(compose).values():
        for var in svc["environment"]:
            seen.add(var)
            assert var in fields, f"{var} is not a modelreg setting"
    assert {"MODELREG_DATABASE_URL", "MODELREG_BLOB_STORE_URL", "MODELREG_SIGNING_KEY_FILE"} <= seen


def test_settings_accept_the_compose_values(compose, monkeypatch):
    env = compose["services"]["api"]["environment"]
    for var, value in env.items():
        monkeypatch.setenv(var, str(value))
    settings = Settings()
    assert settings.resolved_blob_store_url() == env["MODELREG_BLOB_STORE_URL"]
    assert settings.database_url == env["MODELREG_DATABASE_URL"]


def test_api_and_worker_commands_exist(compose):
    services = _modelreg_services(compose)
    assert {"api", "worker", "migrate"} <= set(services)
    cli = typer.main.get_command(app)
    for name, svc in services.items():
        args = svc["command"][1:]
        sub = cli.commands.get(args[0])
        assert sub is not None, f"{name}: unknown command {args[0]}"
        sub.make_context(args[0], list(args[1:]))  # raises on an unknown option


def test_services_have_health_checks_and_volumes(compose):
    for name in ("postgres", "seaweedfs", "api"):
        assert "healthcheck" in compose["services"][name]
    assert {"postgres-data", "seaweedfs-data"} <= set(compose["volumes"])


def test_api_replicas_share_one_console_key_that_the_repository_does_not_publish(compose):
    """A console session opened on one API replica must open on the next, and nobody who read this repository may
    forge one (issue 30): no key is written in the file; the API makes it in its data directory on a named
    volume, which every replica mounts."""
    for svc in _modelreg_services(compose).values():
        assert "MODELREG_CONSOLE_KEY" not in svc["environment"]
        assert "MODELREG_PRESIGN_SECRET" not in svc["environment"]
    api = compose["services"]["api"]
    data_dir = api["environment"]["MODELREG_DATA_DIR"]
    assert any(volume.split(":")[0] in compose["volumes"] and volume.split(":")[1] == data_dir
               for volume in api["volumes"])
