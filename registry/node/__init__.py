"""A serving node's programs: ``modelreg fetch``, ``verify``, ``cache warm``, ``cache sweep`` and ``serve-s3``.

Every program accepts a release through one door, ``opener.py`` (:class:`~registry.node.opener.ReleaseOpener`:
the node's policy, the trust root walked forward, the envelope, paths, bundle, log proof and cosignatures;
accepted only after the program's work succeeded). Around it: ``trust.py`` (the pinned root and what the
node accepted), ``log_proofs.py`` (a release proven in the verifiable log), ``fetch.py`` and ``assemble.py``
(DEST), ``adapters.py`` (an adapter's directory, its one rewrite, its base beside it), ``download.py``,
``blobfile.py`` and ``chunks.py`` (bytes in, checked), ``cache.py`` (the node cache), ``revocations.py`` (the
event stream followed), ``warm.py``, ``sweep.py`` and ``serve_s3.py`` (the daemons), ``progress.py`` and
``textfile.py`` (what a run tells). It talks to the registry only through :mod:`registry.client`, and loads no
server code (``tests/unit/test_layering.py``).
"""
