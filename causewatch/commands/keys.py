"""`causewatch keys`: make CURVE key pairs for the daemon and its agents."""

import json
import shutil
from pathlib import Path

import zmq.auth

from causewatch.errors import InputError

HELP = "make a CURVE key pair (NAME.key public, NAME.key_secret secret); optionally authorize an agent"
EPILOG = """examples:
  causewatch keys /etc/causewatch/keys --name server          # the daemon's pair
  causewatch keys ./agent-keys --name node17                  # an agent's pair
  causewatch keys /etc/causewatch/keys --authorize ./agent-keys/node17.key
Daemon folder layout: server.key_secret (+ server.key), authorized/*.key (allowed agents).
Agent settings: server_key = <daemon>/server.key, client_key = <agent>/node17.key_secret.
"""


def add_arguments(p):
    p.add_argument("folder", help="where the key files go")
    p.add_argument("--name", help="key pair name (files NAME.key and NAME.key_secret)")
    p.add_argument("--authorize", metavar="PUBLIC_KEY", help="copy an agent's public key into FOLDER/authorized/")
    p.add_argument("--json", action="store_true", help="print the created paths as JSON")


def run(args) -> int:
    folder = Path(args.folder)
    if bool(args.name) == bool(args.authorize):
        raise InputError("give exactly one of --name NAME (make a pair) or --authorize PUBLIC_KEY")
    if args.authorize:
        src = Path(args.authorize)
        try:
            zmq.auth.load_certificate(str(src))
        except (OSError, ValueError) as e:
            raise InputError(f"--authorize {src}: not a CURVE public key file ({e})") from None
        (folder / "authorized").mkdir(parents=True, exist_ok=True)
        out = {"authorized": str(shutil.copy(src, folder / "authorized" / src.name))}
    else:
        if (folder / f"{args.name}.key_secret").exists():
            raise InputError(f"{folder / (args.name + '.key_secret')} exists; refusing to overwrite a key")
        folder.mkdir(parents=True, exist_ok=True)
        public, secret = zmq.auth.create_certificates(str(folder), args.name)
        Path(secret).chmod(0o600)
        out = {"public": str(public), "secret": str(secret)}
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0
