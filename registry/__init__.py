"""modelreg's core: mirror, hash, sign, scan, evaluate, approve and release model versions.

Where to start:

- ``registry/domain/``: the value types, the version state machine, the rules and the error
  hierarchy, with no I/O. Read ``states.py`` and ``errors.py`` first.
- ``registry/services/``: the use cases the API, the workers and the CLI call (one module per area).
- ``registry/bootstrap.py``: builds settings, database, blob store, signer and job queue once.
- Adapters: ``db/`` (SQLAlchemy), ``storage/`` (blob stores), ``sources/`` (upstreams), ``signing/``,
  ``scanning/``, ``evals/``, ``facts/``, ``licenses/``; ``jobs.py`` (the database job queue),
  ``audit.py`` (the hash-chained audit log), ``auth.py``, ``oidc.py`` (single sign-on), ``policy.py`` (Rego).
- ``registry/client/`` and ``registry/cli/``: the typed API client, the fetch client and the command.

``docs/architecture.md`` has the map; nothing here imports ``api/`` or ``workers/``.
"""

import sys as _sys

# httpx imports its own command-line tool (click, rich, pygments: 60 to 100 ms of CPU) whenever click is
# installed, which uvicorn brings. modelreg never runs ``httpx.main``; marking the module absent makes httpx
# define its stub instead, for every process that imports modelreg (the CLI, the API, the workers, the node).
_sys.modules.setdefault("httpx._main", None)
