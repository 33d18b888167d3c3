"""A shard daemon without analysis jobs (its API worker forks at the first request): the shards' tests
start several at once on two loaded cores. usage: shard_child.py CONFIG (its [daemon] table)"""

import logging
import sys

from causewatch import config
from causewatch.config import DaemonConfig
from causewatch.daemon.server import Daemon

if __name__ == "__main__":   # the fork server runs this file again as its __main__: it must not serve
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    Daemon(config.load(DaemonConfig, sys.argv[1], "daemon"), jobs=[]).serve()
