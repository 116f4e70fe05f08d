"""Red team, round 3: the sniffer's fixed prefix, protobuf layouts and strings the model file sets.

Samples come from :mod:`tests.support.scan_samples` (``REDTEAM`` entries of round 3, run by
``test_redteam_pickle``) and :mod:`tests.support.format_samples`; they are only ever scanned.
"""

from __future__ import annotations

import io
import json

import pytest

from registry.scanning import Verdict, jinja_check, scan_stream
from registry.scanning.pickle_scan import probe_pickle
from tests.support import format_samples as F
from tests.support import scan_samples as S


def _scan(name: str, data: bytes):  # type: ignore[no-untyped-def]
    return scan_stream(name, io.BytesIO(data), len(data))


# --- pickles whose first opcode outruns the sniff prefix ------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        S.long_first_string_pushes_payload_past_sniff_prefix,
        S.noop_padding_pushes_payload_past_sniff_prefix,
        S.protocol2_long_binunicode_before_payload,
    ],
)
def test_payload_past_the_prefix_is_found_by_reading_further(build) -> None:  # type: ignore[no-untyped-def]
    data = build()
    assert not probe_pickle(data[:65536])  # the prefix alone is inconclusive...
    assert probe_pickle(data[:65536], io.BytesIO(data), len(data))  # ...the stream is not
    scan = _scan("weights.bin", data)
    assert scan.format == "pickle"
    assert any(f.rule_id == "pickle.call.not-allowed" and "os.getcwd" in f.location
               for f in scan.findings), scan.as_dict()


def test_cut_opcode_that_declares_more_bytes_than_the_file_is_not_a_pickle() -> None:
    # "T" (BINSTRING) with a length read from text: far more than the stream holds.
    data = b"Project\nThe end\n" + b"x" * 100_000
    assert not probe_pickle(data[:65536], io.BytesIO(data), len(data))


def test_second_pickle_past_the_prefix_is_interpreted_not_called_trailing_data() -> None:
    scan = _scan("m.pkl", S.second_pickle_after_long_string())
    assert scan.verdict is Verdict.UNSAFE
    assert "pickle.stream.trailing-data" not in {f.rule_id for f in scan.findings}
    assert any("pickle #1" in f.location and "os.getcwd" in f.location for f in scan.findings)


def test_global_then_stop_is_a_pickle() -> None:
    assert probe_pickle(S.import_only_two_opcode_pickle())
    assert not probe_pickle(b"N.")  # two opcodes that resolve nothing stay data


# --- ONNX laid out to dodge a prefix sniffer -----------------------------------------------------


@pytest.mark.parametrize("name", sorted(F.onnx_sniff_dodges()))
def test_onnx_sniffed_whatever_the_field_layout(name: str) -> None:
    import onnx

    data = F.onnx_sniff_dodges()[name]
    # protobuf (what onnx and onnxruntime parse with) accepts the layout and sees the location.
    model = onnx.load_model_from_string(data)
    assert any(e.value == "../../../etc/passwd" for t in model.graph.initializer for e in t.external_data)
    scan = _scan("model.onnx", data)
    assert scan.format == "onnx"
    assert scan.verdict is Verdict.UNSAFE, scan.as_dict()


@pytest.mark.parametrize("trainer_first", [False, True])
def test_sentencepiece_model_is_not_onnx(trainer_first: bool) -> None:
    data = F.sentencepiece_model_proto(trainer_first=trainer_first)
    scan = _scan("tokenizer.model", data)
    assert scan.format == "unknown"
    assert scan.verdict is Verdict.SAFE, scan.as_dict()


# --- chat templates whose attribute names come from the model's own strings -------------------


@pytest.mark.parametrize("name", sorted(F.FILE_STRING_KEY_CHAT_TEMPLATES))
def test_key_taken_from_a_special_token_is_a_gadget(name: str) -> None:
    issues = jinja_check.check_template(F.FILE_STRING_KEY_CHAT_TEMPLATES[name])
    assert any(i.kind == "gadget" and i.severity.value == "unsafe" for i in issues), issues


def test_special_tokens_used_as_text_stay_clean() -> None:
    template = (
        "{{ bos_token }}{% for m in messages %}{{ m['content'].replace(eos_token, '') }}"
        "{{ m['content'].split(eos_token)[0] }}{{ m['content'][:-(eos_token|length)] }}"
        "{{ messages[1 if eos_token else 0]['role'] }}{% endfor %}{{ eos_token }}"
    )
    assert jinja_check.check_template(template) == []


