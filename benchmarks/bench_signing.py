"""Benchmark OpenSSF Model Signing: `sign` and `verify --public-key` against the reference tool.

Generates a model folder of --size-gb (files of --file-mb random bytes, plus a config), an
ECDSA P-256 key and a sha256sum manifest of the folder, then times, in the same run and
interleaved round by round so background load hits every tool alike (median of --runs, warm
page cache, start-up included; CPU seconds beside each, which scheduling on a shared machine
does not inflate):

    ckpt-inspector sign DIR --private-key key.pem --force
    model_signing sign key DIR --private_key key.pem --signature DIR/model.sig
    ckpt-inspector verify DIR --public-key key.pub          (signature, then every file)
    model_signing verify key DIR --signature DIR/model.sig --public_key key.pub
    ckpt-inspector verify DIR -m SHA256SUMS --no-tensors    (the same files, no signature)
    python -c 'import what verify imports, then what the check adds'   (the check's floor)

Each signature written is checked by the other tool before the timings count. Targets (issue
39): the signature check adds well under 10% to `verify` with a manifest; sign and verify no
slower than the reference tool. The generated files are deleted at the end.

    .venv/bin/python benchmarks/bench_signing.py [--size-gb 1] [--file-mb 256] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import load_average, scratch, warm_page_cache

BIN = Path(sys.executable).parent
OURS = str(BIN / "ckpt-inspector")
REFERENCE = str(BIN / "model_signing")
END = "; import os; os._exit(0)"
"""How a command's process ends (`cli.entry`): without the interpreter's teardown, which frees
every module and, with the library's loaded, added ~0.09 s of CPU to the floor below."""
START = "import inspector.cli.verify_cmd; from inspector.signing.library import reference"
"""What both `verify` commands import before they part (the command and the project's verify)."""
CHECK_IMPORTS = (f"{START}; import inspector.signing.folder, inspector.signing.check; "
                 "reference('_signing.sign_ec_key')")
"""What `verify --public-key` imports beyond `verify -m`: the reference library's key verifier
(its pydantic bundle models, the in-toto protobuf, cryptography), `signing.folder` and
`signing.check`. Its CPU over START's is the least the check can add to `verify -m` while the
library does the cryptography (over a bare start-up it also counted the project's modules that
`verify -m` imports too, and read as more than the whole check's extra)."""


def _folder(root: Path, size_gb: float, file_mb: int) -> Path:
    folder = root / "model"
    folder.mkdir()
    left = int(size_gb * (1 << 30))
    index = 0
    while left > 0:
        size = min(left, file_mb << 20)
        with open(folder / f"model-{index:05d}.bin", "wb") as fh:
            for _ in range(size >> 20):
                fh.write(os.urandom(1 << 20))
        left -= size
        index += 1
    (folder / "config.json").write_text('{"hidden_size": 4096}')
    return folder


def _keys(root: Path) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    pem, pub = root / "key.pem", root / "key.pub"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    pub.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return pem, pub


def _timed(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and every process it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): "
                         f"{(done.stderr or done.stdout)[-1500:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    """Generate, time interleaved rounds, print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--file-mb", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="where to generate (default: temp)")
    args = ap.parse_args()
    with scratch("bench-signing-", args.dir) as root:
        folder = _folder(root, args.size_gb, args.file_mb)
        pem, pub = _keys(root)
        sig = folder / "model.sig"
        sums = root / "SHA256SUMS"
        _timed([OURS, "manifest", "create", str(folder), "-o", str(sums)])
        files = sorted(folder.iterdir())
        total = sum(p.stat().st_size for p in files)
        warm_page_cache(files)
        commands = {
            "ours sign": [OURS, "sign", str(folder), "--private-key", str(pem), "--force"],
            "reference sign": [REFERENCE, "sign", "key", str(folder), "--private_key", str(pem),
                               "--signature", str(sig)],
            "ours verify --public-key": [OURS, "verify", str(folder), "--public-key",
                                         str(pub)],
            "reference verify key": [REFERENCE, "verify", "key", str(folder), "--signature",
                                     str(sig), "--public_key", str(pub)],
            "ours verify -m (no signature)": [OURS, "verify", str(folder), "-m", str(sums),
                                              "--no-tensors"],
        }
        commands["verify's imports"] = [sys.executable, "-c", START + END]
        commands["verify's + the check's imports"] = [sys.executable, "-c", CHECK_IMPORTS + END]
        # each signature is checked by the other tool: ours sign, then the reference's verify
        # of it; the reference's sign, then our verify of it
        order = ["ours sign", "reference verify key", "reference sign",
                 "ours verify --public-key", "ours verify -m (no signature)", "verify's imports",
                 "verify's + the check's imports"]
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in order}
        for _round in range(args.runs):
            for name in order:
                times[name].append(_timed(commands[name]))
        med = {name: statistics.median(w for w, _c in values) for name, values in times.items()}
        cpu = {name: statistics.median(c for _w, c in values) for name, values in times.items()}
    print(f"{total / 1e9:.2f} GB in {len(files)} files, medians of {args.runs} "
          f"({load_average()})")
    for name, value in list(med.items())[:5]:
        print(f"  {name:<32} {value:7.2f} s  ({total / 1e9 / value:.2f} GB/s), "
              f"CPU {cpu[name]:.2f} s")
    print(f"sign: ours / reference = {med['ours sign'] / med['reference sign']:.2f}x")
    print(f"verify: ours / reference = "
          f"{med['ours verify --public-key'] / med['reference verify key']:.2f}x")
    base = "ours verify -m (no signature)"
    print(f"signature check's cost over verify -m: "
          f"{med['ours verify --public-key'] / med[base]:.3f}x wall (target under 1.10x), "
          f"{cpu['ours verify --public-key'] / cpu[base]:.3f}x CPU "
          f"(+{cpu['ours verify --public-key'] - cpu[base]:.2f} s)")
    floor = cpu["verify's + the check's imports"] - cpu["verify's imports"]
    print(f"its floor, the check's imports over verify's: +{floor:.3f} s CPU "
          f"({1 + floor / cpu[base]:.3f}x verify -m's CPU)")


if __name__ == "__main__":
    main()
