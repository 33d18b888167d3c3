"""Program phases: SimPoint 3.2's formats (formats) and clustering (simpoint) of basic block vectors,
keyed sparse vectors (keyed), the merge of close phases (merge), the online tracker (tracker), ARI (ari)."""
