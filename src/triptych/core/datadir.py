"""Where the embedded data lives: one stable default per user, said aloud by every command that uses it.

The default used to be ``./data``, which follows the current folder: a key minted from another folder
went into a new, empty database the running server never read. Now it is the platform's user data
directory (``~/.local/share/triptych`` on Linux, ``~/Library/Application Support/triptych`` on macOS,
``%LOCALAPPDATA%\\triptych`` on Windows); ``TRIPTYCH_DATA_DIR`` or ``--data-dir`` choose another.
"""

from __future__ import annotations

from pathlib import Path

HELP = (
    "data directory (env TRIPTYCH_DATA_DIR; default: the user data directory, e.g. ~/.local/share/triptych)"
)


def default_data_dir() -> Path:
    from platformdirs import user_data_path  # here: HELP is read by every command's parser

    return user_data_path("triptych", appauthor=False)


def is_fresh(path: Path) -> bool:
    """True when ``path`` does not exist yet or holds nothing: a command is about to start a new store."""
    try:
        return not any(path.iterdir())
    except FileNotFoundError:
        return True
    except NotADirectoryError:
        return False


def describe(path: Path, fresh: bool, holds: str | None = None) -> str:
    """One line naming the data directory, and warning when it is new and empty. ``holds``: what lives
    there when it is not everything (server mode keeps only some surfaces' data in it)."""
    where = path.expanduser().resolve()
    if not fresh:
        return f"data directory {where}"
    before = f"no {holds} was stored here before" if holds else "nothing was stored here before"
    return (
        f"data directory {where} (new and empty: {before}; a server started with another data directory "
        "will not see what is written here; choose with --data-dir or TRIPTYCH_DATA_DIR)"
    )
