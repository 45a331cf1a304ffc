"""``specplan cache list | verify | clear [NAME] [--all]``: what ``$SPECPLAN_CACHE`` holds.

An entry is a folder or file one level under a category folder (``models/``, ``quantized/``,
``aot/``, ...), named ``CATEGORY/NAME``. Entries with a ``manifest.yaml``
(:mod:`specplan.models.cache_entry`) are checked: ``list`` compares each file's size with the
manifest, ``verify`` its sha256 too and exits 1 if any entry is damaged. Other entries (fetched
GGUFs and AOT packages: each checked by its own reader) are listed as
``unchecked``. ``clear NAME`` removes one entry, ``clear --all`` every one; an entry another
process is building is left alone. No torch import here.
"""

from __future__ import annotations

import os
from pathlib import Path

from specplan.core.errors import SpecplanError


def add_parser(commands) -> None:
    """Register the ``cache`` subcommand (``list``, ``verify``, ``clear``) on argparse ``commands``."""
    parser = commands.add_parser("cache", help="list, verify or clear what $SPECPLAN_CACHE holds")
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="each entry, its size, and whether its files have their manifest's sizes")
    actions.add_parser("verify", help="check every file's sha256 against its entry's manifest; exit 1 if one differs")
    clear = actions.add_parser("clear", help="remove one entry (NAME or CATEGORY/NAME) or every one (--all)")
    clear.add_argument("name", nargs="?", help="an entry as `specplan cache list` names it")
    clear.add_argument("--all", action="store_true", help="remove every entry")
    parser.set_defaults(handler="cache")


def command(args) -> int:
    """Run ``cache list``, ``cache verify`` or ``cache clear``."""
    from specplan.models.registry import cache_root

    root = cache_root()
    if args.action in ("list", "verify"):
        return show_entries(root, verify=args.action == "verify")
    if args.action == "clear":
        return clear_entries(root, args.name, args.all)
    raise SpecplanError(f"unknown cache action {args.action!r}; use list, verify or clear")


def _require_folder(root: Path, writable: bool = False) -> None:
    """One line (exit 2) for a cache folder that is missing, not a folder, or not usable."""
    if not root.exists():
        raise SpecplanError(f"cache folder {root} does not exist (nothing is cached yet); "
                            "set $SPECPLAN_CACHE to the cache you mean")
    if not root.is_dir():
        raise SpecplanError(f"cache folder {root} is not a folder; set $SPECPLAN_CACHE to a folder")
    needed = os.R_OK | os.X_OK | (os.W_OK if writable else 0)
    if not os.access(root, needed):
        what = "writable" if writable else "readable"
        raise SpecplanError(f"cache folder {root} is not {what}; fix its permissions or set $SPECPLAN_CACHE")


def entries(root: Path) -> list[Path]:
    """Every entry under ``root``: the non-hidden folders and files one level under each category."""
    found = []
    for category in sorted(path for path in root.iterdir() if path.is_dir() and not path.name.startswith(".")):
        if not os.access(category, os.R_OK | os.X_OK):
            raise SpecplanError(f"cache folder {category} is not readable; fix its permissions or set $SPECPLAN_CACHE")
        found.extend(sorted(path for path in category.iterdir() if not path.name.startswith(".")))
    return found


def _state(entry: Path, verify: bool) -> tuple[str, int, bool]:
    """(state, bytes, damaged) of one entry."""
    from specplan.models.cache_entry import MANIFEST, check_entry, folder_size

    if not entry.is_dir() or not (entry / MANIFEST).exists():
        size = folder_size(entry) if entry.is_dir() else entry.stat().st_size
        return "unchecked (no manifest)", size, False
    checked = check_entry(entry, verify=verify)
    if checked.whole:
        return ("ok (sha256 checked)" if verify else "ok (sizes checked)"), checked.size, False
    return f"DAMAGED: {checked.problem}", checked.size, True


def show_entries(root: Path, verify: bool) -> int:
    """Print one line per entry (name, size, state); 1 when ``verify`` finds a damaged entry."""
    _require_folder(root)
    damaged = 0
    rows = []
    for entry in entries(root):
        state, size, bad = _state(entry, verify)
        damaged += bad
        rows.append((entry.relative_to(root).as_posix(), _size_text(size), state))
    width = max((len(row[0]) for row in rows), default=0)
    for name, size, state in rows:
        print(f"{name.ljust(width)}  {size:>10}  {state}")
    hint = "; remove a damaged one with `specplan cache clear NAME`" if damaged else ""
    print(f"specplan: {_count(len(rows))} in {root}, {damaged} damaged{hint}")
    return 1 if verify and damaged else 0


def _count(number: int) -> str:
    return f"{number} entry" if number == 1 else f"{number} entries"


def _size_text(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def clear_entries(root: Path, name: str | None, everything: bool) -> int:
    """Remove the entry ``name`` (or every entry with ``everything``), each under its lock."""
    if everything == bool(name):
        raise SpecplanError("say what to clear: `specplan cache clear NAME` or `specplan cache clear --all`")
    _require_folder(root, writable=True)
    chosen = entries(root) if everything else [_find(root, name)]
    busy = [entry for entry in chosen if not _remove(entry)]
    removed = len(chosen) - len(busy)
    if everything:
        _remove_leftovers(root)
    for entry in busy:
        print(f"specplan: {entry.relative_to(root).as_posix()} is being built by another process; left in place")
    print(f"specplan: removed {_count(removed)} from {root}")
    return 0


def _find(root: Path, name: str) -> Path:
    """The entry ``name`` (``CATEGORY/NAME`` or a ``NAME`` only one category holds)."""
    every = entries(root)
    matches = [entry for entry in every if name in (entry.name, entry.relative_to(root).as_posix())]
    if len(matches) == 1:
        return matches[0]
    if matches:
        names = ", ".join(entry.relative_to(root).as_posix() for entry in matches)
        raise SpecplanError(f"{name!r} names {len(matches)} cache entries ({names}); pass CATEGORY/NAME")
    raise SpecplanError(f"no cache entry {name!r} in {root}; `specplan cache list` shows the entries")


def _remove(entry: Path) -> bool:
    """Remove one entry under its build lock; False when another process holds that lock."""
    from specplan.models.cache_entry import remove_entry, try_lock

    try:
        lock = try_lock(entry)
        if lock is None:
            return False
        try:
            remove_entry(entry)
        finally:
            lock.release()
    except OSError as error:
        raise SpecplanError(f"cannot remove {entry}: {error.strerror or type(error).__name__}") from None
    return True


def _remove_leftovers(root: Path) -> None:
    """With ``--all``: the temporary folders (and an assembly's files) of builders that died, where no
    build holds the lock."""
    from specplan.models.cache_entry import TEMPORARY_MARK, remove_leftovers, try_lock

    for leftover in root.glob(f"*/.*{TEMPORARY_MARK}*"):
        final = leftover.with_name(leftover.name[1:].split(TEMPORARY_MARK)[0])
        lock = try_lock(final)
        if lock is not None:
            remove_leftovers(final)
            lock.release()
