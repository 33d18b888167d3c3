"""A sender process for the chaos test: N task frames whose values derive from (node, seq), sent in
bursts at full speed, then flush. Prints its boot first. usage: chaos_sender.py ENDPOINT SPOOL NODE N"""

import sys
import time

from causewatch.agent.sender import Sender
from causewatch.config import AgentConfig

endpoint, spool, node, n = sys.argv[1:5]
s = Sender(AgentConfig(daemon=endpoint, node=node, spool=spool, window=16), resend_after=3.0).start()
print(s.boot, flush=True)
for i in range(1, int(n) + 1):
    # the values the audit expects for (node, seq): seq == i, since nothing else is sent
    s.send("task", {"app": "chaos", "task_id": str(i), "start": float(i), "duration": i / 1000 + len(node)})
    if i % 100 == 0:
        time.sleep(0.1)   # bursts, so the daemon's deaths fall across the whole stream
ok = s.flush(120)
s.close()
sys.exit(0 if ok else 1)
