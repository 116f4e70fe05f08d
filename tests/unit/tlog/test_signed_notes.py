"""C2SP signed notes: the known vectors of Go's golang.org/x/mod/sumdb/note tests and of the C2SP spec,
and the malformed, mis-signed and oversized notes a verifier must refuse."""

import base64

import pytest

from registry.domain.errors import (
    InvalidVerifierKeyError,
    MalformedNoteError,
    NoteSignatureError,
    UnverifiedNoteError,
)
from registry.tlog.note import (
    MAX_NOTE_BYTES,
    Ed25519Signer,
    Signature,
    key_id,
    open_note,
    parse_note,
    parse_signer_key,
    parse_verifier_key,
    sign_note,
)

# Vectors from golang.org/x/mod sumdb/note/note_test.go (data).
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
PETER_SIG = ("\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6"
             "RyyBwJnAM=\n")
ENOCH_SIG = ("\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1Rv"
             "Mc+QQ=\n")
# The example of c2sp.org/signed-note.
C2SP_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
C2SP_NOTE = ("This is an example message.\n\n\u2014 example.com/foo "
             "Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Z"
             "tg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n").encode()

PETER = parse_verifier_key(PETER_VKEY)
ENOCH = parse_verifier_key(ENOCH_VKEY)


def test_go_key_strings_parse_and_their_key_ids_are_the_spec_hash():
    assert (PETER.name, PETER.key_id, PETER.vkey) == ("PeterNeumann", 0xC74F20A3, PETER_VKEY)
    assert key_id("PeterNeumann", 0x01, PETER.public_key) == 0xC74F20A3
    signer = parse_signer_key(PETER_SKEY)
    assert signer.skey == PETER_SKEY and signer.verifier().vkey == PETER_VKEY
    assert parse_verifier_key(C2SP_VKEY).key_id == 0x530D903A


def test_signing_gives_gos_note_byte_for_byte_and_replaces_the_signers_old_line():
    signer = parse_signer_key(PETER_SKEY)
    want = (TEXT + "\n" + PETER_SIG).encode()
    assert sign_note(TEXT, signer) == want
    stale = Signature("PeterNeumann", 0xC74F20A3, b"BADSIGN")
    assert sign_note(TEXT, signer, keep=[stale]) == want
    for text in ["abc", "", "a\x01b\n"]:
        with pytest.raises(MalformedNoteError):
            sign_note(text, signer)


def test_the_c2sp_example_note_verifies():
    opened = open_note(C2SP_NOTE, [parse_verifier_key(C2SP_VKEY)])
    assert opened.text == "This is an example message.\n"


def test_unknown_signers_are_ignored_and_known_ones_verified():
    msg = (TEXT + "\n" + PETER_SIG + ENOCH_SIG).encode()
    opened = open_note(msg, [PETER])
    assert opened.text == TEXT
    assert [s.name for s in opened.verified] == ["PeterNeumann"]
    assert [(s.name, s.key_id) for s in opened.unverified] == [("EnochRoot", 0xAF0CFE78)]
    both = open_note(msg, [PETER, ENOCH], require=["PeterNeumann", "EnochRoot"])
    assert [s.name for s in both.verified] == ["PeterNeumann", "EnochRoot"]


def test_a_note_signed_by_unknown_keys_only_is_unverified():
    msg = (TEXT + "\n" + PETER_SIG + ENOCH_SIG).encode()
    with pytest.raises(UnverifiedNoteError):
        open_note(msg, [])
    other = Ed25519Signer.generate("PeterNeumann")  # same name, other key (so another key ID): unknown
    with pytest.raises(UnverifiedNoteError):
        open_note(msg, [other.verifier()])


def test_a_required_signer_must_have_signed():
    msg = (TEXT + "\n" + PETER_SIG).encode()
    with pytest.raises(UnverifiedNoteError) as e:
        open_note(msg, [PETER, ENOCH], require=["EnochRoot"])
    assert e.value.details["missing"] == ["EnochRoot"]
    with pytest.raises(ValueError):
        open_note(msg, [PETER], require=["EnochRoot"])  # a requirement no verifier can meet is a caller bug


def test_a_wrong_signature_from_a_known_key_rejects_the_whole_note():
    bad = PETER_SIG[:60] + "ABCD" + PETER_SIG[64:]
    with pytest.raises(NoteSignatureError) as e:
        open_note((TEXT + "\n" + bad).encode(), [PETER])
    assert str(e.value) == "invalid signature for key PeterNeumann+c74f20a3"
    with pytest.raises(NoteSignatureError):  # another text under Peter's signature
        open_note(("If you think.\n\n" + PETER_SIG).encode(), [PETER])
    with pytest.raises(NoteSignatureError):  # a good line does not excuse a bad one
        open_note((TEXT + "\n" + PETER_SIG + bad).encode(), [PETER])


