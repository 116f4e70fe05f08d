"""The documents an auditor can export of a sealed version, named once for the API, the CLI and the service.

Example:
    >>> ExportFormat("slsa").value, [f.value for f in ExportFormat]
    ('slsa', ['cyclonedx', 'slsa'])
"""

from __future__ import annotations

import enum


class ExportFormat(str, enum.Enum):
    """``cyclonedx``: a CycloneDX 1.6 ML-BOM; ``slsa``: an SLSA provenance statement in a DSSE envelope."""

    cyclonedx = "cyclonedx"
    slsa = "slsa"
