"""What recording chunk digests costs a put: the same bytes into a local blob store, plainly and through
the chunk tap (registry/services/chunks.py), taking turns in one run.

Each round puts a fresh random blob (so neither put finds it stored) both ways and prints wall and CPU
seconds of each and the ratio tap / plain. Run from the repository root:

    .venv/bin/python bench/chunks.py --mib 512 --rounds 3
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The script's own folder holds bench/queue.py, which would shadow the standard library's queue.
sys.path[0] = str(REPO)

import argparse  # noqa: E402 (after sys.path[0] is set)
import os  # noqa: E402 (after sys.path[0] is set)
import resource  # noqa: E402 (after sys.path[0] is set)
import tempfile  # noqa: E402 (after sys.path[0] is set)
import time  # noqa: E402 (after sys.path[0] is set)

from registry.domain.chunks import ChunkHasher  # noqa: E402 (after sys.path[0] is set)
from registry.services.chunks import chunks_of_put, tap  # noqa: E402 (after sys.path[0] is set)
from registry.storage.local import LocalBlobStore  # noqa: E402 (after sys.path[0] is set)

PIECE = 1 << 20


def _pieces(seed: bytes, mib: int):
    # Distinct bytes per round and per side, made cheaply: a random MiB with a counter in front.
    for i in range(mib):
        yield i.to_bytes(8, "big") + seed + bytes(PIECE - 8 - len(seed))


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(fn):
    wall, cpu = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - wall, _cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalBlobStore(Path(tmp) / "blobs", b"bench-secret")
        for round_ in range(1, args.rounds + 1):
            def plain() -> None:
                store.put(_pieces(os.urandom(16), args.mib))

            def tapped() -> None:
                hasher = ChunkHasher()
                result = store.put(tap(_pieces(os.urandom(16), args.mib), hasher))
                assert chunks_of_put(hasher, result) is not None

            (pw, pc), (tw, tc) = _timed(plain), _timed(tapped)
            print(f"round {round_}: {args.mib} MiB  plain {pw:.2f} s wall {pc:.2f} s cpu  |  "
                  f"tap {tw:.2f} s wall {tc:.2f} s cpu  |  ratio wall {tw / pw:.2f}x, cpu {tc / pc:.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
