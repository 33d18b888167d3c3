"""The NVML collector's series at /metrics under DCGM-exporter's own names (`DCGM_FI_DEV_*`, no
`causewatch_` prefix) and units, so dashboards and rules written for DCGM-exporter find them.

DCGM-exporter's counters keep their names too: they are exposed untyped, as a counter's samples would
gain `_total` (the Prometheus client's rule) and no longer be DCGM's names; `rate()` reads them alike.
"""

from __future__ import annotations

# name -> (DCGM-exporter's type, HELP as its default counters word it, with the unit)
FAMILIES = {
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)"),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "Memory utilization (in %)"),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)"),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)"),
    "DCGM_FI_DEV_FB_TOTAL": ("gauge", "Framebuffer memory in all (in MiB)"),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)"),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("counter", "Total energy consumption since the driver loaded (in mJ)"),
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)"),
    "DCGM_FI_DEV_MEM_CLOCK": ("gauge", "Memory clock frequency (in MHz)"),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)"),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("counter", "Single-bit (corrected) volatile ECC errors"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("counter", "Double-bit (uncorrected) volatile ECC errors"),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("counter", "Single-bit (corrected) persistent ECC errors"),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("counter", "Double-bit (uncorrected) persistent ECC errors"),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error seen since the agent started (0: none)"),
}


def describe(name: str) -> tuple[str, str]:
    """("gauge" or "untyped", HELP) of a DCGM-named series."""
    kind, help = FAMILIES.get(name, ("gauge", f"{name} (DCGM's field)"))
    source = "NVML, the causewatch agent; DCGM-exporter's name"
    return ("untyped" if kind == "counter" else kind), f"{help} ({source}{', a counter' if kind == 'counter' else ''})"
