"""The largest signed documents a node reads, in a module of its own.

``registry.signing`` enforces them when it verifies a document; the API client bounds its reads by them. They
live here, not in the signing modules, so that a command that never verifies anything (``modelreg whoami``,
``status``, ``approve``) does not load ``cryptography`` and the transparency log's code at start.
"""

MAX_RELEASE_BYTES = 8 << 20
"""The largest release envelope a node reads (100,000 files fit)."""

MAX_ROOT_BYTES = 64 << 10
"""The largest root document a node reads (an envelope with a handful of keys is a few kilobytes)."""
