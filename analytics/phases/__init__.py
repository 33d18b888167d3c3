"""Program phases: SimPoint 3.2 compatible clustering of basic block vectors and its file formats
(simpoint), and the online phase tracker that labels vectors as they stream in."""
