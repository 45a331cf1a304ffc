"""Fast forward passes (docs/guide.md, "Fast forward passes"): the static KV cache
(:mod:`.static_cache`), torch.compile'd steps with bucketed widths (:mod:`.compiled`), ahead-of-time
packages (:mod:`.aot_step`, :mod:`.aot_store`), which step a session gets (:mod:`.model_steps`)
and compiling every width before anything is timed (:mod:`.warmup`)."""
