"""C2SP tlog-checkpoint bodies (the spec's example, malformed ones) and tlog-cosignature/v1."""

import base64

import pytest

from registry.domain.errors import (
    InvalidVerifierKeyError,
    MalformedCheckpointError,
    MalformedNoteError,
    NoteSignatureError,
    UnverifiedNoteError,
)
from registry.tlog.checkpoint import (
    Checkpoint,
    CosignatureSigner,
    CosignatureVerifier,
    cosign,
    cosignature_timestamp,
    cosigned_message,
    open_checkpoint,
    parse_checkpoint,
    sign_checkpoint,
)
from registry.tlog.merkle import EMPTY_ROOT, MemoryHashes, leaf_hash, root_hash
from registry.tlog.note import Ed25519Signer, parse_note, parse_signer_key, parse_verifier_key, sign_note

# The example of c2sp.org/tlog-checkpoint and c2sp.org/tlog-cosignature.
SPEC_TEXT = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
SPEC_NOTE = (SPEC_TEXT + "\n"
             "\u2014 example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGk"
             "u9nTo+zyWE+xeMcTOAYQ8=\n"
             "\u2014 witness.example.com/w1 "
             "jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZ"
             "qhf5nNo0xUe+mbIUBkBIfZ+qnA==\n").encode()

ORIGIN = "log.modelreg.example/audit"
LOG = Ed25519Signer.generate(ORIGIN)
W1, W2, W3 = (CosignatureSigner.generate(f"witness.example/w{i}") for i in (1, 2, 3))
ROOT = root_hash(5, MemoryHashes(leaf_hash(bytes([i])) for i in range(5)))


def test_the_spec_example_parses_and_formats_back():
    cp = parse_checkpoint(SPEC_TEXT)
    assert (cp.origin, cp.size, cp.extensions) == ("example.com/behind-the-sofa", 20852163, ())
    assert cp.root_hash == base64.b64decode("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=")
    assert cp.text() == SPEC_TEXT
    with_ext = parse_checkpoint(SPEC_TEXT + "ext one\n")
    assert with_ext.extensions == ("ext one",) and with_ext.text() == SPEC_TEXT + "ext one\n"


def test_the_spec_cosignature_line_carries_its_timestamp():
    note = parse_note(SPEC_NOTE)
    witness = note.signatures[1]
    assert witness.name == "witness.example.com/w1"
    assert cosignature_timestamp(witness.signature) == 1679315147  # the spec's "time 1679315147"
    assert cosigned_message(SPEC_TEXT.encode(), 1679315147) == (
        b"cosignature/v1\ntime 1679315147\n" + SPEC_TEXT.encode())


@pytest.mark.parametrize("text", [
    "example.com/log\n5\n",  # two lines
    "example.com/log\n5\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=",  # no final newline
    "\n5\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",  # empty origin
    "example.com/log\n05\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",  # leading zero
    "example.com/log\n+5\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",
    "example.com/log\n 5\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",
    "example.com/log\n0x5\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",
    "example.com/log\n\u0665\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",  # an Arabic-Indic digit
    "example.com/log\n9223372036854775808\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",  # 2**63
    "example.com/log\n5\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2=\n",  # 31 bytes
    "example.com/log\n5\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2J=\n",  # non-canonical base64
    "example.com/log\n5\nCsUYapGGPo4dkMgIAUqom_Xajj7h2fB2MPA3j2jxq2I=\n",  # URL alphabet
    "example.com/log\n5\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\next\n",  # an empty line
    "example.com/log\n0\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",  # size 0, another root
    "example.com/log\n5\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\nbad\x07\n",
    "example.com/log\n" + "9" * 5000 + "\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",  # past int()'s limit
], ids=range(16))
def test_malformed_checkpoints_are_refused(text):
    with pytest.raises(MalformedCheckpointError):
        parse_checkpoint(text)


def test_the_empty_tree_checkpoint():
    text = Checkpoint(ORIGIN, 0, EMPTY_ROOT).text()
    assert text == f"{ORIGIN}\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n"
    assert parse_checkpoint(text).size == 0
    with pytest.raises(MalformedCheckpointError):
        Checkpoint(ORIGIN, -1, ROOT).text()


def test_a_signed_checkpoint_opens_with_the_logs_key_and_origin():
    msg = sign_checkpoint(Checkpoint(ORIGIN, 5, ROOT), LOG)
    opened = open_checkpoint(msg, ORIGIN, LOG.verifier())
    assert opened.checkpoint == Checkpoint(ORIGIN, 5, ROOT)
    with pytest.raises(MalformedCheckpointError):
        open_checkpoint(msg, "another.example/log", LOG.verifier())
    with pytest.raises(UnverifiedNoteError):
        open_checkpoint(msg, ORIGIN, Ed25519Signer.generate(ORIGIN).verifier())


