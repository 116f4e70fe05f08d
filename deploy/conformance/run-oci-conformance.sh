#!/usr/bin/env bash
# The OCI distribution-spec conformance suite, pull category only, against a running `modelreg serve`.
# Needs Go and a checkout of github.com/opencontainers/distribution-spec (see README.md next to this script).
#
#   MODELREG_URL=http://127.0.0.1:8000 OCI_NAMESPACE=acme/llm OCI_TAG_NAME=1 MODELREG_TOKEN=mr_... \
#   DISTRIBUTION_SPEC=~/src/distribution-spec deploy/conformance/run-oci-conformance.sh
set -euo pipefail

: "${MODELREG_URL:?the modelreg base URL, e.g. http://127.0.0.1:8000}"
: "${OCI_NAMESPACE:?a repository holding a released version, <tenant>/<model>}"
: "${MODELREG_TOKEN:?a modelreg token (or service-account token) that may read or fetch in the tenant}"
: "${DISTRIBUTION_SPEC:?a checkout of opencontainers/distribution-spec}"
OCI_TAG_NAME="${OCI_TAG_NAME:-1}"
MANIFEST_TYPE="application/vnd.oci.image.manifest.v1+json"

# The suite pulls existing content in pull-only mode: name a manifest and one of its layers.
manifest="$(curl -fsS -H "Authorization: Bearer ${MODELREG_TOKEN}" -H "Accept: ${MANIFEST_TYPE}" \
  "${MODELREG_URL}/v2/${OCI_NAMESPACE}/manifests/${OCI_TAG_NAME}")"
manifest_digest="sha256:$(printf '%s' "${manifest}" | sha256sum | cut -d' ' -f1)"
blob_digest="$(printf '%s' "${manifest}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["digest"])')"

export OCI_ROOT_URL="${MODELREG_URL}"
export OCI_NAMESPACE OCI_TAG_NAME
export OCI_MANIFEST_DIGEST="${manifest_digest}"
export OCI_BLOB_DIGEST="${blob_digest}"
# Basic credentials: any user name, the modelreg token as the password (docs/oci.md).
export OCI_USERNAME="${OCI_USERNAME:-modelreg}"
export OCI_PASSWORD="${MODELREG_TOKEN}"
export OCI_TEST_PULL=1 OCI_TEST_PUSH=0 OCI_TEST_CONTENT_DISCOVERY=0 OCI_TEST_CONTENT_MANAGEMENT=0
export OCI_HIDE_SKIPPED_WORKFLOWS=1
export OCI_REPORT_DIR="${OCI_REPORT_DIR:-$(pwd)/oci-conformance-report}"
mkdir -p "${OCI_REPORT_DIR}"

cd "${DISTRIBUTION_SPEC}/conformance"
go test -c -o conformance.test
./conformance.test
