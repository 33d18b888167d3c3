"""`causewatch keys`: make CURVE key pairs for the daemon and its agents."""

import json
import re
import shutil
from pathlib import Path

import zmq.auth

from causewatch.daemon.authorized import public_key
from causewatch.errors import InputError

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")   # a node name: no path separators, no leading dot

EPILOG = """examples:
  causewatch keys /etc/causewatch/keys --name server          # the daemon's pair
  causewatch keys ./agent-keys --name node17                  # an agent's pair
  causewatch keys /etc/causewatch/keys --authorize ./agent-keys/node17.key   # node name node17
  causewatch keys /etc/causewatch/keys --authorize ./agent-keys/a.key --name node17
Daemon folder layout: server.key_secret (+ server.key), authorized/NODE.key (allowed agents). An
authorized key may only send frames as node NODE. A running daemon reads authorized/ again on SIGHUP
(systemctl reload causewatch-daemon) and within a second of a change.
Agent: causewatch agent --node node17 --server-key <daemon>/server.key --client-key node17.key_secret
"""


def add_arguments(p):
    p.add_argument("folder", help="where the key files go")
    p.add_argument("--name", help="key pair name (files NAME.key and NAME.key_secret); with --authorize, the "
                                  "node name the key may send as (default: the key file's name)")
    p.add_argument("--authorize", metavar="PUBLIC_KEY",
                   help="allow an agent: copy its public key to FOLDER/authorized/NODE.key")
    p.add_argument("--json", action="store_true", help="print the created paths as JSON")


def run(args) -> int:
    folder = Path(args.folder)
    if not (args.name or args.authorize):
        raise InputError("give --name NAME (make a key pair) or --authorize PUBLIC_KEY (allow an agent)")
    if args.authorize:
        src = Path(args.authorize)
        name = args.name or src.name.split(".")[0]
        _check_name(name, "--name" if args.name else f"--authorize {src} (its file name)")
        try:
            key = public_key(src)
        except ValueError as e:
            raise InputError(f"--authorize {src}: {e}") from None
        dest = folder / "authorized" / f"{name}.key"
        if dest.exists() and public_key_or_none(dest) != key:
            raise InputError(f"{dest} already authorizes another key for node {name!r}; remove it first")
        dest.parent.mkdir(parents=True, exist_ok=True)
        out = {"authorized": str(shutil.copy(src, dest)), "node": name}
    else:
        _check_name(args.name, "--name")
        if (folder / f"{args.name}.key_secret").exists():
            raise InputError(f"{folder / (args.name + '.key_secret')} exists; refusing to overwrite a key")
        folder.mkdir(parents=True, exist_ok=True)
        public, secret = zmq.auth.create_certificates(str(folder), args.name)
        Path(secret).chmod(0o600)
        out = {"public": str(public), "secret": str(secret)}
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0


def _check_name(name: str, where: str) -> None:
    if not NAME.fullmatch(name):
        raise InputError(f"{where}: {name!r} is not a key name (letters, digits, '_', '.', '-'; no path "
                         "separators, not starting with '.'; at most 128 characters)")


def public_key_or_none(path: Path) -> bytes | None:
    try:
        return public_key(path)
    except ValueError:
        return None
