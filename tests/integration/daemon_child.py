"""A daemon without analysis jobs, for tests that restart it often: it imports only the daemon, then
waits for a line on stdin before it opens the store and binds (a standby started while the previous
daemon still runs restarts in a fraction of a second). usage: daemon_child.py DB ENDPOINT HTTP"""

import logging
import sys

from causewatch.config import DaemonConfig
from causewatch.daemon.server import Daemon

logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
db, bind, http = sys.argv[1:4]
sys.stdin.readline()
Daemon(DaemonConfig(db=db, bind=bind, http=http), jobs=[]).serve()
