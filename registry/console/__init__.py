"""The web console's logic that is not HTTP: sessions and CSRF, page view models, SVG pictures.

``api/routers/ui.py`` is the console's thin router: it opens the session (:mod:`.sessions`), calls the
services (through :mod:`.views`, which assembles what one page shows from the same service functions the
JSON API calls) and renders a template. Nothing here decides who may see what: the services do.

Usage (a sketch, not run as a doctest)::

    key = SessionKey(b"k" * 32)
    opened = open_session(session, key, cookie, now=clock.now())
    views.approval_queue(session, opened.principal)
"""

from registry.console.sessions import SessionKey, open_session  # noqa: F401
