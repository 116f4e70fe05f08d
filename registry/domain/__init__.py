"""The core that does no I/O: value types, the version state machine, rules and the error hierarchy.

The modules import the standard library and each other only, so they are unit tested without fixtures
and ``registry/client`` shares ``errors`` with the server. Start with ``states`` (the state
machine), ``errors`` (one root, ``RegistryError``, and a stable ``code`` per class), ``files`` and
``refs`` (what a file and a model reference are); ``approvals``, ``aliases`` and ``policy_input`` hold the
rules and the documents the Rego policies judge.

Example:
    >>> from registry.domain.refs import parse_ref
    >>> ref = parse_ref("modelreg://acme/tiny@prod")
    >>> ref.model, ref.alias, str(ref)
    ('acme/tiny', 'prod', 'acme/tiny@prod')
"""