# --- a zip that Python's zipfile finds at the end of a file, junk after its end record ----------


def test_zip_behind_a_prefix_with_junk_after_its_end_record_is_found() -> None:
    import zipfile

    data = F.keras_zip_after_text_with_junk_after_end_record()
    assert "config.json" in zipfile.ZipFile(io.BytesIO(data)).namelist()  # what keras.saving opens
    scan = _scan("model.keras", data)
    assert scan.verdict is Verdict.UNSAFE, scan.as_dict()
    assert any(f.rule_id == "polyglot.zip-trailer" and f.severity.value == "unsafe" for f in scan.findings)


def test_text_ending_with_end_record_bytes_but_no_directory_is_text() -> None:
    data = b"notes\n" * 100 + b"PK\x05\x06" + bytes(18) + b"tail\n"
    assert _scan("notes.txt", data).verdict is Verdict.SAFE


# --- joblib: compressed streams and arrays written inside the pickle ---------------------------


@pytest.mark.parametrize(("kind", "compress"), [
    ("zlib", lambda b: __import__("zlib").compress(b, 3)),
    ("lzma", lambda b: __import__("lzma").compress(b, format=__import__("lzma").FORMAT_ALONE)),
])
def test_joblib_compressions_are_sniffed_and_opened(kind: str, compress) -> None:  # type: ignore[no-untyped-def]
    scan = _scan("model.joblib", compress(S.reduce_pickle(4)))
    assert scan.format == kind
    # reduce_pickle pickles os.getcwd as the platform module (posix.getcwd).
    assert any(f.rule_id == "pickle.call.not-allowed" and "getcwd" in f.location for f in scan.findings), scan.as_dict()


def test_joblib_array_bytes_are_skipped_as_joblib_reads_them() -> None:
    scan = _scan("model.joblib", S.joblib_array_pickle(bytes(range(200)) * 5))
    assert scan.verdict is Verdict.SAFE, scan.as_dict()


def test_joblib_padding_read_as_opcodes_by_plain_pickle_is_scanned() -> None:
    scan = _scan("model.joblib", S.joblib_padding_byte_starts_plain_pickle_payload())
    calls = [f for f in scan.findings if f.rule_id == "pickle.call.not-allowed"]
    assert calls and all("os.getcwd" in f.location for f in calls), scan.as_dict()


def test_joblib_stream_after_the_array_is_interpreted() -> None:
    scan = _scan("model.joblib", S.joblib_payload_after_array_bytes())
    assert any(f.rule_id == "pickle.call.not-allowed" and "os.getcwd" in f.location
               for f in scan.findings), scan.as_dict()


def test_joblib_array_announcing_more_bytes_than_the_file_fails_closed() -> None:
    data = S.joblib_array_pickle(bytes(8), shape=(1 << 20,))
    assert _scan("model.joblib", data).verdict is Verdict.UNSAFE


def test_joblib_object_array_pickle_is_interpreted() -> None:
    scan = _scan("model.joblib", S.joblib_object_array_nested_payload())
    rules = {f.rule_id for f in scan.findings}
    assert {"pickle.joblib.object-array", "pickle.call.not-allowed"} <= rules, scan.as_dict()


# --- tar headers: the checksum forms tarfile accepts ----------------------------------------------


@pytest.mark.parametrize("checksum", ["octal", "signed", "base256"])
def test_v7_tar_is_sniffed_whatever_checksum_form_tarfile_accepts(checksum: str) -> None:
    import tarfile

    data = S.v7_tar(b"storages", S.reduce_pickle(2), checksum=checksum)
    assert tarfile.open(fileobj=io.BytesIO(data), mode="r:").getnames() == ["storages"]
    scan = _scan("model.pt", data)
    assert scan.format == "tar"
    assert scan.verdict is Verdict.UNSAFE


