"""Latency from datasheets: the roofline model of T(n) (:mod:`.roofline`), the SKU table
(:mod:`.sku`, ``planner/data/skus.yaml``), its fit to a measured profile (:mod:`.calibration`)
and plans for SKUs the machine is not (:mod:`.sku_plans`; docs/planner-math.md, section 7)."""