def test_a_note_signed_by_the_log_that_is_no_checkpoint_is_refused():
    with pytest.raises(MalformedCheckpointError):
        open_checkpoint(sign_note(f"{ORIGIN}\nnot a size\nroot\n", LOG), ORIGIN, LOG.verifier())


def _cosigned(*witnesses, timestamp=1700000000):
    msg = sign_checkpoint(Checkpoint(ORIGIN, 5, ROOT), LOG)
    lines = [cosign(msg, ORIGIN, LOG.verifier(), w, timestamp).line() for w in witnesses]
    return msg + "".join(lines).encode()


def test_cosignatures_verify_and_count_toward_a_quorum():
    msg = _cosigned(W1, W2)
    keys = [W1.verifier(), W2.verifier(), W3.verifier()]
    opened = open_checkpoint(msg, ORIGIN, LOG.verifier(), witnesses=keys, quorum=2)
    stamps = {s.name: cosignature_timestamp(s.signature) for s in opened.note.verified if s.name != ORIGIN}
    assert stamps == {"witness.example/w1": 1700000000, "witness.example/w2": 1700000000}
    with pytest.raises(UnverifiedNoteError) as e:
        open_checkpoint(msg, ORIGIN, LOG.verifier(), witnesses=keys, quorum=3)
    assert e.value.details["needed"] == 3
    with pytest.raises(ValueError):
        open_checkpoint(msg, ORIGIN, LOG.verifier(), witnesses=keys, quorum=4)


def test_a_duplicated_cosignature_counts_once():
    msg = _cosigned(W1, W1)
    with pytest.raises(UnverifiedNoteError):
        open_checkpoint(msg, ORIGIN, LOG.verifier(), witnesses=[W1.verifier(), W2.verifier()], quorum=2)


def test_a_cosignature_by_the_logs_own_key_type_or_a_stranger_does_not_count():
    msg = _cosigned(CosignatureSigner.generate("witness.example/w1"))  # W1's name, another key
    with pytest.raises(UnverifiedNoteError):
        open_checkpoint(msg, ORIGIN, LOG.verifier(), witnesses=[W1.verifier()], quorum=1)


def test_a_cosignature_over_another_checkpoint_or_time_is_refused():
    other = sign_checkpoint(Checkpoint(ORIGIN, 6, ROOT), LOG)
    line = cosign(other, ORIGIN, LOG.verifier(), W1, 1700000000).line()
    msg = sign_checkpoint(Checkpoint(ORIGIN, 5, ROOT), LOG) + line.encode()
    with pytest.raises(NoteSignatureError):
        open_checkpoint(msg, ORIGIN, LOG.verifier(), witnesses=[W1.verifier()], quorum=1)
    good = _cosigned(W1)
    sig = parse_note(good).signatures[1]
    shifted = type(sig)(sig.name, sig.key_id, (1700000001).to_bytes(8, "big") + sig.signature[8:])
    forged = good[:good.rindex("\u2014".encode())] + shifted.line().encode()
    with pytest.raises(NoteSignatureError):
        open_checkpoint(forged, ORIGIN, LOG.verifier(), witnesses=[W1.verifier()], quorum=1)
    too_late = type(sig)(sig.name, sig.key_id, (2**63).to_bytes(8, "big") + sig.signature[8:])
    with pytest.raises(MalformedNoteError):
        open_checkpoint(good[:good.rindex("\u2014".encode())] + too_late.line().encode(), ORIGIN,
                        LOG.verifier(), witnesses=[W1.verifier()], quorum=1)


def test_cosigner_keys_are_type_0x04_and_not_interchangeable_with_log_keys():
    vkey = W1.verifier().vkey
    assert base64.b64decode(vkey.split("+", 2)[2])[0] == 0x04
    assert parse_verifier_key(vkey, CosignatureVerifier).key_id == W1.key_id
    with pytest.raises(InvalidVerifierKeyError):
        parse_verifier_key(vkey)  # not an Ed25519 note key
    with pytest.raises(InvalidVerifierKeyError):
        parse_verifier_key(LOG.verifier().vkey, CosignatureVerifier)
    assert parse_signer_key(W1.skey, CosignatureSigner).key_id == W1.key_id
    assert W1.key_id != Ed25519Signer(W1.name, W1._key).key_id  # the type byte is in the key ID
