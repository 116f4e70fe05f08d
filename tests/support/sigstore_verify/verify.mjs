// Verify a Sigstore bundle key-based with npm's @sigstore/verify, as a stock verifier does.
// stdin: {"bundle": <bundle JSON>, "artifact_b64": "<the signed bytes>", "keys": {"<hint>": "<PEM>"}}
// stdout: {"ok": true} or {"ok": false, "code": ..., "message": ...}; exit 0 either way (2: bad input).
import { bundleFromJSON } from "@sigstore/bundle";
import { toSignedEntity, toTrustMaterial, Verifier } from "@sigstore/verify";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
let request;
try {
  request = JSON.parse(Buffer.concat(chunks).toString("utf8"));
} catch (err) {
  console.error(`not JSON on stdin: ${err.message}`);
  process.exit(2);
}

// No Fulcio, Rekor, CT log or TSA: the registry's key alone, named by the bundle's publicKey.hint.
const root = { certificateAuthorities: [], timestampAuthorities: [], tlogs: [], ctlogs: [] };
const keys = Object.fromEntries(Object.entries(request.keys).map(([hint, pem]) => [hint, { rawBytes: pem }]));
try {
  const bundle = bundleFromJSON(request.bundle);
  const entity = toSignedEntity(bundle, Buffer.from(request.artifact_b64, "base64"));
  const verifier = new Verifier(toTrustMaterial(root, keys),
                                { tlogThreshold: 0, ctlogThreshold: 0, timestampThreshold: 0 });
  verifier.verify(entity);
  console.log(JSON.stringify({ ok: true }));
} catch (err) {
  console.log(JSON.stringify({ ok: false, code: err.code ?? err.name, message: err.message }));
}
