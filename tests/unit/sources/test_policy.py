"""Which upstreams a submission may name: configured hubs, directories and buckets only."""


import pytest

from registry.domain.errors import SourceNotAllowedError
from registry.sources.policy import SourcePolicy, same_endpoint


@pytest.fixture
def policy(tmp_path):
    (tmp_path / "models" / "a").mkdir(parents=True)
    (tmp_path / "data").mkdir()
    return SourcePolicy(
        hf_endpoints=("https://huggingface.co", "http://hub.internal:8000/mirror"),
        local_roots=(tmp_path / "models", tmp_path),
        s3_buckets=("models-in", "registry-blobs"),
        forbidden_paths=(tmp_path / "data",),
        forbidden_buckets=("registry-blobs",),
    )


def test_configured_hubs_are_allowed_in_any_spelling(policy):
    policy.check("hf", "org/m", "https://HuggingFace.co/")
    policy.check("hf", "org/m", "https://huggingface.co:443")
    policy.check("hf", "org/m", "http://hub.internal:8000/mirror/")


@pytest.mark.parametrize("endpoint", [
    "http://169.254.169.254", "https://huggingface.co.evil.test", "http://hub.internal:8001/mirror",
    "http://hub.internal:8000/other", "file:///etc", None,
])
def test_other_hub_endpoints_are_refused(policy, endpoint):
    with pytest.raises(SourceNotAllowedError) as err:
        policy.check("hf", "org/m", endpoint)
    assert err.value.code == "source-not-allowed"


def test_directories_under_a_root_are_allowed(policy, tmp_path):
    policy.check("local", str(tmp_path / "models" / "a"), None)


@pytest.mark.parametrize("where", ["/etc", "/", "data", "data/keys", ".", "models/a/../../data"])
def test_directories_outside_the_roots_or_holding_the_registrys_state_are_refused(policy, tmp_path, where):
    path = where if where.startswith("/") else str(tmp_path / where)
    with pytest.raises(SourceNotAllowedError):
        policy.check("local", path, None)


def test_a_link_into_the_registrys_state_is_refused(policy, tmp_path):
    (tmp_path / "models" / "sneaky").symlink_to(tmp_path / "data")
    with pytest.raises(SourceNotAllowedError):
        policy.check("local", str(tmp_path / "models" / "sneaky"), None)


def test_buckets(policy):
    policy.check("s3", "models-in/llama/7b", None)
    for bucket in ("registry-blobs/registry/blobs", "other/x"):
        with pytest.raises(SourceNotAllowedError):
            policy.check("s3", bucket, None)


def test_same_endpoint():
    assert same_endpoint("http://a:80/x/", "http://A/x")
    assert not same_endpoint("http://a/x", "https://a/x")
    assert not same_endpoint("http://a:bad/x", "http://a/x")
