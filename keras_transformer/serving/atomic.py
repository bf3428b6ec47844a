"""Write an export folder beside its destination, then rename it into place.

A killed export (SIGKILL, power loss) leaves at most a hidden ``.NAME.partial-*`` folder next to
the destination, never a half-written folder at the destination itself: readers see the old
export or the new one, whole. Leftover partial folders of earlier kills are removed by the next
export to the same destination.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import tempfile

__all__ = ["EXPORT_MARKERS", "atomic_folder", "check_destination"]

#: Files that mark a folder as an export of ours (SavedModel, CTranslate2 model).
EXPORT_MARKERS = ("saved_model.pb", "model.bin")


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
def atomic_folder(path):
    """``with atomic_folder(dest) as tmp:`` write into ``tmp``; on success ``tmp`` becomes
    ``dest`` (an earlier export there is replaced), on an exception nothing at ``dest`` changes.

    ``dest`` may be missing, empty, or an earlier export (a folder with ``saved_model.pb`` or
    ``model.bin``); anything else raises ``FileExistsError`` before anything is written.
    """
    path = pathlib.Path(path).absolute()
    check_destination(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{path.name}.partial-", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0o700
        if path.exists():
            old = pathlib.Path(tempfile.mkdtemp(prefix=f".{path.name}.partial-", dir=path.parent))
            os.rename(path, old / "old")
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
