"""Node collectors under node_exporter's metric names: each reads its files once per run and returns
{labelled metric name: value}, raising on what it cannot read (`schedule.NodeCollectors` turns that into
its reason and runs every collector in its own thread against its own deadline)."""
