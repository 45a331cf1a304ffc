"""Pure planner (no torch): cost model, tree DP, hierarchy DP, LP, simulator."""
