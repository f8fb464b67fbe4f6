"""benchmarks/results is indexed: every file there follows the naming scheme its README states
(`<kind>_<gpu>_<YYYYMMDD>[_<variant>].<ext>`, the kinds and GPUs as the README lists them)
and is named in the README, and every results file the README names exists."""

import os
import re

RESULTS = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results")
EXTENSIONS = ("json", "log", "png", "txt")


def _readme() -> str:
    with open(os.path.join(RESULTS, "README.md"), encoding="utf-8") as f:
        return f.read()


def _listed(text: str, start: str, end: str) -> list[str]:
    """The backticked plain names (no dot, slash or space) of the README's sentence from
    `start` to `end`: its kinds or its GPUs."""
    part = text[text.index(start):text.index(end, text.index(start))]
    return [w for w in re.findall(r"`([^`]+)`", part) if re.fullmatch(r"[a-z0-9_]+", w)]


def _files() -> list[str]:
    return sorted(f for f in os.listdir(RESULTS) if f != "README.md")


def test_every_file_follows_the_naming_scheme():
    text = _readme()
    kinds = _listed(text, "kind is", "; gpu is")
    gpus = _listed(text, "gpu is", "; variant")
    assert {"gemm", "ab", "tests"} <= set(kinds) and {"h100", "h200"} <= set(gpus)
    scheme = re.compile(rf"({'|'.join(kinds)})_({'|'.join(gpus)})_20\d{{6}}(_[a-z0-9_]+)?"
                        rf"\.({'|'.join(EXTENSIONS)})")
    wrong = [f for f in _files() if not scheme.fullmatch(f)]
    assert not wrong, f"not <kind>_<gpu>_<YYYYMMDD>[_<variant>].<ext> (README's kinds): {wrong}"


def test_every_file_is_indexed_and_every_indexed_file_exists():
    text = _readme()
    named = set(re.findall(rf"`([a-z0-9_]+\.(?:{'|'.join(EXTENSIONS)}))`", text))
    files = set(_files())
    assert not files - named, f"not named in benchmarks/results/README.md: {files - named}"
    assert not named - files, f"named in the README, not in benchmarks/results: {named - files}"
