"""bench/anomaly_live.py's parts: the application and its service (`app`), the faults (`faults`), the
scoring and the table (`score`). A folder of its own, so `make bench`, which runs each bench/*.py,
runs none of them alone."""
