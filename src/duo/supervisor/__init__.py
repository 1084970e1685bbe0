"""`duo lead`'s serving (duo.supervisor.launch); with --rpc, a supervisor that keeps the API up
while the lead worker that owns the rpc-servers restarts."""
