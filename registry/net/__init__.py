"""Outbound network access the registry starts on its own: the SSRF guard of :mod:`registry.net.egress`."""
