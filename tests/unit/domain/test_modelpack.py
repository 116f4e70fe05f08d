"""The ModelPack builder: media types per kind, annotations, config facts, and one digest per version."""

from __future__ import annotations

import datetime as dt
import hashlib
import json

from registry.domain import modelpack
from registry.domain.modelpack import PackFile, PackInput, build

FILES = {
    "model.safetensors": b"weights" * 10,
    "config.json": b'{"model_type": "llama"}',
    "tokenizer.json": b"{}",
    "tokenizer.model": b"sp",
    "chat_template.jinja": b"{{ x }}",
    "generation_config.json": b"{}",
    "README.md": b"# hi\n",
    "LICENSE": b"MIT\n",
    "modeling_x.py": b"print(1)\n",
    "extra/deep/table.csv": b"a,b\n",
}
FACTS = {
    "weights": {"formats": {"value": ["safetensors"]}, "parameters": {"value": 8_030_261_248},
                "dtypes": {"value": {"BF16": 100}}},
    "architecture": {"model_type": {"value": "llama"}, "architectures": {"value": ["LlamaForCausalLM"]}},
    "quantization": {"method": {"value": None, "unknown": "no quantization_config"}},
}
SEALED = dt.datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=dt.timezone.utc)


def _pack(files=FILES, **kwargs) -> PackInput:
    fields = dict(repository="acme/llm", version=3, revision="a" * 40, license="Apache-2.0",
                  source_url="https://huggingface.co/org/llm", created_at=SEALED,
                  files=tuple(PackFile(p, len(b), hashlib.sha256(b).hexdigest()) for p, b in files.items()),
                  facts=FACTS)
    return PackInput(**{**fields, **kwargs})


