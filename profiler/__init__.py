"""The profiler: latency curves T_m(n) and drafter acceptance, measured on this device."""
