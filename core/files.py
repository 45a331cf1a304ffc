"""Every file specplan writes goes through here: a temporary file in the same folder, fsync,
then an atomic rename (``os.replace``), so that an interrupted or failed write (Ctrl-C, a full
disk) leaves either the old file or the new one, never a truncated one. Missing parent folders
are created, the same way for every command (docs/guide.md, "Files specplan writes").
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from specplan.core.errors import OutputError


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, creating missing parent folders; OutputError (one
    line, exit 2) when the system refuses (a full disk, no permission), the old file intact."""
    write_file_atomic(path, lambda temporary: temporary.write_bytes(data))


def write_file_atomic(path: str | Path, write) -> None:
    """Atomically replace ``path`` with what ``write(temporary_path)`` writes (for writers that
    take a file name, such as ``gguf.GGUFWriter``); OutputError (one line, exit 2) when the system refuses, the old file intact."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(handle)
        try:
            write(Path(temporary))
            with open(temporary, "rb+") as output:
                os.fsync(output.fileno())
            os.chmod(temporary, 0o666 & ~_umask())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        _sync_folder(path.parent)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise OutputError(f"cannot write {path}: {reason}; free space or choose another path "
                          "(nothing was changed)") from None


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`write_bytes_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable where the platform allows opening a folder."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def read_json_object(path: str | Path, fix: str, error: type[Exception]) -> dict:
    """A JSON object from ``path``; ``error`` (one line ending with ``fix``) if it is not UTF-8, not
    JSON or not an object."""
    path = Path(path)
    try:
        document = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise error(f"{path} is not UTF-8 text; {fix}") from None
    except ValueError as exc:
        raise error(f"{path} is not valid JSON ({exc}); {fix}") from None
    if not isinstance(document, dict):
        raise error(f"{path} is not a JSON object; {fix}")
    return document
