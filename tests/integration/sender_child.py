"""A minimal agent for crash tests: spool N task frames, then either hang or flush and exit.

usage: sender_child.py ENDPOINT SPOOL NODE N (hang|flush)
"""

import sys
import time

from causewatch.agent.sender import Sender
from causewatch.config import AgentConfig

endpoint, spool, node, n, mode = sys.argv[1:]
s = Sender(AgentConfig(daemon=endpoint, node=node, spool=spool)).start()
for i in range(int(n)):
    s.send("task", {"app": "crash", "task_id": str(i), "start": float(i), "duration": 1.0})
print(f"spooled {s.boot} {s.unacked}", flush=True)
if mode == "hang":
    time.sleep(3600)
ok = s.flush(60)
s.close()
sys.exit(0 if ok else 1)
