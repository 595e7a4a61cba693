"""Fleet what-ifs above the engine simulator (issue 22): P/D disaggregation's KV transfer."""
