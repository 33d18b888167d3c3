"""causewatch.probe: software probe kits — build, run, predict and rank nodes."""