def test_manifest_is_an_oci_image_manifest_of_the_modelpack_artifact_type():
    art = build(_pack())
    m = json.loads(art.manifest_bytes)
    assert m["schemaVersion"] == 2 and m["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert m["artifactType"] == "application/vnd.cncf.model.manifest.v1+json"
    assert m["config"] == {"mediaType": "application/vnd.cncf.model.config.v1+json", "digest": art.config_digest,
                           "size": len(art.config_bytes)}
    assert art.config_digest == "sha256:" + hashlib.sha256(art.config_bytes).hexdigest()
    assert art.manifest_digest == "sha256:" + hashlib.sha256(art.manifest_bytes).hexdigest()
    assert m["annotations"] == {"org.opencontainers.image.created": "2026-01-02T03:04:05.6Z"}


def test_one_raw_layer_per_file_digest_and_size_of_the_file_in_path_order():
    m = build(_pack()).manifest
    assert [layer["annotations"]["org.cncf.model.filepath"] for layer in m["layers"]] == sorted(FILES)
    for layer in m["layers"]:
        path = layer["annotations"]["org.cncf.model.filepath"]
        assert layer["digest"] == "sha256:" + hashlib.sha256(FILES[path]).hexdigest()
        assert layer["size"] == len(FILES[path])
        assert layer["annotations"]["org.opencontainers.image.title"] == path
        meta = json.loads(layer["annotations"]["org.cncf.model.file.metadata+json"])
        assert meta == {"name": path.rsplit("/", 1)[-1], "mode": 0o644, "uid": 0, "gid": 0, "size": len(FILES[path]),
                        "mtime": "2026-01-02T03:04:05.6Z", "typeflag": ord("0")}


def test_media_type_per_kind():
    kinds = {layer["annotations"]["org.cncf.model.filepath"]: layer["mediaType"].split(".")[3:-1]
             for layer in build(_pack()).manifest["layers"]}
    assert kinds == {
        "model.safetensors": ["weight", "v1"], "config.json": ["weight", "config", "v1"],
        "tokenizer.json": ["weight", "config", "v1"], "tokenizer.model": ["weight", "config", "v1"],
        "chat_template.jinja": ["weight", "config", "v1"], "generation_config.json": ["weight", "config", "v1"],
        "README.md": ["doc", "v1"], "LICENSE": ["doc", "v1"], "modeling_x.py": ["code", "v1"],
        "extra/deep/table.csv": ["weight", "config", "v1"]}
    untested = [layer["annotations"]["org.cncf.model.filepath"] for layer in build(_pack()).manifest["layers"]
                if layer["annotations"].get("org.cncf.model.file.mediatype.untested") == "true"]
    assert untested == ["extra/deep/table.csv"]
    assert all(layer["mediaType"].endswith(".v1.raw") for layer in build(_pack()).manifest["layers"])


def test_config_names_the_version_and_what_the_facts_know():
    art = build(_pack())
    config = json.loads(art.config_bytes)
    assert config["descriptor"] == {
        "name": "acme/llm", "version": "3", "revision": "a" * 40, "licenses": ["Apache-2.0"],
        "sourceURL": "https://huggingface.co/org/llm", "createdAt": "2026-01-02T03:04:05.6Z", "family": "llama"}
    assert config["config"] == {"architecture": "LlamaForCausalLM", "format": "safetensors", "paramSize": "8b",
                                "precision": "bf16"}
    assert config["modelfs"] == {"type": "layers",
                                 "diffIds": [layer["digest"] for layer in art.manifest["layers"]]}


def test_unknown_facts_and_other_licenses_are_left_out():
    config = json.loads(build(_pack(facts=None, license="other:custom", revision=None, source_url=None,
                                    created_at=None)).config_bytes)
    assert config["descriptor"] == {"name": "acme/llm", "version": "3"}
    assert config["config"] == {}
    several = {"weights": {"formats": {"value": ["gguf", "safetensors"]}, "dtypes": {"value": {"F32": 1, "BF16": 2}}},
               "quantization": {"method": {"value": None}, "gguf_file_type": {"value": "Q4_K_M"}}}
    assert modelpack.model_config(several) == {"precision": "mixed", "quantization": "q4_k_m"}


def test_the_same_version_gives_the_same_digest_whatever_order_the_files_come_in():
    a = build(_pack())
    b = build(_pack(files=dict(reversed(list(FILES.items())))))
    assert a.manifest_bytes == b.manifest_bytes and a.manifest_digest == b.manifest_digest
    # A naive time (as SQLite returns it) is the same instant in UTC.
    c = build(_pack(created_at=SEALED.replace(tzinfo=None)))
    assert c.manifest_digest == a.manifest_digest
    assert build(_pack(version=4)).manifest_digest != a.manifest_digest
    changed = {**FILES, "README.md": b"# changed\n"}
    assert build(_pack(files=changed)).manifest_digest != a.manifest_digest


# --- the image shape and tar layers ------------------------------------------------------------------


def _reader(files):
    by_sha = {hashlib.sha256(b).hexdigest(): b for b in files.values()}
    return lambda f: iter([by_sha[f.sha256][:3], by_sha[f.sha256][3:]])


def _bytes_of(layer, files) -> bytes:
    by_sha = {hashlib.sha256(b).hexdigest(): b for b in files.values()}
    return b"".join(s if isinstance(s, bytes) else by_sha[s.sha256] for s in layer.segments())


def test_image_shape_one_tar_per_file_at_models_with_fixed_metadata_and_diff_ids():
    import io
    import tarfile

    art = modelpack.build_image(_pack(), _reader(FILES))
    m = json.loads(art.manifest_bytes)
    config = json.loads(art.config_bytes)
    assert "artifactType" not in m and m["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert config["rootfs"] == {"type": "layers", "diff_ids": [layer["digest"] for layer in m["layers"]]}
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    for layer, tar in zip(m["layers"], art.tar_layers):
        data = _bytes_of(tar, FILES)
        assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
        assert (len(data), "sha256:" + hashlib.sha256(data).hexdigest()) == (layer["size"], layer["digest"])
        assert len(data) % 512 == 0 and data.endswith(bytes(1024))
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            (member,) = t.getmembers()
            assert (member.mode, member.uid, member.gid, member.uname, member.mtime) == \
                (0o644, 0, 0, "", int(SEALED.timestamp()))
            assert t.extractfile(member).read() == FILES[member.name.removeprefix("models/")]
    # One version, one digest: built again, the same bytes.
    assert modelpack.build_image(_pack(), _reader(FILES)).manifest_bytes == art.manifest_bytes


def test_tar_header_is_exact_ustar_and_pax_where_ustar_cannot_hold_the_path_or_size():
    header = modelpack.tar_header("models/config.json", 2, 0)
    assert header[:18] == b"models/config.json" and header[257:265] == b"ustar\x0000"
    # The checksum: the sum of the header's bytes with the checksum field as spaces.
    assert int(header[148:154], 8) == sum(header[:148]) + 8 * 32 + sum(header[156:])
    long = "models/" + "d/" * 200 + "f.json"
    pax = modelpack.tar_header(long, 2, 0)
    assert pax[156:157] == b"x" and f"path={long}\n".encode() in pax
    record = pax[512:pax.index(b"\n", 512) + 1]
    assert int(record.split(b" ")[0]) == len(record)
    assert b"size=9663676416\n" in modelpack.tar_header("models/big.gguf", 9 * 2**30, 0)
    assert modelpack.tar_padding(512) == 0 and modelpack.tar_padding(513) == 511


def test_many_files_pack_the_small_non_weight_ones_into_one_tar_in_both_shapes():
    many = {f"shard/{i:05d}.json": b"%d" % i for i in range(2500)}
    many["model.safetensors"] = b"w" * 100
    pack = _pack(files=many)
    assert modelpack.raw_needs_reads(pack) and not modelpack.raw_needs_reads(_pack())
    try:
        build(pack)
    except ValueError as e:
        assert "read" in str(e)
    else:
        raise AssertionError("a packed layer needs its files read")
    raw = build(pack, _reader(many))
    layers = raw.manifest["layers"]
    assert [layer["mediaType"] for layer in layers] == ["application/vnd.cncf.model.weight.v1.raw",
                                                        "application/vnd.cncf.model.weight.config.v1.tar"]
    assert json.loads(raw.config_bytes)["modelfs"]["diffIds"] == [layer["digest"] for layer in layers]
    image = modelpack.build_image(pack, _reader(many))
    assert len(image.manifest["layers"]) == 2 and len(image.tar_layers[1].members) == 2500
    assert len(raw.manifest_bytes) < 4096 and len(image.manifest_bytes) < 4096


def test_a_manifest_over_4_mib_is_refused_not_built():
    # Weights are never packed: 2,000 of them with long paths give a manifest of about 8 MiB.
    heavy = {f"{'w' * 900}/{i:05d}.safetensors": b"w" for i in range(2000)}
    try:
        build(_pack(files=heavy), _reader(heavy))
    except modelpack.ManifestTooLargeError as e:
        assert e.size > modelpack.MAX_MANIFEST
    else:
        raise AssertionError("a manifest over 4 MiB was built")


def test_an_adapters_base_annotations_are_in_both_shapes_and_nothing_changes_without_them():
    base = (("dev.modelreg.adapter.base", "acme/llm@sha256:" + "b" * 64),
            ("dev.modelreg.adapter.base.weights-digest", "sha256:" + "c" * 64))
    for shape in (build, lambda pack: modelpack.build_image(pack, _reader(FILES))):
        plain, adapter = shape(_pack()), shape(_pack(annotations=base))
        assert adapter.manifest["annotations"] == {"org.opencontainers.image.created": "2026-01-02T03:04:05.6Z",
                                                   **dict(base)}
        assert {k: v for k, v in adapter.manifest.items() if k != "annotations"} == \
            {k: v for k, v in plain.manifest.items() if k != "annotations"}
        assert adapter.manifest_digest != plain.manifest_digest
    # Without a seal time, the base alone; a version that is no adapter keeps the bytes it always had.
    assert build(_pack(created_at=None, annotations=base)).manifest["annotations"] == dict(base)
    assert "annotations" not in build(_pack(created_at=None)).manifest
