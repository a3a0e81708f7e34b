"""The GPU domain on top of the engine: driver image tags and the support matrix, label
provenance (NFD, GPU Feature Discovery, the GPU Operator), the label audit, and driver
upgrades in the GPU Operator's order."""