def test_duplicate_signatures_count_once():
    msg = (TEXT + "\n" + PETER_SIG + PETER_SIG + ENOCH_SIG + ENOCH_SIG).encode()
    opened = open_note(msg, [PETER])
    assert len(opened.verified) == 1 and len(opened.unverified) == 1


def test_two_verifiers_for_one_key_are_a_configuration_error():
    with pytest.raises(ValueError):
        open_note((TEXT + "\n" + PETER_SIG).encode(), [PETER, parse_verifier_key(PETER_VKEY)])


@pytest.mark.parametrize("msg", [
    TEXT,
    TEXT + "\n",
    TEXT + "\n" + PETER_SIG[:-1],
    "\x01" + TEXT + "\n" + PETER_SIG,
    TEXT + "\n" + "\u2014 Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6"
                  "RyyBwJnAM=",
    TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
    TEXT + "\n" + "- PeterNeumann " + PETER_SIG.split(" ")[2],  # a hyphen, not an em dash
    TEXT + "\n" + "\u2014 a+b " + PETER_SIG.split(" ")[2],
    TEXT + "\n" + "\u2014 PeterNeumann AAAA\n",  # shorter than a key ID and a signature
    TEXT + "\n" + "\u2014 PeterNeumann x08go/ZJ!!!\n",
    TEXT + "\n" + "\u2014 PeterNeumann\n",
    TEXT + "\n" + "\u2014  x08go/ZJkuBS9UG\n",
], ids=range(12))
def test_malformed_notes_are_refused(msg):
    with pytest.raises(MalformedNoteError):
        open_note(msg.encode(), [PETER])


def test_bytes_that_are_not_utf8_are_refused():
    with pytest.raises(MalformedNoteError):
        open_note(b"\xff" + (TEXT + "\n" + PETER_SIG).encode(), [PETER])


def test_too_many_signatures_and_oversized_notes_are_refused():
    with pytest.raises(MalformedNoteError) as e:
        open_note((TEXT + "\n" + PETER_SIG * 101).encode(), [PETER])
    assert "signatures" in e.value.reason
    assert len(open_note((TEXT + "\n" + PETER_SIG * 16).encode(), [PETER]).verified) == 1
    big = "x" * MAX_NOTE_BYTES + "\n"
    with pytest.raises(MalformedNoteError) as e:
        parse_note((big + "\n" + PETER_SIG).encode())
    assert "larger" in e.value.reason


def test_mangled_verifier_keys_are_refused():
    """Every proper substring and every one-byte change of Go's key string is refused (as Go's test does)."""
    b = PETER_VKEY.encode()
    bad = [b[i:j] for i in range(len(b) + 1) for j in range(i + 1, len(b) + 1) if (i, j) != (0, len(b))]
    bad += [b[:i] + bytes([b[i] + 1]) + b[i + 1:] for i in range(len(b))]
    for key in bad:
        try:
            text = key.decode()
        except UnicodeDecodeError:
            continue
        with pytest.raises(InvalidVerifierKeyError):
            parse_verifier_key(text)
    with pytest.raises(InvalidVerifierKeyError):  # wrong key length, with an adjusted key hash (Go's vector)
        parse_verifier_key("PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==")
    with pytest.raises(InvalidVerifierKeyError):  # unknown algorithm, with an adjusted key hash (Go's vector)
        parse_verifier_key("PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")


def test_mangled_signer_keys_are_refused():
    b = PETER_SKEY.encode()
    for i in range(len(b)):
        with pytest.raises(InvalidVerifierKeyError):
            parse_signer_key((b[:i] + bytes([b[i] + 1]) + b[i + 1:]).decode())
    with pytest.raises(InvalidVerifierKeyError):
        parse_signer_key(PETER_SKEY[12:])
    with pytest.raises(InvalidVerifierKeyError):
        parse_signer_key(PETER_SKEY[:-4])
    cosigner_type = "PRIVATE+KEY+PeterNeumann+c74f20a3+" + base64.b64encode(b"\x04" + b"\x00" * 32).decode()
    with pytest.raises(InvalidVerifierKeyError):
        parse_signer_key(cosigner_type)
