"""The roster and the unix accounts of a room.

A roster is a text file, one learner per line (``#`` starts a comment). Each name becomes a unix
account and a JupyterHub user, so it must be a name both accept: lowercase letters, digits, ``-``
and ``_``, starting with a letter, 3 to 32 characters. The room creates the accounts that do not
exist yet, with a home only its owner can read (Debian's ``useradd -m`` makes homes
world-readable: learners would read each other's answers), and gives each new account a random
first-use password through ``chpasswd``; an account that already exists (often the teacher's)
keeps its password and its home.
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import stat
import shutil
import subprocess
import tempfile
from pathlib import Path

NAME = re.compile(r"^[a-z][a-z0-9_-]{2,31}$")
#: No 0/O, 1/l/I: a password read off a slip of paper.
ALPHABET = "abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"


class RosterError(ValueError):
    """A roster the room cannot use; the message names the line and the fix."""


def read_roster(path: Path) -> list[str]:
    """The learners' names in ``path``, in order, each once."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise RosterError(f"cannot read the roster {path}: {exc.strerror}; give a text file, "
                          "one learner's account name a line") from None
    names: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        if not NAME.match(name):
            raise RosterError(
                f"{path}, line {n}: {name!r} cannot be an account name: use lowercase letters, "
                "digits, - and _, starting with a letter, 3 to 32 characters (e.g. 'ada' or "
                "'ada-lovelace'), one name a line")
        if name in names:
            raise RosterError(f"{path}, line {n}: {name!r} is on the roster twice")
        names.append(name)
    if not names:
        raise RosterError(f"{path} names no learner: write one account name a line")
    return names


def check_name(name: str, what: str) -> str:
    if not NAME.match(name or ""):
        raise RosterError(f"{what} {name!r} cannot be an account name: lowercase letters, digits, "
                          "- and _, starting with a letter, 3 to 32 characters")
    return name


def exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def home(name: str) -> Path:
    return Path(pwd.getpwnam(name).pw_dir)


def create(name: str, comment: str) -> None:
    """A new account with a private home (mode 0700) and bash as its shell."""
    subprocess.run(["useradd", "--create-home", "-K", "HOME_MODE=0700", "--shell", "/bin/bash",
                    "--comment", comment, name], check=True, capture_output=True, text=True)
    os.chmod(home(name), 0o700)  # useradd before shadow 4.8 ignores HOME_MODE


def new_password(length: int = 10) -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(length))


def set_passwords(passwords: dict[str, str]) -> None:
    """Set every account's password in one ``chpasswd`` (the passwords never appear in ``ps``)."""
    if passwords:
        subprocess.run(["chpasswd"], input="".join(f"{u}:{p}\n" for u, p in passwords.items()),
                       check=True, capture_output=True, text=True)


def others_can_read(path: Path) -> bool:
    """Whether an account other than the owner can list ``path`` (world r-x)."""
    mode = path.stat().st_mode
    return bool(mode & stat.S_IROTH and mode & stat.S_IXOTH)


def remove(name: str) -> None:
    """Delete the account, its home and its processes (``userdel --remove`` refuses while any run)."""
    subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
    uid = pwd.getpwnam(name).pw_uid
    subprocess.run(["userdel", "--remove", name], check=True, capture_output=True, text=True)
    # what the account left in the shared temporary folder: the DSL makes /tmp/NAME/... for
    # some of its caches whatever CUTE_DSL_CACHE_DIR says
    own = Path(tempfile.gettempdir()) / name
    if own.is_dir() and not own.is_symlink() and own.stat().st_uid == uid:
        shutil.rmtree(own, ignore_errors=True)
