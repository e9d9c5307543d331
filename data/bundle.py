"""Build the bundled copies of the public benchmarks (``data/bundled/``) from the shared data.

    python data/bundle.py                 # rebuild from ../shared/data (or $TOOLGYM_SHARED_DATA)
    python data/bundle.py --check         # exit 1 if the bundle differs from a fresh build
    python data/bundle.py --data-root DIR

Each bundled dataset is stored in toolgym's own JSONL format (``<corpus>.corpus.jsonl.gz`` of
``Tool.to_dict()`` lines, ``<name>.tasks.jsonl.gz`` of ``Task.to_dict()`` lines), gzipped with
mtime 0 so a rebuild is byte-identical unless the data changed. ``manifest.json`` records the
source repository and commit, the counts, what was dropped and each file's SHA-256; each
source's licence text goes to ``LICENSES/``. UltraTool is not bundled (licence unclear).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from toolgym.data.loaders import BUNDLED_DIR, DATASETS, encode_jsonl, shared_data_dir

# registered name -> folder under shared/data whose SOURCE.txt names repo, commit and licence
SOURCE_FOLDER = {
    "stabletoolbench": "stabletoolbench",
    "seal_tools": "seal_tools",
    "metatool": "metatool",
    "metatool_multi": "metatool",
    "api_bank": "api_bank",
}
LICENCE_NAME = {"stabletoolbench": "Apache-2.0", "seal_tools": "Apache-2.0", "metatool": "MIT", "api_bank": "Apache-2.0"}

NOTICE = """\
Third-party data bundled with toolgym
=====================================

The files in toolgym/data/bundled/ are derived from the public benchmark data named below.
Each is distributed under its own licence, whose full text is in this folder. They were
MODIFIED: converted to toolgym's JSONL records (tools and tasks), fields not needed for tool
retrieval dropped (e.g. StableToolBench template_response, Seal-Tools responses and call
parameters, API-Bank API results), API-Bank categories glossed from Chinese into English,
and tasks derived as described in docs/datasets.md. No NOTICE file accompanied the sources.

{entries}
"""


def _source_info(folder: Path) -> dict[str, str]:
    info = {}
    text = (folder / "SOURCE.txt").read_text(encoding="utf-8")
    for line in text.splitlines():
        for key in ("repo", "commit"):
            if line.startswith(f"{key}:"):
                info[key] = line.split(":", 1)[1].strip()
    return info


def _licence_text(folder: Path) -> str:
    text = (folder / "SOURCE.txt").read_text(encoding="utf-8")
    marker = "----- licence text -----"
    if marker not in text:
        raise SystemExit(f"{folder}/SOURCE.txt has no licence text")
    return text.split(marker, 1)[1].strip() + "\n"


def build(data_root: Path) -> dict[str, bytes]:
    """Every bundled file as ``{relative path: bytes}``, built from the raw files under ``data_root``."""
    files: dict[str, bytes] = {}
    manifest: dict[str, dict] = {}
    licences = []
    for name, spec in DATASETS.items():
        if not spec.bundled:
            continue
        loaded = spec.source(data_root)
        corpus, tasks, dropped = loaded.corpus, loaded.tasks, loaded.dropped
        corpus_file = f"{spec.corpus_file}.corpus.jsonl.gz"
        tasks_file = f"{name}.tasks.jsonl.gz"
        corpus_bytes = encode_jsonl([t.to_dict() for t in corpus], gz=True)
        if corpus_file in files and files[corpus_file] != corpus_bytes:
            raise SystemExit(f"{name}: corpus differs from the one already bundled as {corpus_file}")
        files[corpus_file] = corpus_bytes
        files[tasks_file] = encode_jsonl([t.to_dict() for t in tasks], gz=True)
        folder = data_root / SOURCE_FOLDER[name]
        manifest[name] = {
            "source": {**_source_info(folder), "licence": LICENCE_NAME[SOURCE_FOLDER[name]]},
            "tools": len(corpus),
            "tasks": len(tasks),
            "dropped": dropped,
            "files": {
                corpus_file: hashlib.sha256(corpus_bytes).hexdigest(),
                tasks_file: hashlib.sha256(files[tasks_file]).hexdigest(),
            },
        }
        licence_path = f"LICENSES/{SOURCE_FOLDER[name]}.LICENSE.txt"
        if licence_path not in files:
            files[licence_path] = _licence_text(folder).encode("utf-8")
            src = manifest[name]["source"]
            licences.append(
                f"- {SOURCE_FOLDER[name]}: {src.get('repo')} at commit {src.get('commit')}, "
                f"{src['licence']} ({licence_path.split('/')[1]})"
            )
    files["manifest.json"] = (json.dumps(manifest, indent=2, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")
    files["LICENSES/NOTICE.txt"] = NOTICE.format(entries="\n".join(licences)).encode("utf-8")
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=None, help="folder laid out like shared/data")
    parser.add_argument("--out", type=Path, default=BUNDLED_DIR, help="bundle folder (default: the package's)")
    parser.add_argument("--check", action="store_true", help="compare with the bundle instead of writing")
    args = parser.parse_args(argv)
    root = args.data_root or shared_data_dir()
    if not root.is_dir():
        print(f"shared data folder not found: {root} (set TOOLGYM_SHARED_DATA or pass --data-root)", file=sys.stderr)
        return 2
    files = build(root)
    if args.check:
        stale = [p for p, b in files.items() if not (args.out / p).exists() or (args.out / p).read_bytes() != b]
        for p in stale:
            print(f"stale: {args.out / p}", file=sys.stderr)
        return 1 if stale else 0
    for rel, data in files.items():
        path = args.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    total = sum(len(b) for b in files.values())
    print(f"wrote {len(files)} files, {total / 1e6:.2f} MB, to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