def test_gguf_whose_first_block_is_a_tar_header_is_read_as_a_tar_too(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import tarfile

    import gguf as gguf_lib

    data = F.gguf_tar_polyglot(S.reduce_pickle(2))
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    assert "general.x" in gguf_lib.GGUFReader(path).fields
    assert "storages" in tarfile.open(fileobj=io.BytesIO(data), mode="r:").getnames()
    scan = _scan("model.gguf", data)
    assert scan.format == "gguf"
    assert "polyglot.tar" in {f.rule_id for f in scan.findings}
    assert scan.verdict is Verdict.UNSAFE, scan.as_dict()


def test_npy_header_numpy_rewrites_is_read_as_numpy_reads_it() -> None:
    import warnings

    from numpy.lib import _format_impl

    data = S.npy_python2_long_shape_object_payload()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shape, _, dtype = _format_impl._read_array_header(io.BytesIO(data[8:]), (1, 0), max_header_size=10_000)
    assert shape == (1,) and dtype.hasobject  # what np.load sees, before it unpickles the data
    scan = _scan("arr.npy", data)
    assert {"numpy.object-dtype", "pickle.call.not-allowed"} <= {f.rule_id for f in scan.findings}, scan.as_dict()


def test_keras_config_padded_past_the_parse_limit_fails_closed() -> None:
    from registry.scanning import keras as keras_scan

    config = F.keras_sequential_config()
    config["config"]["layers"].append(F.keras_lambda_layer())
    raw = json.dumps(config).encode()
    raw = raw[:-1] + b" " * (keras_scan.MAX_CONFIG_BYTES + 1) + raw[-1:]  # keras.saving parses it all the same
    scan = _scan("model.keras", F.keras_archive(raw))
    assert scan.verdict is Verdict.UNSAFE, scan.as_dict()


# --- TorchScript archives: code to review, not a Python payload ---------------------------------


def test_torchscript_archive_is_code_to_review_not_unsafe() -> None:
    scan = _scan("model.pt", S.torchscript_archive())
    rules = {f.rule_id for f in scan.findings}
    assert scan.verdict is Verdict.SUSPICIOUS, scan.as_dict()
    assert {"pickle.global.torchscript-class", "remote-code.python-file"} <= rules


def test_torch_class_names_outside_torchscript_archives_stay_unsafe() -> None:
    body = b"\x80\x02" + S.g0("__torch__.evil", "Thing") + b")\x81."
    assert _scan("model.pt", S.torch_zip_with_member("data.pkl", body)).verdict is Verdict.UNSAFE


def test_dunder_inside_a_torchscript_name_stays_unsafe() -> None:
    members = S.torch_zip_members()
    prefix = next(n for n in members if n.endswith("data.pkl")).rsplit("/", 1)[0]
    members[f"{prefix}/data.pkl"] = b"\x80\x02" + S.g0("__torch__.x", "__builtins__") + b"."
    members[f"{prefix}/constants.pkl"] = b"\x80\x02)."
    members[f"{prefix}/code/__torch__/x.py"] = b"def f(x):\n    return x\n"
    scan = _scan("model.pt", S.rezip(members))
    assert "pickle.global.dunder" in {f.rule_id for f in scan.findings}
    assert scan.verdict is Verdict.UNSAFE


def test_onnx_function_default_attribute_tensor_is_checked() -> None:
    scan = _scan("model.onnx", F.onnx_function_attribute_default_external())
    assert "onnx.external-data.escape" in {f.rule_id for f in scan.findings}, scan.as_dict()


# --- torch.storage._load_from_bytes: allowed exactly when its bytes are here and clean ----------


def test_plain_pickled_tensor_is_safe_and_its_archive_is_scanned() -> None:
    scan = _scan("tensors.pkl", S.tensor_pickled_with_plain_pickle())
    assert scan.verdict is Verdict.SAFE, scan.as_dict()
    assert any(f.rule_id == "pickle.nested" for f in scan.findings)


def test_load_from_bytes_reached_through_an_allowed_caller_is_scanned() -> None:
    scan = _scan("m.pkl", S.load_from_bytes_via_rebuild_from_type_v2())
    assert any("getcwd" in f.location and f.severity.value == "unsafe" for f in scan.findings), scan.as_dict()


def test_load_from_bytes_of_computed_bytes_is_unsafe() -> None:
    body = b"\x80\x02" + S.g0("torch.storage", "_load_from_bytes") + b"N\x85R."
    scan = _scan("m.pkl", body)
    assert "pickle.call.loader-opaque" in {f.rule_id for f in scan.findings}
    assert scan.verdict is Verdict.UNSAFE


# --- YAML configs with Python tags --------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(F.YAML_PYTHON_TAG_SAMPLES))
def test_yaml_python_tags_are_unsafe(name: str) -> None:
    import yaml

    data = F.YAML_PYTHON_TAG_SAMPLES[name]
    tags = [n.tag for _, n in yaml.compose(data.decode()).value]  # parsed, never constructed
    assert any("python/" in t for t in tags)
    scan = _scan("hparams.yaml", data)
    assert "remote-code.yaml.python-tag" in {f.rule_id for f in scan.findings}
    assert scan.verdict is Verdict.UNSAFE


def test_plain_yaml_config_is_safe() -> None:
    data = b"model:\n  hidden_size: 768\n  activation: gelu\noptimizer:\n  lr: 0.0001\n  betas: [0.9, 0.999]\n"
    assert _scan("hparams.yaml", data).verdict is Verdict.SAFE


def test_keras_h5_behind_a_user_block_past_one_mib_is_checked() -> None:
    import h5py

    data = F.keras_h5_behind_large_user_block()
    with h5py.File(io.BytesIO(data), "r") as f:
        assert "model_config" in f.attrs
    scan = _scan("model.h5", data)
    assert "keras.layer.lambda" in {f.rule_id for f in scan.findings}, scan.as_dict()
    assert scan.verdict is Verdict.UNSAFE


# --- Keras markers that resolve classes -----------------------------------------------------------


def test_keras_typespec_marker_module_is_checked() -> None:
    from registry.scanning.keras import check_config

    evil = {"class_name": "__typespec__", "spec_name": "Popen", "module": "subprocess", "registered_name": None,
            "config": []}
    assert "keras.module.dangerous" in {f.rule_id for f in check_config(evil, "config.json")}
    tf_spec = {
        "class_name": "__typespec__", "spec_name": "TensorSpec", "module": "tensorflow.python.framework.tensor",
        "registered_name": None, "config": [[None, 4], "float32", None],
    }
    assert check_config(tf_spec, "config.json") == []


def test_onnx_graph_behind_more_fields_than_the_sniffer_walks_is_checked() -> None:
    import onnx

    data = F.onnx_graph_behind_many_unknown_fields()
    assert onnx.load_model_from_string(data).graph.initializer
    scan = _scan("model.onnx", data)
    assert scan.format == "onnx"
    assert "onnx.external-data.escape" in {f.rule_id for f in scan.findings}, scan.as_dict()


# --- HDF5 files that read other files ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(F.hdf5_external_storage_and_link()))
def test_hdf5_reading_outside_the_model_is_unsafe(name: str) -> None:
    scan = _scan("model.weights.h5", F.hdf5_external_storage_and_link()[name])
    assert scan.verdict is Verdict.UNSAFE, scan.as_dict()
    assert {f.rule_id for f in scan.findings} & {"keras.h5.external-storage", "keras.h5.external-link"}


def test_plain_hdf5_weights_stay_safe() -> None:
    assert _scan("model.weights.h5", F.keras_weights_h5()).verdict is Verdict.SAFE


@pytest.mark.parametrize("first", [b"P", b"V", b"I", b"c", b"S"])
def test_binary_blob_starting_with_a_line_opcode_is_not_a_pickle(first: bytes) -> None:
    # A raw tensor dump (zeros, no newline anywhere) that happens to start with an opcode's byte.
    data = first + bytes((16 << 20) + 4096)
    assert not probe_pickle(data[:65536], io.BytesIO(data), len(data))


# --- diffusers model_index.json --------------------------------------------------------------------


def test_diffusers_component_from_a_stdlib_module_is_unsafe() -> None:
    doc = {"_class_name": "StableDiffusionPipeline", "unet": ["diffusers", "UNet2DConditionModel"],
           "feature_extractor": ["runpy", "run_path"]}
    scan = _scan("model_index.json", json.dumps(doc).encode())
    assert "remote-code.diffusers-library" in {f.rule_id for f in scan.findings}
    assert scan.verdict is Verdict.UNSAFE


def test_ordinary_diffusers_model_index_is_safe() -> None:
    doc = {
        "_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.6.0",
        "feature_extractor": ["transformers", "CLIPImageProcessor"],
        "safety_checker": ["stable_diffusion", "StableDiffusionSafetyChecker"],
        "scheduler": ["diffusers", "PNDMScheduler"], "text_encoder": ["transformers", "CLIPTextModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"], "unet": ["diffusers", "UNet2DConditionModel"],
        "vae": ["diffusers", "AutoencoderKL"], "image_encoder": [None, None],
    }
    assert _scan("model_index.json", json.dumps(doc).encode()).verdict is Verdict.SAFE


def test_compressed_sparse_array_is_expanded_and_safe() -> None:
    data = S.joblib_zlib_sparse_array()
    assert len(data) * 200 < 80 << 20  # past the ratio the stream used to stop at (64 MiB)
    scan = _scan("model.joblib", data)
    assert scan.verdict is Verdict.SAFE, scan.as_dict()
