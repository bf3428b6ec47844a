"""Writing files and folders atomically: the one helper every writer of the library uses.

A file or folder is written under a hidden temporary name beside its destination, then renamed
into place: a killed writer (SIGKILL, power loss) leaves at most a ``.NAME.tmp-PID-HEX`` entry
next to the destination, never a half-written destination, and readers see the old version or
the new one, whole. The temporary name keeps the destination's suffixes (``.keras``,
``.weights.h5``, ``.png``), which the writers of those formats read; leftovers of earlier kills
are removed by the next write to the same destination.

Used by exports (:func:`atomic_folder`), backups and checkpoints, the tokenizer, and the Table 3
runner's state and table files.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import secrets
import shutil
from collections.abc import Iterator

__all__ = [
    "EXPORT_MARKERS",
    "atomic_folder",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_destination",
]

#: Files that mark a folder as an export of ours (SavedModel, CTranslate2 model).
EXPORT_MARKERS = ("saved_model.pb", "model.bin")


def _split(name: str) -> tuple[str, str]:
    """``("ckpt-0100", ".weights.h5")`` for ``ckpt-0100.weights.h5``; a leading dot is kept."""
    head, dot, rest = name.lstrip(".").partition(".")
    prefix = name[: len(name) - len(name.lstrip("."))]
    return prefix + head, (dot + rest if dot else "")


def _remove(path: pathlib.Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _fsync(path: pathlib.Path) -> None:
    for file in [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]:
        with open(file, "rb") as handle:
            os.fsync(handle.fileno())


@contextlib.contextmanager
def atomic_path(path, fsync: bool = False) -> Iterator[pathlib.Path]:
    """``with atomic_path(dest) as tmp:`` write a file, or make and fill a folder, at ``tmp``;
    on success it replaces ``dest`` (``fsync``: flushed to disk first), on an exception it is
    removed and ``dest`` is untouched.

    >>> import tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> with atomic_path(folder / "table.md") as tmp:
    ...     _ = tmp.write_text("| a |")
    >>> (folder / "table.md").read_text(), sorted(p.name for p in folder.iterdir())
    ('| a |', ['table.md'])
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stem, suffixes = _split(path.name)
    for stale in path.parent.glob(f".{stem}.tmp-*{suffixes}"):
        _remove(stale)
    tmp = path.with_name(f".{stem}.tmp-{os.getpid()}-{secrets.token_hex(3)}{suffixes}")
    try:
        yield tmp
        if fsync:
            _fsync(tmp)
        if tmp.is_dir() and path.is_dir():  # os.replace cannot replace a folder with files
            old = path.with_name(f".{stem}.tmp-{os.getpid()}-{secrets.token_hex(3)}.old")
            os.rename(path, old)
            os.rename(tmp, path)
            _remove(old)
        else:
            os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def atomic_write_text(path, text: str, encoding: str = "utf-8", fsync: bool = False) -> None:
    """Writes ``text`` to ``path`` through :func:`atomic_path`."""
    with atomic_path(path, fsync) as tmp:
        tmp.write_text(text, encoding=encoding)


def atomic_write_bytes(path, data: bytes, fsync: bool = False) -> None:
    """Writes ``data`` to ``path`` through :func:`atomic_path`."""
    with atomic_path(path, fsync) as tmp:
        tmp.write_bytes(data)


def check_destination(path) -> None:
    """``FileExistsError`` unless ``path`` is missing, an empty folder or an earlier export."""
    path = pathlib.Path(path)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"{path} exists and is not a folder")
    if path.is_dir() and any(path.iterdir()):
        if not any((path / marker).is_file() for marker in EXPORT_MARKERS):
            raise FileExistsError(
                f"{path} exists and is not an export (no {' or '.join(EXPORT_MARKERS)}): "
                "refusing to replace it"
            )


@contextlib.contextmanager
def atomic_folder(path) -> Iterator[pathlib.Path]:
    """``with atomic_folder(dest) as tmp:`` write an export into the folder ``tmp``; on success
    it becomes ``dest`` (an earlier export there is replaced), on an exception nothing at
    ``dest`` changes.

    ``dest`` may be missing, empty, or an earlier export (a folder with ``saved_model.pb`` or
    ``model.bin``); anything else raises ``FileExistsError`` before anything is written.
    """
    path = pathlib.Path(path).absolute()
    check_destination(path)
    with atomic_path(path) as tmp:
        tmp.mkdir(mode=0o755)
        yield tmp
