"""File paths (registry/domain/files.py)."""

from __future__ import annotations

import pytest

from registry.domain.errors import InvalidPathError
from registry.domain.files import validate_path


@pytest.mark.parametrize("path", ["a\x00b", "a\nb", "a\x7fb", "a\x85b", "weights\u202enip.exe", "x/\u2066y"])
def test_paths_with_control_or_bidi_characters_are_refused(path):
    """A right-to-left override shows ``weights<RLO>nip.exe`` as ``weightsexe.pin`` to a reviewer."""
    with pytest.raises(InvalidPathError):
        validate_path(path)


@pytest.mark.parametrize("path", ["model.safetensors", "onnx/模型.onnx", "a b/c\u00a0d", "\u05d0/\u05d1.json"])
def test_ordinary_paths_in_any_script_are_accepted(path):
    assert validate_path(path) == path


def test_a_digest_with_a_final_newline_is_not_a_digest():
    from registry.domain.errors import InvalidInputError
    from registry.domain.files import is_sha256, require_sha256

    assert is_sha256("a" * 64) and not is_sha256("a" * 64 + "\n")
    with pytest.raises(InvalidInputError):
        require_sha256("a" * 64 + "\n")
