"""causewatch.agent: the per-node agent — collectors, phase sampler, task/region API, sender and spool."""
