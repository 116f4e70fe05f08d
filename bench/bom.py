"""How long the CycloneDX ML-BOM of a 20,000-file version takes: the library's way against the direct one.

Usage (from the repository root)::

    .venv/bin/python bench/bom.py [--files 20000] [--rounds 3]

It builds a migrated SQLite registry in a temporary directory, seeds one version of ``acme/many`` through the
real pipeline (a five-file unit: config, tokenizer, generation config, chat template, weights; submitted,
mirrored, scanned and sealed), then adds ``--files`` small files' rows to it as the mirror would have left
them, as ``tests/integration/test_oci_store.py``'s many-small-files test does (their scan records are not
made: 20,000 scan jobs would take many minutes here).

Each round builds the version's BOM both ways, with the same serial number and a clock that stands still:

- old: ``exports.cyclonedx_bom(..., reference=True)`` (every file component a ``cyclonedx-python-lib``
  object, sorted and written by the library), validated by the schema check as it was before
  (``registry/domain/bom_schema.py`` with only ``uniqueItems`` replaced: jsonschema's own ``$ref`` and
  ``items``);
- new: the default (the file components' JSON written directly, in the library's order), validated by
  today's check.

It prints each round's two times and their ratio, and fails if the two documents differ by one byte.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[0] = str(REPO)

import argparse  # noqa: E402 (after sys.path[0] is set)
import datetime as dt  # noqa: E402 (after sys.path[0] is set)
import hashlib  # noqa: E402 (after sys.path[0] is set)
import io  # noqa: E402 (after sys.path[0] is set)
import json  # noqa: E402 (after sys.path[0] is set)
import os  # noqa: E402 (after sys.path[0] is set)
import platform  # noqa: E402 (after sys.path[0] is set)
import tempfile  # noqa: E402 (after sys.path[0] is set)
import time  # noqa: E402 (after sys.path[0] is set)
import uuid  # noqa: E402 (after sys.path[0] is set)

TENANT, MODEL = "acme", "many"


def seed(container, files_count: int) -> int:
    """acme/many@1 through the pipeline, then ``files_count`` small files' rows; its version id."""
    from registry.db.models import VersionFile
    from registry.domain.files import FileEntry
    from registry.services import loaders, versions
    from tests.support.registry import drain, make_admin

    admin = make_admin(container, TENANT)
    unit = {"config.json": json.dumps({"model_type": "llama", "hidden_size": 8}).encode(),
            "tokenizer.json": b'{"version": "1.0"}', "generation_config.json": b"{}",
            "chat_template.jinja": b"{% for m in messages %}{{ m.content }}{% endfor %}",
            "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "}
    with container.session_factory() as session:
        entries = []
        for path, data in unit.items():
            digest = hashlib.sha256(data).hexdigest()
            versions.upload_blob(session, admin, TENANT, digest, io.BytesIO(data), len(data),
                                 blob_store=container.blob_store)
            entries.append(FileEntry(path, len(data), digest))
        versions.submit_uploaded(session, admin, TENANT, MODEL, entries, label="bench bom",
                                 limits=container.limits(), ports=container.ports)
    drain(container)
    many = {f"data/part-{i:05d}/{'n' * (i % 7)}value.json": b'{"i": %d}' % (i % 250) for i in range(files_count)}
    with container.session_factory() as session:
        version = loaders.load_version_unchecked(session, loaders.load_model_unchecked(session, TENANT, MODEL), 1)
        assert version.manifest_bundle is not None, f"the seeded version did not seal: {version.state}"
        for path, data in many.items():
            session.add(VersionFile(version_id=version.id, path=path, size=len(data),
                                    sha256=hashlib.sha256(data).hexdigest()))
        session.commit()
        return version.id


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from jsonschema.validators import Draft7Validator, extend

    from registry.bootstrap import bootstrap, load_settings, prepare_embedded
    from registry.clock import ManualClock
    from registry.db.models import Version
    from registry.domain import bom_schema
    from registry.services import exports
    from tests.support import db as dbsupport

    with tempfile.TemporaryDirectory(prefix="bench-bom-") as tmp:
        database_url = dbsupport.sqlite_copy(dbsupport.create_sqlite_template(Path(tmp)), Path(tmp))
        settings = load_settings(database_url=database_url, data_dir=Path(tmp) / "data")
        prepare_embedded(settings)
        container = bootstrap(settings)
        try:
            version_id = seed(container, args.files)
            clock, serial = ManualClock(dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)), uuid.UUID(int=1)
            print(f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, load "
                  f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; a version of {args.files + 5} files")
            schema, registry = bom_schema.schema_and_registry()
            old_check = extend(Draft7Validator, validators={"uniqueItems": bom_schema._unique_items})(
                schema, registry=registry, format_checker=Draft7Validator.FORMAT_CHECKER)
            new_check = bom_schema._validator
            for number in range(1, args.rounds + 1):
                timings, documents = {}, {}
                for way, reference, check in (("old", True, lambda: old_check), ("new", False, new_check)):
                    bom_schema._validator = check  # what validate_bom uses, for this call
                    try:
                        with container.session_factory() as session:
                            version = session.get(Version, version_id)
                            started = time.perf_counter()
                            documents[way] = exports.cyclonedx_bom(
                                session, version, blob_store=container.blob_store, clock=clock,
                                serial_number=serial, reference=reference)
                            timings[way] = time.perf_counter() - started
                    finally:
                        bom_schema._validator = new_check
                if documents["old"] != documents["new"]:
                    raise SystemExit("the two ways gave different documents")
                print(f"round {number}: old {timings['old']:.2f} s, new {timings['new']:.2f} s, "
                      f"old/new {timings['old'] / timings['new']:.2f}x "
                      f"({len(documents['new']) / 1e6:.1f} MB, identical)", flush=True)
        finally:
            container.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
